"""Event-loop stalls: how long a cheap request (ApiVersions) waits on a tablet server while the server
does heavy background work, against the same on the idle server (the reference, measured in the same
run). A stalled asyncio loop delays every request of every client on that server: lookups, produce
acks, follower fetches, heartbeats.

A probe connection sends one ApiVersions every few ms and records each round trip. The background work
is started once the client is done writing, so that what the probe sees is the server's own work, not
the handling of the writes:

* kv snapshot: a primary-key table whose RocksDB memtable holds the rows written since the last
  snapshot (`kv.snapshot.interval`); the snapshot flushes it;
* retention: a log table of many small segments (`log.segment.file-size`) whose `table.log.ttl` has
  passed, deleted by the retention checks (`log.retention.check-interval`);
* drop table: dropping a log table of many segments (the replica is closed and its files removed);
* tiering (a second cluster, the only one with remote log tiering on): copying a log table's closed
  segments to remote storage, trimming the local copies, and expiring remote segments past the TTL;
* crash recovery (a third cluster, default `log.segment.file-size`): the tablet server is killed
  after writing a log table and started again; the log's unflushed tail is re-validated when the
  replica is opened.
* DDL storm on ZooKeeper (a fourth cluster, its metadata on a local ZooKeeper server): the probe
  targets the coordinator while `--tables` CreateTables (default 100, 8 in flight) run against it;
  every one is a ZooKeeper transaction (and an id counter round trip). Skipped when ZooKeeper is not
  installed (scripts/install_zookeeper.sh).

    .venv/bin/python bench/loop_stalls.py [--large] [--json] [--only NAME ...] [--smoke]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from common import Row, cluster, parser, report, wide_batch

from strom.client import Connection
from strom.common.errors import NetworkError
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.launcher import ServerProcess, free_port
from strom.server.zookeeper.local_server import LocalZooKeeper, zookeeper_installed

PROBE_INTERVAL_S = 0.005
SMOKE = False  # --smoke: every scenario, as briefly as it can run
SNAPSHOT_INTERVAL_S = 4.0
RETENTION_CHECK_S = 4.0
PROBE_REQUEST = pb.ApiVersionsRequest(client_software_name="loop-stalls", client_software_version="0")


async def probe(host: str, port: int, seconds: float, stop: asyncio.Event | None = None) -> list[float]:
    """Round trips (ms) of ApiVersions sent every PROBE_INTERVAL_S for `seconds` (or until `stop` is
    set); the first is the connection's own handshake (also an ApiVersions)."""
    started = time.perf_counter()
    connection = await RpcConnection.connect(host, port)
    latencies = [(time.perf_counter() - started) * 1000]
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline and not (stop is not None and stop.is_set()):
            started = time.perf_counter()
            await connection.request(ApiKey.API_VERSIONS, PROBE_REQUEST)
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(PROBE_INTERVAL_S)
    finally:
        connection.close()
    return latencies


def pk_rows(start: int, rows: int) -> pa.RecordBatch:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.record_batch(
        {
            "id": pa.array(ids),
            "name": pa.array([f"user-{i:010d}-{'x' * 60}" for i in ids]),
            "score": pa.array(ids.astype(np.float64)),
        }
    )


async def kv_snapshot_scenario(bootstrap: str, host: str, port: int, rows: int) -> list[float]:
    """Upsert `rows` into a PK table, then probe across the next snapshot rounds."""
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        schema = Schema.from_arrow_schema(pk_rows(0, 1).schema, primary_key=["id"])
        await connection.get_admin().create_table("fluss.kv_stall", TableDescriptor(schema, bucket_count=1))
        writer = (await connection.get_table("fluss.kv_stall")).new_upsert().create_writer()
        for start in range(0, rows, 20_000):
            writer.write_arrow_batch(pk_rows(start, min(20_000, rows - start)))
        await writer.flush()
    return await probe(host, port, SNAPSHOT_INTERVAL_S * 2 + 0.5)


async def write_log_table(connection: Connection, name: str, megabytes: int, ttl: str | None) -> None:
    batch = wide_batch(5_000)
    schema = Schema.from_arrow_schema(batch.schema)
    properties = {"table.log.ttl": ttl} if ttl else {}
    await connection.get_admin().create_table(
        f"fluss.{name}", TableDescriptor(schema, bucket_count=1, properties=properties)
    )
    writer = (await connection.get_table(f"fluss.{name}")).new_append().create_writer()
    written = 0
    while written < megabytes << 20:
        writer.write_arrow_batch(batch)
        written += batch.nbytes
    await writer.flush()


async def retention_scenario(
    bootstrap: str, host: str, port: int, megabytes: int, name: str = "ttl_stall"
) -> list[float]:
    """Write a log table whose TTL is 1 s, then probe across the next retention (or tiering) rounds."""
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        await write_log_table(connection, name, megabytes, "1s")
    return await probe(host, port, RETENTION_CHECK_S * 2 + 0.5)


async def drop_scenario(bootstrap: str, host: str, port: int, megabytes: int) -> list[float]:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        await write_log_table(connection, "drop_stall", megabytes, None)
        probing = asyncio.create_task(probe(host, port, 1.0 if SMOKE else 3.0))
        await asyncio.sleep(0.5)
        await connection.get_admin().drop_table("fluss.drop_stall")
        return await probing


async def crash_recovery_scenario(bootstrap: str, server: ServerProcess, megabytes: int) -> list[float]:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        await write_log_table(connection, "crash_stall", megabytes, None)
    server.kill()
    server.start()
    while True:  # probe from the first moment the restarted server accepts connections
        try:
            return await probe(server.host, server.port, 1.0 if SMOKE else 5.0)
        except NetworkError:
            await asyncio.sleep(0.01)


async def ddl_storm_scenario(bootstrap: str, host: str, port: int, tables: int) -> list[float]:
    """Probe the coordinator while `tables` CreateTables run, 8 at a time."""
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        admin = connection.get_admin()
        schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
        pending = iter(range(tables))
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(host, port, 600.0, stop))
        await asyncio.sleep(0.3)

        async def create_some() -> None:
            for i in pending:
                await admin.create_table(f"fluss.storm_{i}", TableDescriptor(schema, bucket_count=3))

        try:
            await asyncio.gather(*(create_some() for _ in range(8)))
            await asyncio.sleep(0.3)
        finally:
            stop.set()
        return await probing


def summary(latencies: list[float]) -> tuple[float, float]:
    return max(latencies), float(np.percentile(latencies, 99))


SCENARIOS = ("kv snapshot", "retention", "drop table", "tiering", "crash recovery", "ddl storm")


def main() -> None:
    global SNAPSHOT_INTERVAL_S, RETENTION_CHECK_S, SMOKE
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=400_000, help="rows upserted before the kv snapshot")
    p.add_argument("--megabytes", type=int, default=150, help="log MB written before retention / drop")
    p.add_argument("--tables", type=int, default=100, help="CreateTables of the DDL storm on ZooKeeper")
    p.add_argument("--only", nargs="+", choices=SCENARIOS, help="run only these scenarios")
    args = p.parse_args()
    scale = 3 if args.large else 1
    if args.smoke:
        args.rows, args.megabytes, args.tables = 2_000, 2, 4
        SNAPSHOT_INTERVAL_S = RETENTION_CHECK_S = 1.0
        SMOKE = True
    wanted = set(args.only or SCENARIOS)
    config = {
        "kv.snapshot.interval": f"{SNAPSHOT_INTERVAL_S:g}s",
        "log.segment.file-size": "512kb",
        "log.retention.check-interval": f"{RETENTION_CHECK_S:g}s",
        "remote.log.task-interval-duration": "1h",  # no tiering here: the retention figures are its own
    }
    megabytes = args.megabytes * scale
    idle_seconds = 1.0 if args.smoke else 3.0
    results: dict[str, list[float]] = {}
    if wanted & {"kv snapshot", "retention", "drop table"}:
        with cluster(config=config) as running:
            server = running.tablet_servers[0]
            results["idle"] = asyncio.run(probe(server.host, server.port, idle_seconds))
            if "kv snapshot" in wanted:
                results["kv snapshot"] = asyncio.run(
                    kv_snapshot_scenario(running.bootstrap, server.host, server.port, args.rows * scale)
                )
            if "retention" in wanted:
                results["retention"] = asyncio.run(
                    retention_scenario(running.bootstrap, server.host, server.port, megabytes)
                )
            if "drop table" in wanted:
                results["drop table"] = asyncio.run(
                    drop_scenario(running.bootstrap, server.host, server.port, megabytes)
                )
    if "tiering" in wanted:
        tiering = {
            **config,
            "log.retention.check-interval": "1h",
            "remote.log.task-interval-duration": f"{RETENTION_CHECK_S:g}s",
        }
        with cluster(config=tiering) as running:
            server = running.tablet_servers[0]
            results.setdefault("idle", asyncio.run(probe(server.host, server.port, idle_seconds)))
            results["tiering"] = asyncio.run(
                retention_scenario(running.bootstrap, server.host, server.port, megabytes, "tiered_stall")
            )
    if "crash recovery" in wanted:
        recovery = {k: v for k, v in config.items() if k != "log.segment.file-size"}
        with cluster(config=recovery) as running:
            server = running.tablet_servers[0]
            results.setdefault("idle", asyncio.run(probe(server.host, server.port, idle_seconds)))
            results["crash recovery"] = asyncio.run(
                crash_recovery_scenario(running.bootstrap, server, megabytes)
            )
    rows = []
    if results:
        idle_worst, idle_p99 = summary(results.pop("idle"))
        for name, latencies in results.items():
            worst, p99 = summary(latencies)
            rows.append(Row(f"loop stall worst, {name}", worst, idle_worst, "ms", "idle server", False))
            rows.append(Row(f"loop stall p99, {name}", p99, idle_p99, "ms", "idle server", False))
    if "ddl storm" in wanted:
        rows += ddl_storm_rows(args.tables * scale, idle_seconds)
    report(rows, args.json)


def ddl_storm_rows(tables: int, idle_seconds: float) -> list[Row]:
    """The coordinator's stalls during the DDL storm, against the same coordinator idle."""
    if not zookeeper_installed():
        print("ddl storm skipped: ZooKeeper is not installed (scripts/install_zookeeper.sh)", file=sys.stderr)
        return []
    with tempfile.TemporaryDirectory() as tmp:
        zookeeper = LocalZooKeeper(Path(tmp) / "zookeeper", free_port())
        zookeeper.start()
        try:
            zookeeper.wait_until_serving()
            with cluster(zookeeper=zookeeper.address) as running:
                coordinator = running.coordinator
                idle = asyncio.run(probe(coordinator.host, coordinator.port, idle_seconds))
                storm = asyncio.run(
                    ddl_storm_scenario(running.bootstrap, coordinator.host, coordinator.port, tables)
                )
        finally:
            zookeeper.stop()
    (idle_worst, idle_p99), (worst, p99) = summary(idle), summary(storm)
    name = f"ddl storm ({tables} tables, ZooKeeper)"
    return [
        Row(f"loop stall worst, {name}", worst, idle_worst, "ms", "idle coordinator", False),
        Row(f"loop stall p99, {name}", p99, idle_p99, "ms", "idle coordinator", False),
    ]


if __name__ == "__main__":
    main()
