"""One tablet-server process per core: append and lookup throughput of a cluster with 1 and with 2
tablet-server processes on this machine, the same load against each (4 buckets, replication factor
1, so the buckets spread over the processes).

A tablet server is one asyncio process and uses one core; a host with more cores runs more of them
(`strom local --tablet-servers N`, docs/deployment.md). The load comes from `--clients` client
processes (so the clients are not one Python process's bottleneck): pyfluss appending Arrow batches,
then strom.client lookuppers with 64 callers each. Each figure is the median of `--runs`; the ratio is
2 processes / 1 process. Clients share the cores with the servers, so on a 2-core machine the second
process can only take what the clients leave.

    .venv/bin/python bench/processes.py [--mb 100] [--keys 50000] [--seconds 5] [--clients 2] [--json]
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from typing import Any

import fluss
import numpy as np
import pyarrow as pa
from common import Row, cluster, cpu_seconds, median_of, parser, report, wide_batch

from strom.client import Connection
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor

BUCKETS = 4
CALLERS = 64


async def _wait_for(go: Any) -> float:
    """Wait (off the loop) until the parent starts every client together; the start time."""
    await asyncio.to_thread(go.wait)
    return time.time()


def _append_worker(
    bootstrap: str, table: str, batches: int, rows: int, ready: Any, go: Any, out: Any
) -> None:
    async def run() -> None:
        batch = wide_batch(rows)
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        writer = (await connection.get_table(fluss.TablePath("fluss", table))).new_append().create_writer()
        ready.put(None)
        await _wait_for(go)
        for _ in range(batches):
            writer.write_arrow_batch(batch)
        await writer.flush()
        out.put(time.time())
        await connection.close()

    asyncio.run(run())


def _lookup_worker(
    bootstrap: str, keys: int, seconds: float, seed: int, ready: Any, go: Any, out: Any
) -> None:
    async def run() -> None:
        async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
            lookuper = (await connection.get_table("fluss.lookups")).new_lookup().create_lookuper()
            done = 0
            end = float("inf")

            async def caller(own: list[int]) -> None:
                nonlocal done
                for key in itertools.cycle(own):
                    if time.time() >= end:
                        return
                    assert await lookuper.lookup({"id": key}) is not None
                    done += 1

            rng = np.random.default_rng(seed)
            draws = [rng.integers(0, keys, 5000).tolist() for _ in range(CALLERS)]
            ready.put(None)
            end = await _wait_for(go) + seconds
            await asyncio.gather(*(caller(own) for own in draws))
            out.put(done)

    asyncio.run(run())


# per measurement: the tablet servers' CPU seconds per wall second while the clients ran (1.0 = one
# core busy), to show whether the servers or the clients were the bottleneck
SERVER_BUSY: dict[str, list[float]] = {}


def _run_clients(
    context: Any, target: Any, args_of: Any, clients: int, pids: list[int], what: str
) -> tuple[float, list[Any]]:
    """Start `clients` processes, wait until each is connected, start them together: (start time,
    what each put in its queue)."""
    ready, out, go = context.Queue(), context.Queue(), context.Event()
    workers = [context.Process(target=target, args=(*args_of(i), ready, go, out)) for i in range(clients)]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    before = [cpu_seconds(p) for p in pids]
    started = time.time()
    go.set()
    results = [out.get(timeout=600) for _ in workers]
    used = sum(cpu_seconds(p) - b for p, b in zip(pids, before, strict=True))
    SERVER_BUSY.setdefault(what, []).append(used / (time.time() - started))
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"a client process failed (exit code {w.exitcode})")
    return started, results


async def _create_tables(bootstrap: str, batch_schema: pa.Schema, keys: int) -> None:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        admin = connection.get_admin()
        log = TableDescriptor(
            Schema.from_arrow_schema(batch_schema),
            bucket_count=BUCKETS,
            properties={"table.log.arrow.compression.type": "NONE"},
        )
        for run in range(8):
            await admin.create_table(f"fluss.appends_{run}", log)
        schema = Schema.from_arrow_schema(
            pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]),
            primary_key=["id"],
        )
        await admin.create_table("fluss.lookups", TableDescriptor(schema, bucket_count=BUCKETS))
        writer = (await connection.get_table("fluss.lookups")).new_upsert().create_writer()
        ids = np.arange(keys, dtype=np.int64)
        writer.write_arrow(pa.table({"id": ids, "name": [f"user-{i}" for i in range(keys)]}))
        await writer.flush()


def _spread(bootstrap: str) -> list[int]:
    """Buckets led per tablet server (the lookups table), to show the load is spread."""

    async def run() -> list[int]:
        async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
            state = await connection.get_admin().describe_cluster()
            leaders: dict[int, int] = {}
            for table in state.tables:
                for bucket in table.buckets:
                    if bucket.leader is not None:
                        leaders[bucket.leader] = leaders.get(bucket.leader, 0) + 1
            return [leaders[k] for k in sorted(leaders)]

    return asyncio.run(run())


def measure(servers: int, args: Any) -> tuple[float, float, list[int]]:
    """(append MB/s, lookups/s, buckets led per server) of a cluster with `servers` tablet servers."""
    rows = 10_000
    batch = wide_batch(rows)
    per_client = max(1, int(args.mb * 1e6 / batch.nbytes / args.clients))
    context = multiprocessing.get_context("spawn")
    with cluster(tablet_servers=servers) as running:
        bootstrap = running.bootstrap
        pids = [s.pid for s in running.tablet_servers.values() if s.pid is not None]
        asyncio.run(_create_tables(bootstrap, batch.schema, args.keys))
        runs = iter(range(8))

        def append() -> float:
            table = f"appends_{next(runs)}"
            started, ends = _run_clients(
                context,
                _append_worker,
                lambda _: (bootstrap, table, per_client, rows),
                args.clients,
                pids,
                f"{servers} append",
            )
            return per_client * args.clients * batch.nbytes / 1e6 / (max(ends) - started)

        def lookups() -> float:
            _, done = _run_clients(
                context,
                _lookup_worker,
                lambda i: (bootstrap, args.keys, args.seconds, i),
                args.clients,
                pids,
                f"{servers} lookups",
            )
            return sum(done) / args.seconds

        mb_s = median_of(args.runs, append)
        keys_s = median_of(args.runs, lookups)
        return mb_s, keys_s, _spread(bootstrap)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--mb", type=float, default=100, help="MB appended per run (all clients together)")
    p.add_argument("--keys", type=int, default=50_000, help="keys in the lookup table")
    p.add_argument("--seconds", type=float, default=5, help="seconds of lookups per run")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    args = p.parse_args()
    if args.smoke:  # one small cluster: it shows the script works, its figures mean nothing
        args.mb, args.keys, args.seconds, args.runs, args.clients = 2, 1000, 0.5, 1, 1
    one = measure(1, args)
    two = one if args.smoke else measure(2, args)
    if not args.json:
        print(f"buckets led per tablet server: 1 process {one[2]}, 2 processes {two[2]}")
        for what, busy in SERVER_BUSY.items():
            print(f"tablet-server CPU seconds per second, {what}: {', '.join(f'{b:.2f}' for b in busy)}")
    report(
        [
            Row("append, 2 tablet-server processes", two[0], one[0], "MB/s", "1 process"),
            Row("lookups, 2 tablet-server processes", two[1], one[1], "keys/s", "1 process"),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
