"""Schema changes reach every tablet server of a real cluster, even one that missed the
UpdateMetadata of an AddColumn (frozen with SIGSTOP while it ran) or learnt the table long before."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, OffsetSpec, Schema, TableChange, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET
from strom.common.rebalance import ServerTag

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
BUCKETS = 6
# a frozen server is counted gone after this long (tablet-server.session.timeout is 2 s in tests, the
# ZooKeeper session 3 s)
SESSION_EXPIRY = 5


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]]) -> Any:
    # a metadata request the client sends to the frozen server gives up soon and goes elsewhere
    properties = {"bootstrap.servers": cluster.bootstrap, "client.request-timeout": "2s"}

    async def main() -> Any:
        async with await Connection.create(properties) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


def unique(prefix: str) -> TablePath:
    return TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


def freeze(cluster: Cluster, server_id: int) -> int:
    process = cluster.tablet_servers[server_id].process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    return process.pid


@pytest.mark.parametrize("in_zookeeper", [False, True], ids=["sqlite", "zookeeper"])
def test_a_server_frozen_during_add_column_learns_the_new_schema_without_a_restart(
    cluster_factory: Any, in_zookeeper: bool
) -> None:
    """Server 2 sleeps through two AddColumns (its session expires, so the coordinator's
    UpdateMetadata skips it); back, it leads its buckets again and must take writes of schema 2 (a
    table handle opened in between) and 3, and answer lookups and fetches projected on the new
    columns."""
    cluster = cluster_factory(3, zookeeper=in_zookeeper)
    path = unique("frozen_alter")

    async def body(conn: Connection) -> list[Any]:
        admin = conn.get_admin()
        schema = Schema.from_arrow_schema(SCHEMA, primary_key=["id"])
        one_replica = {"table.replication.factor": "1"}  # each server leads buckets of its own
        descriptor = TableDescriptor(schema, bucket_count=BUCKETS, properties=one_replica)
        await admin.create_table(path, descriptor)
        writer = (await conn.get_table(path)).new_upsert().create_writer()
        for i in range(30):
            writer.upsert({"id": i, "name": f"v1-{i}"})
        await writer.flush()

        pid = freeze(cluster, 2)
        try:
            await asyncio.sleep(SESSION_EXPIRY)
            await admin.alter_table(path, [TableChange.add_column("score", "DOUBLE")])
            v2 = await conn.get_table(path)
            await admin.alter_table(path, [TableChange.add_column("note", "STRING")])
        finally:
            os.kill(pid, signal.SIGCONT)
        v3 = await conn.get_table(path)
        assert (v2.schema_id, v3.schema_id) == (2, 3)
        # the changelog read projected on the new column, from every bucket (its leader's too)
        scanner = v3.new_scan().project_by_name(["id", "note"]).create_log_scanner()
        for bucket in range(BUCKETS):
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        async with scanner:
            changes = pa.Table.from_batches(
                [b.batch async for b in scanner.iter_batches(to_end=True)], schema=scanner.arrow_schema
            )
        assert changes.column_names == ["id", "note"] and changes.num_rows == 30
        assert changes.column("note").null_count == 30
        # the returning server registers again and takes its buckets back; the writers retry until then
        old_writer = v2.new_upsert().create_writer()
        new_writer = v3.new_upsert().create_writer()
        for i in range(15):
            old_writer.upsert({"id": i, "name": f"v2-{i}", "score": i / 2})
            new_writer.upsert({"id": 15 + i, "name": f"v3-{15 + i}", "score": i / 2, "note": f"n{i}"})
        await old_writer.flush()
        await new_writer.flush()
        lookuper = v3.new_lookup().create_lookuper()
        return [await lookuper.lookup({"id": i}) for i in range(30)]

    try:
        rows = run(cluster, body)
    except BaseException:
        print(cluster.logs())
        raise
    assert rows == [{"id": i, "name": f"v2-{i}", "score": i / 2, "note": None} for i in range(15)] + [
        {"id": 15 + i, "name": f"v3-{15 + i}", "score": i / 2, "note": f"n{i}"} for i in range(15)
    ]


async def rebalanced(conn: Connection) -> None:
    admin = conn.get_admin()
    rebalance_id = await admin.rebalance()
    for _ in range(600):
        progress = await admin.list_rebalance_progress(rebalance_id)
        if progress is not None and progress.finished:
            assert progress.status == "COMPLETED", progress
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the rebalance did not finish in 60 s")


def test_a_server_given_a_table_again_learns_the_schemas_added_while_it_held_none(
    cluster_factory: Any,
) -> None:
    """Server 2 is drained of every replica of a table, sleeps through an AddColumn (it hosts nothing
    of the table, so nothing tells it when it returns), and is handed replicas of the table again by
    a rebalance: it leads them with the table's current schema."""
    cluster = cluster_factory(3)
    path = unique("regained")

    async def body(conn: Connection) -> list[Any]:
        admin = conn.get_admin()
        schema = Schema.from_arrow_schema(SCHEMA, primary_key=["id"])
        one_replica = {"table.replication.factor": "1"}
        await admin.create_table(path, TableDescriptor(schema, bucket_count=BUCKETS, properties=one_replica))
        writer = (await conn.get_table(path)).new_upsert().create_writer()
        for i in range(30):
            writer.upsert({"id": i, "name": f"v1-{i}"})
        await writer.flush()

        await admin.add_server_tag([2], ServerTag.PERMANENT_OFFLINE)
        await rebalanced(conn)  # server 2 gives up every replica
        pid = freeze(cluster, 2)
        try:
            await asyncio.sleep(SESSION_EXPIRY)
            await admin.alter_table(path, [TableChange.add_column("score", "DOUBLE")])
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(2)  # registered again
        await admin.remove_server_tag([2], ServerTag.PERMANENT_OFFLINE)
        await rebalanced(conn)  # server 2 takes its share (and leaders) back
        hosts = {b.leader for t in (await admin.describe_cluster()).tables for b in t.buckets}
        assert 2 in hosts

        table = await conn.get_table(path)
        writer = table.new_upsert().create_writer()
        for i in range(30):
            writer.upsert({"id": i, "name": f"v2-{i}", "score": i / 2})
        await writer.flush()
        lookuper = table.new_lookup().create_lookuper()
        return [await lookuper.lookup({"id": i}) for i in range(30)]

    try:
        rows = run(cluster, body)
    except BaseException:
        print(cluster.logs())
        raise
    assert rows == [{"id": i, "name": f"v2-{i}", "score": i / 2} for i in range(30)]


def test_partitions_created_at_once_share_their_schemas(shared_cluster: Cluster) -> None:
    """Partitions created together reach a tablet server together, before it knows the table: their
    replicas must share one schema history, so that a writer still on schema 2 of three is taken
    by all of them."""
    path = unique("partitions_at_once")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("region", pa.string())]))
        await admin.create_table(path, TableDescriptor(schema, bucket_count=2, partition_keys=["region"]))
        regions = "abcdef"
        await asyncio.gather(*(admin.create_partition(path, {"region": r}) for r in regions))
        await admin.alter_table(path, [TableChange.add_column("x", "BIGINT")])
        v2 = await conn.get_table(path)
        await admin.alter_table(path, [TableChange.add_column("y", "BIGINT")])
        writer = v2.new_append().create_writer()
        for i in range(60):
            writer.append({"id": i, "region": regions[i % len(regions)], "x": i})
        await writer.flush()
        for region in regions:
            offsets = await admin.list_offsets(path, [0, 1], OffsetSpec.latest(), partition_name=region)
            assert sum(offsets.values()) == 10

    run(shared_cluster, body)
