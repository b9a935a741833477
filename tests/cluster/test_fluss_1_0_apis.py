"""Fluss 1.0's admin APIs through Strom's client on a real cluster: GetTableStats (1059) answered by
bucket leaders, and the producer offsets (1053-1055) that exactly-once writers register on the
coordinator."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.common import errors
from strom.common.table_bucket import TableBucket
from strom.rpc.api import ApiKey


def run(cluster: Cluster, body: Any) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


def test_table_stats_and_producer_offsets(shared_cluster: Cluster) -> None:
    suffix = uuid.uuid4().hex[:8]
    log_path, pk_path = TablePath("fluss", f"stats_log_{suffix}"), TablePath("fluss", f"stats_pk_{suffix}")
    producer = f"spark-job-{suffix}"

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        # advertised by the servers that answer them
        coordinator = await conn.pool.get(*_address(await conn.metadata.coordinator_node()))
        assert {1053, 1054, 1055} <= set(coordinator.api_versions)
        schema = pa.schema([("k", pa.int32()), ("v", pa.string())])
        await admin.create_table(log_path, TableDescriptor(Schema.from_arrow_schema(schema), bucket_count=2))
        await admin.create_table(
            pk_path,
            TableDescriptor(Schema.from_arrow_schema(schema, primary_key=["k"]), bucket_count=2),
        )
        log_table, pk_table = await conn.get_table(log_path), await conn.get_table(pk_path)
        writer = log_table.new_append().create_writer()
        writer.write_arrow(pa.table({"k": pa.array(range(250), pa.int32()), "v": ["x"] * 250}))
        await writer.flush()
        async with pk_table.new_upsert().create_writer() as upserts:
            for k in range(10):
                upserts.upsert({"k": k, "v": "a"})
            for k in range(3):
                upserts.upsert({"k": k, "v": "b"})  # updates: still 10 keys
            upserts.delete({"k": 8})
            upserts.delete({"k": 9})
            upserts.delete({"k": 42})  # not there: nothing changes

        log_stats = await admin.get_table_stats(log_path)
        assert log_stats.row_count == 250 and len(log_stats.bucket_row_counts) == 2
        assert (await admin.get_table_stats(pk_path)).row_count == 8
        leader = conn.metadata.leader_for(TableBucket(log_table.table_id, None, 0))
        assert leader is not None
        server = await conn.pool.get(leader.host, leader.port)
        assert ApiKey.GET_TABLE_STATS in server.api_versions

        table_id = log_table.table_id
        offsets = {TableBucket(table_id, None, 0): 120, TableBucket(table_id, None, 1): 130}
        assert await admin.get_producer_offsets(producer) is None
        assert await admin.register_producer_offsets(producer, offsets) is True
        # a second registration (a restarted job) keeps the first one's offsets
        assert await admin.register_producer_offsets(producer, {TableBucket(table_id, None, 0): 5}) is False
        stored = await admin.get_producer_offsets(producer)
        assert stored is not None and stored.producer_id == producer and stored.offsets == offsets
        with pytest.raises(errors.InvalidProducerIdError, match="Invalid producer ID"):
            await admin.register_producer_offsets("no/slashes", offsets)
        await admin.delete_producer_offsets(producer)
        assert await admin.get_producer_offsets(producer) is None
        # an expired registration is replaced by the next one
        assert await admin.register_producer_offsets(producer, offsets, ttl_ms=1) is True
        await asyncio.sleep(0.01)
        assert await admin.register_producer_offsets(producer, {TableBucket(table_id, None, 0): 7}) is True
        again = await admin.get_producer_offsets(producer)
        assert again is not None and again.offsets == {TableBucket(table_id, None, 0): 7}
        await admin.delete_producer_offsets(producer)

    run(shared_cluster, body)


def _address(node: Any) -> tuple[str, int]:
    return node.host, node.port


def test_dynamic_cluster_config_takes_effect_on_live_servers(cluster_factory: Any) -> None:
    """`strom config set` of log.replica.min-in-sync-replicas-number: acks=all writes are refused
    with NOT_ENOUGH_REPLICAS by the live tablet server (an ISR of 1 is below 3), and accepted again
    after `strom config delete`."""
    from click.testing import CliRunner

    from strom.cli import main as cli
    from strom.record.arrow_batch import build_arrow_log_batch
    from strom.rpc.gen import fluss_api_pb2 as pb

    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={"server.dynamic-config.refresh-interval": "100ms"}
    )
    path = TablePath("fluss", "dyn")
    schema = pa.schema([("k", pa.int32())])
    batch = build_arrow_log_batch(pa.record_batch([pa.array([1, 2], pa.int32())], schema=schema), schema_id=1)

    async def produce_error(conn: Connection) -> int:
        """The error code of an acks=all produce to bucket 0 (0: written)."""
        table = await conn.get_table(path)
        leader = conn.metadata.leader_for(TableBucket(table.table_id, None, 0))
        assert leader is not None
        server = await conn.pool.get(leader.host, leader.port)
        request = pb.ProduceLogRequest(acks=-1, table_id=table.table_id, timeout_ms=5000)
        request.buckets_req.add(bucket_id=0, records=batch)
        answer = (await server.request(ApiKey.PRODUCE_LOG, request)).buckets_resp[0]
        return answer.error_code if answer.HasField("error_code") else 0

    async def until(conn: Connection, code: int) -> None:
        for _ in range(100):
            if await produce_error(conn) == code:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"produce never answered error {code}")

    async def setup(conn: Connection) -> None:
        descriptor = TableDescriptor(Schema.from_arrow_schema(schema), bucket_count=1)
        await conn.get_admin().create_table(path, descriptor)
        await until(conn, 0)

    run(cluster, setup)
    runner = CliRunner()
    bootstrap = ["--bootstrap", cluster.bootstrap]
    key = "log.replica.min-in-sync-replicas-number"
    done = runner.invoke(cli, ["config", "set", *bootstrap, f"{key}=3"])
    assert done.exit_code == 0, done.output
    shown = runner.invoke(cli, ["config", "get", *bootstrap, key])
    assert shown.output.strip() == f"{key}=3\tDYNAMIC_SERVER_CONFIG"
    run(cluster, lambda conn: until(conn, errors.NotEnoughReplicasError.code))
    # options Fluss does not make dynamic, and values that do not parse, are refused with CONFIG_EXCEPTION
    for pair, message in (
        ("table.log.ttl=1h", "not allowed to be changed dynamically"),
        ("kv.shared-rate-limiter.bytes-per-sec=1mb", "cannot apply it on live servers"),
        (f"{key}=many", "Cannot parse"),
    ):
        refused = runner.invoke(cli, ["config", "set", *bootstrap, pair])
        assert refused.exit_code != 0 and "(64)" in refused.output and message in refused.output, (
            refused.output
        )
    done = runner.invoke(cli, ["config", "delete", *bootstrap, key])
    assert done.exit_code == 0, done.output
    run(cluster, lambda conn: until(conn, 0))


def test_kv_snapshot_lease_keeps_a_snapshot_past_retention(cluster_factory: Any) -> None:
    """A leased snapshot outlives kv.snapshot.num-retained (its record and its files) until the
    lease is dropped; a snapshot that does not exist is answered as unavailable."""
    from strom.rpc.gen import fluss_api_pb2 as pb

    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={"kv.snapshot.interval": "100ms", "kv.snapshot.num-retained": "1"}
    )
    path = TablePath("fluss", "leased")
    schema = pa.schema([("k", pa.int32()), ("v", pa.string())])

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        descriptor = TableDescriptor(Schema.from_arrow_schema(schema, primary_key=["k"]), bucket_count=1)
        await admin.create_table(path, descriptor)
        table = await conn.get_table(path)
        bucket = TableBucket(table.table_id, None, 0)
        upserts = table.new_upsert().create_writer()
        written = 0

        async def snapshot_after(previous: int) -> int:
            nonlocal written
            for _ in range(200):
                written += 1
                await upserts.upsert({"k": written, "v": "x"})
                latest = (await admin.get_latest_kv_snapshots(path)).snapshot_id(0)
                if latest is not None and latest > previous:
                    return latest
                await asyncio.sleep(0.05)
            raise AssertionError("no new kv snapshot")

        async def files_of(snapshot_id: int) -> list[str] | None:
            request = pb.GetKvSnapshotMetadataRequest(
                table_id=table.table_id, bucket_id=0, snapshot_id=snapshot_id
            )
            try:
                answer = await admin._call(ApiKey.GET_KV_SNAPSHOT_METADATA, request, read_only=True)
            except errors.KvSnapshotNotExistError:
                return None
            return [f.remote_path.removeprefix("file://") for f in answer.snapshot_files]

        leased = await snapshot_after(-1)
        unavailable = await admin.acquire_kv_snapshot_lease("reader", 60_000, {bucket: leased})
        assert unavailable == {}
        assert await admin.acquire_kv_snapshot_lease("other", 60_000, {bucket: 10_000}) == {bucket: 10_000}
        latest = await snapshot_after(await snapshot_after(leased))
        files = await files_of(leased)  # two snapshots later, with one retained: kept for the lease
        assert files and all(os.path.exists(f) for f in files)
        await admin.drop_kv_snapshot_lease("reader")
        await snapshot_after(await snapshot_after(latest))
        assert await files_of(leased) is None
        own = [f for f in files if f"snap-{leased}/" in f]  # its private files (shared SSTs may live on)
        assert own and not any(os.path.exists(f) for f in own)
        with pytest.raises(errors.NonPrimaryKeyTableError):
            log_path = TablePath("fluss", "not_pk")
            await admin.create_table(
                log_path, TableDescriptor(Schema.from_arrow_schema(schema), bucket_count=1)
            )
            log_id = (await conn.get_table(log_path)).table_id
            await admin.acquire_kv_snapshot_lease("reader", 1000, {TableBucket(log_id, None, 0): 1})

    run(cluster, body)
