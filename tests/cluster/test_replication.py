"""Replication of log tables between real tablet-server processes: acks=all writes survive the loss of
their leader, followers catch up and rejoin the ISR, and reads never see unreplicated data."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster

from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
CONFIG = {"log.replica.max-lag-time": "2s", "log.replica.fetch.wait-max-time": "200ms"}


def rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "v": [f"v{i}" for i in range(start, start + count)],
        }
    )


def bucket_state(cluster: Cluster, table: str) -> dict[int, tuple[int | None, list[int]]]:
    async def main() -> dict[int, tuple[int | None, list[int]]]:
        conn = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
        try:
            request = pb.MetadataRequest()
            request.table_path.add(database_name="fluss", table_name=table)
            response = await conn.request(ApiKey.GET_METADATA, request)
        finally:
            conn.close()
        out = {}
        for b in response.table_metadata[0].bucket_metadata:
            out[b.bucket_id] = (b.leader_id if b.HasField("leader_id") else None, list(b.replica_id))
        return out

    return asyncio.run(main())


def isr_of(cluster: Cluster, table_id: int) -> dict[int, list[int]]:
    """The ISR per bucket as the coordinator's store has it (read through its SQLite file)."""
    import sqlite3

    db = sqlite3.connect(cluster.coordinator.data_dir / "metadata.db")
    try:
        rows_ = db.execute("SELECT bucket_id, isr FROM buckets WHERE table_id = ?", (table_id,)).fetchall()
    finally:
        db.close()
    import json

    return {bucket: json.loads(isr) for bucket, isr in rows_}


def wait_for(predicate: Any, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


async def _session(cluster: Cluster, body: Any) -> Any:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": cluster.bootstrap}))
    try:
        return await asyncio.wait_for(body(connection), 60)
    finally:
        await connection.close()


def session(cluster: Cluster, body: Any) -> Any:
    return asyncio.run(_session(cluster, body))


async def read_all(connection: Any, buckets: int) -> pa.Table:
    table = await connection.get_table(fluss.TablePath("fluss", "replicated"))
    scanner = await table.new_scan().create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    return await scanner.to_arrow()


def test_acknowledged_writes_survive_leader_failures(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=2, config=CONFIG)

    async def create_and_write(connection: Any) -> int:
        admin = connection.get_admin()
        await admin.create_table(
            fluss.TablePath("fluss", "replicated"),
            fluss.TableDescriptor(
                fluss.Schema(SCHEMA), bucket_count=2, properties={"table.replication.factor": "2"}
            ),
        )
        table = await connection.get_table(fluss.TablePath("fluss", "replicated"))
        writer = table.new_append().create_writer()  # acks=all is the official client's default
        writer.write_arrow(rows(0, 3000))
        await writer.flush()
        return table.get_table_info().table_id

    table_id = session(cluster, create_and_write)
    assert all(sorted(isr) == [0, 1] for isr in isr_of(cluster, table_id).values())

    # kill the leader of bucket 0 for real; its follower takes over with every acknowledged row
    leader = bucket_state(cluster, "replicated")[0][0]
    assert leader is not None
    cluster.kill_tablet_server(leader)
    survivor = 1 - leader
    wait_for(
        lambda: all(state[0] == survivor for state in bucket_state(cluster, "replicated").values()),
        what="failover to the surviving replica",
    )
    wait_for(
        lambda: all(isr == [survivor] for isr in isr_of(cluster, table_id).values()),
        what="the dead replica leaving the ISR",
    )

    async def write_more_and_read(connection: Any) -> pa.Table:
        table = await connection.get_table(fluss.TablePath("fluss", "replicated"))
        writer = table.new_append().create_writer()
        writer.write_arrow(rows(3000, 1000))
        await writer.flush()  # with one in-sync replica left, acks=all completes on the survivor alone
        return await read_all(connection, 2)

    assert session(cluster, write_more_and_read).sort_by("id").equals(rows(0, 4000))

    # the killed server returns as a follower, catches up and rejoins the ISR ...
    cluster.start_tablet_server(leader)
    cluster.wait_for_tablet_servers({0, 1})
    wait_for(
        lambda: all(sorted(isr) == [0, 1] for isr in isr_of(cluster, table_id).values()),
        timeout=30,
        what="the returning replica rejoining the ISR",
    )

    # ... so the other one can fail now without losing anything
    cluster.kill_tablet_server(survivor)
    wait_for(
        lambda: all(state[0] == leader for state in bucket_state(cluster, "replicated").values()),
        what="failover back",
    )
    result = session(cluster, lambda c: read_all(c, 2))
    assert result.sort_by("id").equals(rows(0, 4000))
