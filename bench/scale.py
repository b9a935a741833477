"""The coordinator against many tablet servers, simulated: a real `strom coordinator` process and
`--simulated-servers` light tablet servers in this process, each a real RPC server on its own
loopback port speaking the internal protocol (RegisterTabletServer, heartbeats; NotifyLeaderAndIsr,
UpdateMetadata, StopReplica and DescribeReplicas answered as a tablet server would, storing nothing).

Measures, each against the issue's target where it has one:
- start-up: the coordinator's process start until every simulated server is registered;
- CreateTable of `--buckets` buckets in tables of `--buckets-per-table` (replication factor 3), and
  until every simulated server was told its leaderships;
- Metadata p50/p99 of one table (a new connection's first request is not counted);
- the coordinator's resident memory;
- a coordinator killed (SIGKILL) and restarted on the same metadata: until Metadata of every table
  answers again with every bucket led by a registered server;
- a simulated server that dies (its port closed, no more heartbeats): until no bucket names it as
  leader any more.

    .venv/bin/python bench/scale.py [--simulated-servers 100] [--buckets 100000] [--smoke] [--json]

Not simulated yet: AdjustIsr (the simulated leaders never shrink an ISR), the ZooKeeper store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import INT, STRING
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool, FlussError
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext, RpcServer
from strom.server.launcher import COORDINATOR, ServerProcess, free_port

DATABASE = "fluss"  # exists in a new cluster


@dataclass
class SimulatedServer:
    """One tablet server that keeps no data: it registers, heartbeats, and acknowledges what the
    coordinator tells it, counting the leaderships it holds."""

    server_id: int
    coordinator: tuple[str, int]
    pool: ConnectionPool
    leaders: set[tuple[int, int]] = field(default_factory=set)  # (table id, bucket)
    notices: int = 0
    rpc: RpcServer | None = None
    _heartbeat: asyncio.Task[None] | None = None
    _incarnation: int = field(default_factory=lambda: random.getrandbits(62))

    async def start(self) -> None:
        handlers: dict[ApiKey, Any] = {
            ApiKey.NOTIFY_LEADER_AND_ISR: self._notify_leader_and_isr,
            ApiKey.UPDATE_METADATA: self._update_metadata,
            ApiKey.STOP_REPLICA: self._stop_replica,
            ApiKey.DESCRIBE_REPLICAS: self._describe_replicas,
            ApiKey.NOTIFY_LAKE_TABLE_OFFSET: self._ack_lake_offset,
        }
        self.rpc = RpcServer(
            name=f"simulated tablet server {self.server_id}",
            host="127.0.0.1",
            port=0,
            handlers=handlers,
            server_type=None,
        )
        await self.rpc.start()
        self._heartbeat = asyncio.get_running_loop().create_task(self._membership())

    async def stop(self) -> None:
        """The process dies: its port refuses connections and its heartbeats stop."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.rpc is not None:
            await self.rpc.close()

    async def _membership(self) -> None:
        session: int | None = None
        while True:
            try:
                if session is None:
                    assert self.rpc is not None
                    request = internal.RegisterTabletServerRequest(
                        server_id=self.server_id,
                        host="127.0.0.1",
                        port=self.rpc.port,
                        incarnation=self._incarnation,
                        unclean_shutdown=False,
                    )
                    response = await self.pool.request(
                        *self.coordinator, ApiKey.REGISTER_TABLET_SERVER, request, timeout=10
                    )
                    session = response.session_id
                else:
                    response = await self.pool.request(
                        *self.coordinator,
                        ApiKey.TABLET_SERVER_HEARTBEAT,
                        internal.TabletServerHeartbeatRequest(server_id=self.server_id, session_id=session),
                        timeout=10,
                    )
                    if not response.session_valid:
                        session = None
                        continue
            except (FlussError, OSError):
                session = None  # the coordinator is away (restarting): register again
            await asyncio.sleep(0.5)

    async def _notify_leader_and_isr(self, request: Any, ctx: RequestContext) -> Any:
        self.notices += 1
        response = pb.NotifyLeaderAndIsrResponse()
        for entry in request.notify_buckets_leader_req:
            key = (entry.table_bucket.table_id, entry.table_bucket.bucket_id)
            if entry.leader == self.server_id:
                self.leaders.add(key)
            else:
                self.leaders.discard(key)
            response.notify_buckets_leader_resp.add().table_bucket.CopyFrom(entry.table_bucket)
        return response

    async def _update_metadata(self, request: Any, ctx: RequestContext) -> Any:
        return pb.UpdateMetadataResponse()

    async def _stop_replica(self, request: Any, ctx: RequestContext) -> Any:
        response = pb.StopReplicaResponse()
        for entry in request.stop_replicas_req:
            self.leaders.discard((entry.table_bucket.table_id, entry.table_bucket.bucket_id))
            response.stop_replicas_resp.add().table_bucket.CopyFrom(entry.table_bucket)
        return response

    async def _describe_replicas(self, request: Any, ctx: RequestContext) -> Any:
        return internal.DescribeReplicasResponse(server_id=self.server_id)

    async def _ack_lake_offset(self, request: Any, ctx: RequestContext) -> Any:
        return pb.NotifyLakeTableOffsetResponse()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def table_path(i: int) -> pb.PbTablePath:
    return pb.PbTablePath(database_name=DATABASE, table_name=f"scale_{i}")


async def metadata(pool: ConnectionPool, address: tuple[str, int], tables: list[int]) -> Any:
    request = pb.MetadataRequest()
    for i in tables:
        request.table_path.add().CopyFrom(table_path(i))
    return await pool.request(*address, ApiKey.GET_METADATA, request, timeout=30)


async def wait_until(what: str, check: Any, timeout: float) -> float:
    """Seconds until the coroutine function `check` returns true (polled every 50 ms)."""
    started = time.monotonic()
    while True:
        try:
            if await check():
                return time.monotonic() - started
        except (FlussError, OSError):
            pass  # not serving yet
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.05)


def report(figures: dict[str, float], name: str, value: float, quiet: bool) -> None:
    """Record a figure, and print it at once (a later step that never converges still leaves it)."""
    figures[name] = value
    if quiet:
        return
    target = TARGETS.get(name)
    verdict = ""
    if target is not None:
        op, bound = target
        verdict = f"   target {op} {bound:g}: {'met' if value < bound else 'NOT met'}"
    print(f"  {name:32s} {value:10.2f}{verdict}", flush=True)


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, float]:
    port = free_port()
    config = {
        "remote.data.dir": str(data_dir / "remote"),
        "tablet-server.session.timeout": f"{args.session_timeout}s",
    }
    coordinator = ServerProcess(COORDINATOR, 0, "127.0.0.1", port, data_dir / "coordinator", config)
    address = ("127.0.0.1", port)
    pool = ConnectionPool(request_timeout=30)
    sims = [
        SimulatedServer(i, address, ConnectionPool(request_timeout=30)) for i in range(args.simulated_servers)
    ]
    figures: dict[str, float] = {}
    tables = list(range(-(-args.buckets // args.buckets_per_table)))
    try:
        for sim in sims:
            await sim.start()
        started = time.monotonic()
        coordinator.start()

        async def all_registered() -> bool:
            answer = await metadata(pool, address, [])
            return len(answer.tablet_servers) == len(sims)

        await wait_until("registration", all_registered, 120)
        report(figures, "startup_s", time.monotonic() - started, args.json)
        assert coordinator.pid is not None

        schema = Schema([Column("id", INT()), Column("v", STRING())], primary_key=["id"])
        started = time.monotonic()
        for i in tables:
            buckets = min(args.buckets_per_table, args.buckets - i * args.buckets_per_table)
            descriptor = TableDescriptor(
                schema, bucket_count=buckets, properties={"table.replication.factor": "3"}
            )
            request = pb.CreateTableRequest(table_json=descriptor.to_json_bytes(), ignore_if_exists=False)
            request.table_path.CopyFrom(table_path(i))
            await pool.request(*address, ApiKey.CREATE_TABLE, request, timeout=120)
        report(figures, "create_tables_s", time.monotonic() - started, args.json)

        async def all_told() -> bool:
            return sum(len(s.leaders) for s in sims) == args.buckets

        await wait_until("leaderships pushed", all_told, 300)
        report(figures, "create_until_leaders_pushed_s", time.monotonic() - started, args.json)

        latencies = []
        for n in range(args.metadata_requests):
            t = time.perf_counter()
            await metadata(pool, address, [tables[n % len(tables)]])
            latencies.append(time.perf_counter() - t)
        latencies.sort()
        report(figures, "metadata_p50_ms", statistics.median(latencies) * 1000, args.json)
        p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
        report(figures, "metadata_p99_ms", p99 * 1000, args.json)
        report(figures, "coordinator_rss_mb", rss_mb(coordinator.pid), args.json)

        async def every_bucket_led(excluding: int | None = None) -> bool:
            live = {s.server_id for s in sims if excluding is None or s.server_id != excluding}
            answer = await metadata(pool, address, tables)
            if len(answer.table_metadata) != len(tables):
                return False
            registered = {s.node_id for s in answer.tablet_servers}
            for table in answer.table_metadata:
                for b in table.bucket_metadata:
                    if (
                        not b.HasField("leader_id")
                        or b.leader_id not in live
                        or b.leader_id not in registered
                    ):
                        return False
            return True

        # a coordinator failover: killed, restarted on the same metadata
        coordinator.kill()
        await pool.close()
        started = time.monotonic()
        coordinator.start()
        restart = await wait_until("restart", every_bucket_led, args.wait)
        report(figures, "coordinator_restart_s", restart, args.json)

        # a tablet server dies
        victim = sims[0]
        await victim.stop()
        moved = await wait_until("leaders moved", lambda: every_bucket_led(victim.server_id), args.wait)
        report(figures, "dead_server_leaders_moved_s", moved, args.json)
    finally:
        for sim in sims:
            await sim.stop()
            await sim.pool.close()
        await pool.close()
        coordinator.stop()
    return figures


TARGETS = {
    "coordinator_restart_s": ("<", 20.0),
    "dead_server_leaders_moved_s": ("<", 5.0),
    "metadata_p99_ms": ("<", 50.0),
}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    p.add_argument("--simulated-servers", type=int, default=100)
    p.add_argument("--buckets", type=int, default=100_000)
    p.add_argument("--buckets-per-table", type=int, default=1000)
    p.add_argument("--metadata-requests", type=int, default=200)
    p.add_argument("--session-timeout", type=int, default=10, help="tablet-server.session.timeout, s")
    p.add_argument("--wait", type=float, default=300, help="longest wait for the restart or failover, s")
    p.add_argument("--keep", action="store_true", help="keep the data directory (the coordinator's log)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument(
        "--smoke", action="store_true", help="the smallest run: it shows the benchmark still works"
    )
    args = p.parse_args()
    if args.smoke:
        args.simulated_servers, args.buckets, args.buckets_per_table, args.metadata_requests = 4, 24, 12, 20
    data_dir = Path(tempfile.mkdtemp(prefix="strom-scale-"))
    if not args.json:
        print(
            f"{args.simulated_servers} simulated tablet servers, {args.buckets} buckets",
            "(replication factor 3)",
        )
    try:
        figures = asyncio.run(run(args, data_dir))
    finally:
        if args.keep:
            print(f"data directory kept: {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps({"simulated_servers": args.simulated_servers, "buckets": args.buckets, **figures}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
