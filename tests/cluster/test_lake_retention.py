"""Lifecycle-linked retention on a real cluster without a tiering service (issue 24): a lake-enabled
table's log segments outlive table.log.ttl, locally and in remote storage, on the leader and the
follower, until the lake's committed offsets (driven here through the coordinator's real
CommitLakeTableSnapshot API) cover them; table.datalake.retention-hold.max-duration lets them go
anyway, loudly; table.datalake.remote-log.drop-tiered drops lake-covered remote segments early; and a
restarted server learns the lake offsets from the coordinator."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from harness import Cluster
from test_lake_tiering_protocol import lake_config

from strom.client import Connection, OffsetSpec, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal

ROWS = 3000
BATCH = 100
SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    # incompressible-ish payloads, so that 3,000 rows span several 8 KiB segments
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "payload": [f"{i * 7919:x}-{i * i:x}" * 3 for i in ids]}
    )


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


async def replicas(cluster: Cluster, table_id: int) -> dict[int, Any]:
    """Server id -> its StatusReplica of bucket 0 of the table."""
    found = {}
    for server_id, server in cluster.tablet_servers.items():
        conn = await RpcConnection.connect(server.host, server.port)
        try:
            answer = await conn.request(ApiKey.DESCRIBE_REPLICAS, internal.DescribeReplicasRequest())
        finally:
            conn.close()
        for r in answer.replicas:
            if r.table_id == table_id and r.bucket_id == 0:
                found[server_id] = r
    return found


async def commit_lake(cluster: Cluster, table_id: int, snapshot_id: int, offset: int) -> None:
    conn = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
    try:
        request = pb.CommitLakeTableSnapshotRequest()
        info = request.tables_req.add(table_id=table_id, snapshot_id=snapshot_id)
        info.buckets_req.add(bucket_id=0, log_end_offset=offset)
        answer = await conn.request(ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT, request)
        assert answer.table_resp[0].error_code == 0, answer
    finally:
        conn.close()


def hold_expired_metric(cluster: Cluster, server_id: int, table: str) -> float:
    log = (cluster.base_dir / "logs" / f"tablet-server-{server_id}.log").read_text()
    port = re.search(r"Prometheus metrics on http://[\d.]+:(\d+)/metrics", log)
    assert port is not None, "the tablet server started no Prometheus reporter"
    text = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("fluss_tabletserver_table_lakeRetentionHoldExpired_total{")
            and f'table="{table}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_lake_enabled_log_waits_for_the_lake(cluster_factory: Any, tmp_path: Path) -> None:
    config = {
        **lake_config(tmp_path),
        "log.retention.check-interval": "1s",
        "log.segment.file-size": "8kb",
        "remote.log.task-interval-duration": "1s",
        "metrics.reporters": "prometheus",
        "metrics.reporter.prometheus.port": "0",  # the OS picks; the log says which
    }
    cluster: Cluster = cluster_factory(tablet_servers=2, config=config)
    lake = {
        "table.datalake.enabled": "true",
        "table.datalake.freshness": "1h",
        "table.replication.factor": "2",
    }
    tables = {
        "held": {**lake, "table.log.ttl": "2s"},
        "bounded": {**lake, "table.log.ttl": "2s", "table.datalake.retention-hold.max-duration": "3s"},
        "dropped": {**lake, "table.log.ttl": "1h", "table.datalake.remote-log.drop-tiered": "true"},
    }

    async def main() -> int:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            admin = conn.get_admin()
            ids = {}
            for name, properties in tables.items():
                path = TablePath("fluss", name)
                await admin.create_table(
                    path,
                    TableDescriptor(Schema.from_arrow_schema(SCHEMA), bucket_count=1, properties=properties),
                )
                ids[name] = (await admin.get_table_info(path)).table_id
                writer = (await conn.get_table(path)).new_append().create_writer()
                for start in range(0, ROWS, BATCH):  # one batch per flush: many batches, several segments
                    await writer.write_arrow(rows(start, BATCH))
                    await writer.flush()

            async def earliest(name: str) -> int:
                return (await admin.list_offsets(TablePath("fluss", name), [0], OffsetSpec.earliest()))[0]

            # the bound fires: past ttl + max-duration the segments go although the lake has nothing
            async def bounded_gone() -> bool:
                return await earliest("bounded") == ROWS

            await eventually(bounded_gone, "the retention hold bound to delete the bounded table's log")
            assert (
                hold_expired_metric(cluster, leader_of(await replicas(cluster, ids["bounded"])), "bounded")
                > 0
            )

            # meanwhile every record of the unbounded table is still there, well past its 2 s TTL,
            # on both replicas, and retention reports what it holds for the lake
            # (the leader keeps the oldest segments in remote storage only, its follower locally)
            held = await replicas(cluster, ids["held"])
            assert await earliest("held") == 0
            follower = next(r for r in held.values() if not r.leader)
            assert follower.log_start_offset == 0 and follower.held_local_segments > 0, held
            leader = held[leader_of(held)]
            assert leader.held_local_segments > 0 and leader.held_local_bytes > 0, held
            assert leader.held_remote_segments > 0 and leader.held_remote_bytes > 0, held
            table = await conn.get_table(TablePath("fluss", "held"))
            scanner = table.new_scan().create_log_scanner()
            scanner.subscribe(0, EARLIEST_OFFSET)
            everything = await scanner.to_arrow()
            assert sorted(everything.column("id").to_pylist()) == list(range(ROWS))

            # the lake catches up halfway: what it covers may go, nothing above it
            half = ROWS // 2
            await commit_lake(cluster, ids["held"], 1, half)

            async def trimmed_to_half() -> bool:
                return 0 < await earliest("held") <= half

            await eventually(trimmed_to_half, "retention to trim the held table up to the lake offset")
            await asyncio.sleep(2.5)  # two more retention passes: still nothing above the lake offset
            assert 0 < await earliest("held") <= half
            # then all of it: every replica's log is trimmed to its end (followers are told too)
            await commit_lake(cluster, ids["held"], 2, ROWS)

            async def all_trimmed() -> bool:
                now = await replicas(cluster, ids["held"])
                return await earliest("held") == ROWS and all(
                    r.log_start_offset == ROWS for r in now.values()
                )

            await eventually(all_trimmed, "retention to trim the held table's log on every replica")

            # drop-tiered: the remote copy of what the lake covers goes long before its 1 h TTL
            async def partly_remote() -> bool:
                now = await replicas(cluster, ids["dropped"])
                return now[leader_of(now)].log_start_offset > 0 and await earliest("dropped") == 0

            await eventually(partly_remote, "the dropped table's oldest segments to move to remote storage")
            await commit_lake(cluster, ids["dropped"], 1, ROWS)

            async def remote_dropped() -> bool:
                now = await replicas(cluster, ids["dropped"])
                return await earliest("dropped") == now[leader_of(now)].log_start_offset > 0

            await eventually(remote_dropped, "the lake-covered remote segments to be dropped")
            return ids["held"]

    held_id = asyncio.run(asyncio.wait_for(main(), 120))

    # a restarted server learns the lake offsets from the coordinator, not from the next commit
    follower_id = next(i for i, r in asyncio.run(replicas(cluster, held_id)).items() if not r.leader)
    cluster.kill_tablet_server(follower_id)
    cluster.start_tablet_server(follower_id)

    async def learnt() -> bool:
        replica = (await replicas(cluster, held_id)).get(follower_id)
        return replica is not None and replica.lake_log_end_offset == ROWS

    asyncio.run(eventually(learnt, "the restarted follower to learn the lake offset", timeout=20))
    logs = "\n".join(p.read_text() for p in (cluster.base_dir / "logs").glob("tablet-server-*.log"))
    forced = [line for line in logs.splitlines() if "LAKE RETENTION HOLD EXPIRED" in line]
    assert forced and all("fluss.bounded" in line for line in forced), forced


def leader_of(found: dict[int, Any]) -> int:
    return next(server_id for server_id, r in found.items() if r.leader)
