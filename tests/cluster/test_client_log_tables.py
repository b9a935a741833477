"""Strom's own client writing and reading log tables on a real cluster: append writers (rows, Arrow,
pandas; bucket assigners; partitions), log scanners (projection, bounded reads, filters), the idempotent
writer across a killed leader, and the synchronous facade."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import fluss
import pandas as pd
import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET, ScanBatch, col
from strom.client.sync import SyncConnection
from strom.client.writer.bucket_assigner import HashBucketAssigner
from strom.common import errors

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("tag", pa.int32())])


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]], **settings: str) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap, **settings}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


def unique(prefix: str) -> TablePath:
    return TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name-{i}" for i in ids],
            "score": [i * 0.5 for i in ids],
            "tag": pa.array([i % 7 for i in ids], pa.int32()),
        }
    )


def as_dicts(start: int, count: int) -> list[dict[str, Any]]:
    return rows(start, count).to_pylist()


async def create(
    conn: Connection, path: TablePath, *, buckets: int, schema: pa.Schema = SCHEMA, **descriptor: Any
) -> Any:
    await conn.get_admin().create_table(
        path, TableDescriptor(Schema.from_arrow_schema(schema), bucket_count=buckets, **descriptor)
    )
    return await conn.get_table(path)


async def read_batches(table: Any, subscriptions: dict[Any, int], **scan: Any) -> list[ScanBatch]:
    """Every batch up to the current end of the subscribed buckets."""
    builder = table.new_scan()
    if "names" in scan:
        builder = builder.project_by_name(scan["names"])
    if "filter" in scan:
        builder = builder.filter(scan["filter"])
    scanner = builder.create_log_scanner()
    for key, offset in subscriptions.items():
        if isinstance(key, tuple):
            scanner.subscribe_partition(key[0], key[1], offset)
        else:
            scanner.subscribe(key, offset)
    async with scanner:
        return [b async for b in scanner.iter_batches(to_end=True)]


def check_dense(batches: list[ScanBatch]) -> dict[Any, list[dict[str, Any]]]:
    """Rows per bucket, asserting offsets run 0, 1, 2... without gaps in every bucket."""
    per_bucket: dict[Any, list[dict[str, Any]]] = {}
    next_offset: dict[Any, int] = {}
    for batch in batches:
        assert batch.base_offset == next_offset.get(batch.bucket, 0), f"gap in {batch.bucket}"
        next_offset[batch.bucket] = batch.next_offset
        assert batch.offsets().to_pylist() == list(range(batch.base_offset, batch.next_offset))
        per_bucket.setdefault(batch.bucket, []).extend(batch.batch.to_pylist())
    return per_bucket


# --------------------------------------------------------------------------------------- writing


def test_rows_arrow_and_pandas_round_trip_in_order(shared_cluster: Cluster) -> None:
    path = unique("rt")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=3)
        writer = table.new_append().create_writer()
        results = [writer.append(r) for r in as_dicts(0, 100)]
        results.append(writer.append((100, "name-100", 50.0, 2)))  # a tuple in column order
        results.append(writer.write_arrow(rows(101, 3000)))
        results.append(writer.write_arrow_batch(rows(3101, 500).to_batches()[0]))
        results.append(writer.write_pandas(rows(3601, 400).to_pandas()))
        # columns in another order and a wider type are conformed to the table schema
        shuffled = (
            rows(4001, 99)
            .select(["tag", "score", "name", "id"])
            .cast(
                pa.schema(
                    [
                        ("tag", pa.int64()),
                        ("score", pa.float64()),
                        ("name", pa.large_string()),
                        ("id", pa.int64()),
                    ]
                )
            )
        )
        results.append(writer.write_arrow(shuffled))
        await writer.flush()
        assert all(r.done() and r.exception() is None for r in results)
        await results[0]  # awaiting an acknowledged result returns at once

        batches = await read_batches(table, {b: EARLIEST_OFFSET for b in range(3)})
        per_bucket = check_dense(batches)
        everything = pa.Table.from_batches([b.batch for b in batches])
        assert everything.sort_by("id").equals(rows(0, 4100))
        # one writer, written in id order: each bucket holds its ids in that order
        for bucket_rows in per_bucket.values():
            ids = [r["id"] for r in bucket_rows]
            assert ids == sorted(ids)
        assert all(b.change_types is None and b.timestamp > 0 for b in batches)

    run(shared_cluster, body)


def test_sticky_and_round_robin_assigners(shared_cluster: Cluster) -> None:
    sticky_small, sticky_big, round_robin = unique("sticky"), unique("sticky"), unique("rr")

    async def sticky(conn: Connection) -> None:
        small = await create(conn, sticky_small, buckets=4)
        writer = small.new_append().create_writer()
        for r in as_dicts(0, 50):
            writer.append(r)
        await writer.flush()
        offsets = await conn.get_admin().list_offsets(sticky_small, range(4), _latest())
        assert sorted(offsets.values()) == [0, 0, 0, 50]  # one batch, one bucket

    async def sticky_moves(conn: Connection) -> None:
        big = await create(conn, sticky_big, buckets=4)
        writer = big.new_append().create_writer()
        writer.write_arrow(rows(0, 20000))  # many 4 KiB batches: the sticky bucket moves on
        await writer.flush()
        offsets = await conn.get_admin().list_offsets(sticky_big, range(4), _latest())
        assert sum(offsets.values()) == 20000 and sum(1 for v in offsets.values() if v) >= 2

    async def rr(conn: Connection) -> None:
        table = await create(conn, round_robin, buckets=3)
        writer = table.new_append().create_writer()
        for r in as_dicts(0, 300):
            writer.append(r)
        await writer.flush()
        offsets = await conn.get_admin().list_offsets(round_robin, range(3), _latest())
        assert sorted(offsets.values()) == [100, 100, 100]

    run(shared_cluster, sticky)
    run(shared_cluster, sticky_moves, **{"client.writer.batch-size": "4kb"})
    run(shared_cluster, rr, **{"client.writer.bucket.no-key-assigner": "round_robin"})


def _latest() -> Any:
    from strom.client import OffsetSpec

    return OffsetSpec.latest()


def test_hash_assignment_equals_pyfluss(shared_cluster: Cluster) -> None:
    """pyfluss writes with bucket keys; every row we read sits in the bucket our assigner computes,
    for rows one by one and column-wise, and rows we write land where pyfluss would put them."""
    by_pyfluss, by_us = unique("hash_py"), unique("hash_us")
    buckets = 5

    async def pyfluss_writes() -> None:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": shared_cluster.bootstrap})
        )
        try:
            admin = connection.get_admin()
            for path in (by_pyfluss, by_us):
                await admin.create_table(
                    fluss.TablePath(path.database_name, path.table_name),
                    fluss.TableDescriptor(
                        fluss.Schema(SCHEMA), bucket_count=buckets, bucket_keys=["name", "tag"]
                    ),
                )
            table = await connection.get_table(
                fluss.TablePath(by_pyfluss.database_name, by_pyfluss.table_name)
            )
            writer = table.new_append().create_writer()
            writer.write_arrow(rows(0, 3000))
            for r in as_dicts(3000, 200):
                writer.append(r)
            await writer.flush()
        finally:
            await connection.close()

    asyncio.run(pyfluss_writes())

    async def body(conn: Connection) -> None:
        table = await conn.get_table(by_pyfluss)
        assigner = HashBucketAssigner(table.info, table.arrow_schema)
        batches = await read_batches(table, {b: EARLIEST_OFFSET for b in range(buckets)})
        assert sum(b.num_rows for b in batches) == 3200
        used = set()
        for batch in batches:
            used.add(batch.bucket.bucket)
            assert set(assigner.buckets_of_batch(batch.batch).tolist()) == {batch.bucket.bucket}
            for row in batch.batch.to_pylist():
                assert assigner.bucket_of_row(list(row.values())) == batch.bucket.bucket
        assert len(used) == buckets

        ours = await conn.get_table(by_us)
        writer = ours.new_append().create_writer()
        writer.write_arrow(rows(0, 3000))
        for r in as_dicts(3000, 200):
            writer.append(r)
        await writer.flush()
        mine = await read_batches(ours, {b: EARLIEST_OFFSET for b in range(buckets)})
        placement = {row["id"]: b.bucket.bucket for b in mine for row in b.batch.to_pylist()}
        theirs = {row["id"]: b.bucket.bucket for b in batches for row in b.batch.to_pylist()}
        assert placement == theirs

    run(shared_cluster, body)


def test_partitioned_tables_route_rows_and_refuse_missing_partitions(shared_cluster: Cluster) -> None:
    path = unique("parted")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.int32())])

    async def body(conn: Connection) -> None:
        table = await create(
            conn, path, buckets=2, schema=schema, partition_keys=["region", "day"], bucket_keys=["id"]
        )
        admin = conn.get_admin()
        for region in ("eu", "us"):
            await admin.create_partition(path, {"region": region, "day": "1"})
        writer = table.new_append().create_writer()
        # one Arrow batch spanning both partitions, plus rows
        mixed = pa.record_batch(
            {
                "id": pa.array(range(1000), pa.int64()),
                "region": ["eu" if i % 3 else "us" for i in range(1000)],
                "day": pa.array([1] * 1000, pa.int32()),
            }
        )
        writer.write_arrow_batch(mixed)
        for i in range(1000, 1010):
            writer.append({"id": i, "region": "us", "day": 1})
        await writer.flush()

        lost = writer.append({"id": 5000, "region": "mars", "day": 1})
        kept = writer.append({"id": 5001, "region": "eu", "day": 1})
        with pytest.raises(errors.PartitionNotExistError, match=r"mars.*dynamic-create-partition"):
            await writer.flush()
        with pytest.raises(errors.PartitionNotExistError, match="mars"):
            await lost
        await kept
        with pytest.raises(ValueError, match="null"):
            writer.append({"id": 1, "region": None, "day": 1})

        partitions = {p.partition_name: p.partition_id for p in await admin.list_partition_infos(path)}
        subscriptions = {(pid, b): EARLIEST_OFFSET for pid in partitions.values() for b in range(2)}
        batches = await read_batches(table, subscriptions)
        check_dense(batches)
        got: dict[str, set[int]] = {}
        name_of: dict[int | None, str] = {pid: name for name, pid in partitions.items()}
        for batch in batches:
            regions = set(batch.batch.column("region").to_pylist())
            assert regions == {name_of[batch.bucket.partition_id].split("$")[0]}
            got.setdefault(name_of[batch.bucket.partition_id], set()).update(
                batch.batch.column("id").to_pylist()
            )
        assert got["us$1"] == {i for i in range(1000) if i % 3 == 0} | set(range(1000, 1010))
        assert got["eu$1"] == {i for i in range(1000) if i % 3} | {5001}
        assert "mars$1" not in partitions

    run(shared_cluster, body, **{"client.writer.dynamic-create-partition.enabled": "false"})


def test_writes_to_missing_partitions_create_them(shared_cluster: Cluster) -> None:
    """client.writer.dynamic-create-partition.enabled (default true): append and upsert writers
    create the partitions their rows name, as Fluss's client does."""
    log_path, kv_path = unique("dyn_log"), unique("dyn_kv")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.int32())])

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        log_table = await create(conn, log_path, buckets=2, schema=schema, partition_keys=["region", "day"])
        await admin.create_table(
            kv_path,
            TableDescriptor(
                Schema.from_arrow_schema(schema, ["id", "region"]), bucket_count=2, partition_keys=["region"]
            ),
        )
        kv_table = await conn.get_table(kv_path)
        assert await admin.list_partition_infos(log_path) == []

        writer = log_table.new_append().create_writer()
        writer.write_arrow_batch(
            pa.record_batch(
                {
                    "id": pa.array(range(100), pa.int64()),
                    "region": ["eu" if i % 2 else "us" for i in range(100)],
                    "day": pa.array([i % 3 for i in range(100)], pa.int32()),
                }
            )
        )
        await writer.flush()
        created = {p.partition_name: p.partition_id for p in await admin.list_partition_infos(log_path)}
        assert set(created) == {f"{r}${d}" for r in ("eu", "us") for d in range(3)}
        subscriptions = {(pid, b): EARLIEST_OFFSET for pid in created.values() for b in range(2)}
        batches = await read_batches(log_table, subscriptions)
        ids = sorted(i for b in batches for i in b.batch.column("id").to_pylist())
        assert ids == list(range(100))

        async with kv_table.new_upsert().create_writer() as upserts:
            for i in range(10):
                upserts.upsert({"id": i, "region": "asia" if i % 2 else "emea", "day": i})
        assert {p.partition_name for p in await admin.list_partition_infos(kv_path)} == {"asia", "emea"}
        lookuper = kv_table.new_lookup().create_lookuper()
        assert await lookuper.lookup({"id": 3, "region": "asia"}) == {"id": 3, "region": "asia", "day": 3}

    run(shared_cluster, body)


def test_bad_input_is_refused_at_the_call(shared_cluster: Cluster) -> None:
    path = unique("bad")
    pk_path = unique("pk")
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, schema=strict)
        writer = table.new_append().create_writer()
        with pytest.raises(ValueError, match="unknown column"):
            writer.append({"id": 1, "nope": 2})
        with pytest.raises(TypeError, match="'id'"):
            writer.append({"id": "one"})
        with pytest.raises(ValueError, match="NOT NULL"):
            writer.append({"name": "x"})
        with pytest.raises(ValueError, match="2 columns"):
            writer.append((1,))
        with pytest.raises(ValueError, match="NOT NULL"):
            writer.write_arrow(pa.table({"name": ["a"]}))
        with pytest.raises(ValueError, match="'name'"):
            writer.write_arrow(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array([[1]])}))
        writer.append({"id": 7})  # a missing nullable column is null
        await writer.flush()
        assert (await read_all(table)).to_pylist() == [{"id": 7, "name": None}]

        pk = Schema.from_arrow_schema(pa.schema([("k", pa.int32()), ("v", pa.string())]), primary_key=["k"])
        await conn.get_admin().create_table(pk_path, TableDescriptor(pk, bucket_count=1))
        with pytest.raises(errors.NonPrimaryKeyTableError):
            (await conn.get_table(pk_path)).new_append()

    run(shared_cluster, body)


async def read_all(table: Any) -> pa.Table:
    scanner = table.new_scan().create_log_scanner()
    scanner.subscribe_buckets({b: EARLIEST_OFFSET for b in range(table.bucket_count)})
    async with scanner:
        return await scanner.to_arrow()


# --------------------------------------------------------------------------------------- reading


def test_projection_bounded_reads_and_positions(shared_cluster: Cluster) -> None:
    path = unique("bounded")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1)
        writer = table.new_append().create_writer()
        for start in range(0, 1000, 100):  # ten log batches of 100 rows
            writer.write_arrow(rows(start, 100))
            await writer.flush()

        # [start, end) across batch boundaries, with a projection in a new order
        scanner = table.new_scan().project_by_name(["tag", "id"]).create_log_scanner()
        scanner.subscribe(0, 150, end=420)
        assert scanner.arrow_schema.names == ["tag", "id"]
        got = [b async for b in scanner.iter_batches()]
        assert scanner.finished
        ids = [i for b in got for i in b.batch.column("id").to_pylist()]
        assert ids == list(range(150, 420))
        assert [o for b in got for o in b.offsets().to_pylist()] == ids
        assert got[0].batch.schema.names == ["tag", "id"]
        await scanner.close()

        # stop_at on earliest, project by index; an empty range is finished at once
        scanner = table.new_scan().project([3, 1]).create_log_scanner()
        scanner.subscribe(0, EARLIEST_OFFSET)
        scanner.stop_at({0: 30})
        result = pa.Table.from_batches([b.batch async for b in scanner.iter_batches()])
        assert result.column_names == ["tag", "name"]
        assert result.column("name").to_pylist() == [f"name-{i}" for i in range(30)]
        assert scanner.positions() == {scanner.subscribed[0]: 30}
        scanner.subscribe(0, 500, end=500)
        assert scanner.finished and await scanner.poll_batches(10) == []
        await scanner.close()

        # poll() hands out at most max-poll-records, continuing where it stopped
        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe(0, 990)
        records = await scanner.poll(5000)
        assert [r.offset for r in records.all()] == list(range(990, 1000))
        assert all(r.change_type.short_string == "+A" and r.row["id"] == r.offset for r in records.all())
        assert (await scanner.poll(100)).is_empty()
        writer.write_arrow(rows(1000, 5))
        more = await scanner.poll(5000)  # long-poll picks up new data
        assert [r.row["id"] for r in more.all()] == list(range(1000, 1005))
        assert scanner.high_watermarks()[scanner.subscribed[0]] == 1005
        await scanner.close()

        # offsets beyond the log are an error naming the bucket and the offset
        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe(0, 10_000)
        with pytest.raises(errors.LogOffsetOutOfRangeError, match="10000"):
            await scanner.poll(5000)
        await scanner.close()

        with pytest.raises(errors.InvalidColumnProjectionError):
            table.new_scan().project([9])
        with pytest.raises(errors.InvalidColumnProjectionError):
            table.new_scan().project_by_name(["nope"])

    run(shared_cluster, body, **{"client.scanner.log.max-poll-records": "40"})


def test_filter_prunes_batches_and_reads_past_them(shared_cluster: Cluster) -> None:
    path = unique("filtered")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1)
        writer = table.new_append().create_writer()
        for start in range(0, 600, 100):
            batch = rows(start, 100).set_column(3, "tag", pa.array([start // 100] * 100, pa.int32()))
            writer.write_arrow(batch)
            await writer.flush()

        batches = await read_batches(
            table, {0: EARLIEST_OFFSET}, filter=(col("tag") == 2) | (col("tag") >= 5)
        )
        tags = {t for b in batches for t in b.batch.column("tag").to_pylist()}
        assert tags == {2, 5}
        ids = [i for b in batches for i in b.batch.column("id").to_pylist()]
        assert ids == list(range(200, 300)) + list(range(500, 600))

        nothing = await read_batches(table, {0: EARLIEST_OFFSET}, filter=col("name").starts_with("zzz"))
        assert nothing == []
        with pytest.raises(ValueError, match="nope"):
            table.new_scan().filter(col("nope") == 1).create_log_scanner()
        with pytest.raises(TypeError):
            bool(col("tag") == 1)

    run(shared_cluster, body)


def test_buffer_backpressure_close_flushes_and_plain_writer(shared_cluster: Cluster) -> None:
    bounded, plain = unique("bounded_mem"), unique("plain")
    peak = 0

    async def write_bounded(conn: Connection) -> None:
        nonlocal peak
        table = await create(conn, bounded, buckets=2)
        writer = table.new_append().create_writer()
        accumulator = writer._client.accumulator
        for start in range(0, 20000, 500):
            writer.write_arrow(rows(start, 500))
            peak = max(peak, accumulator.buffered_bytes)
            await writer.wait_for_capacity()
        writer.append(as_dicts(20000, 1)[0])
        # no flush: closing the connection delivers what is queued

    run(
        shared_cluster,
        write_bounded,
        **{
            "client.writer.buffer.memory-size": "64kb",
            "client.writer.buffer.page-size": "16kb",
            "client.writer.batch-size": "16kb",
        },
    )
    assert peak < 64 * 1024 + 32 * 1024  # at most one write past the limit

    async def plain_writer(conn: Connection) -> None:
        assert (await read_all(await conn.get_table(bounded))).sort_by("id").equals(rows(0, 20001))
        table = await create(conn, plain, buckets=2)
        writer = table.new_append().create_writer()
        writer.write_arrow(rows(0, 1000))
        await writer.flush()
        assert (await read_all(table)).sort_by("id").equals(rows(0, 1000))

    run(
        shared_cluster,
        plain_writer,
        **{"client.writer.enable-idempotence": "false", "client.writer.acks": "1"},
    )


# ------------------------------------------------------------------------------------ idempotence


def test_killed_leader_loses_no_acknowledged_row_and_duplicates_none(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1)
    path = unique("exactly_once")
    retries: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "retrying" in record.getMessage():
                retries.append(record)

    handler = Collect(level=logging.INFO)
    sender_log = logging.getLogger("strom.client.writer.sender")
    sender_log.addHandler(handler)
    sender_log.setLevel(logging.INFO)

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=2)
        writer = table.new_append().create_writer()
        results: list[tuple[range, Any]] = []
        stop = asyncio.Event()

        async def produce() -> None:
            # Keep writing while the leader dies and returns, so batches are in flight at the kill.
            next_id = 0
            while not stop.is_set():
                results.append((range(next_id, next_id + 100), writer.write_arrow(rows(next_id, 100))))
                next_id += 100
                await asyncio.sleep(0.002)

        producer = asyncio.create_task(produce())
        await asyncio.sleep(0.3)
        await asyncio.to_thread(cluster.kill_tablet_server, 0)
        # Past the session timeout: the coordinator takes the buckets' leadership away meanwhile.
        await asyncio.sleep(2.5)
        await asyncio.to_thread(cluster.start_tablet_server, 0)
        await asyncio.sleep(0.5)
        stop.set()
        await producer
        await asyncio.wait_for(writer.flush(), 45)
        acknowledged = {
            i for ids, result in results if result.done() and result.exception() is None for i in ids
        }
        assert len(acknowledged) == 100 * len(results), "with unlimited retries every write is acknowledged"

        everything = await read_all(await conn.get_table(path))
        ids = everything.column("id").to_pylist()
        assert len(ids) == len(set(ids)), "a row was written twice"
        assert set(ids) == acknowledged

        # A scanner follows its leader through another restart without gaps or repeats.
        scanner = (await conn.get_table(path)).new_scan().project_by_name(["id"]).create_log_scanner()
        scanner.subscribe_buckets({0: EARLIEST_OFFSET, 1: EARLIEST_OFFSET})
        ends = await scanner.end_offsets()
        scanner.stop_at(ends)
        first = await scanner.poll_batches(5000, max_records=1000)
        await asyncio.to_thread(cluster.kill_tablet_server, 0)
        await asyncio.to_thread(cluster.start_tablet_server, 0)
        rest = [b async for b in scanner.iter_batches()]
        check_dense(first + rest)
        assert sorted(i for b in first + rest for i in b.batch.column("id").to_pylist()) == sorted(ids)
        await scanner.close()

    try:
        run(cluster, body, **{"client.writer.batch-size": "16kb", "client.writer.batch-timeout": "5ms"})
    finally:
        sender_log.removeHandler(handler)
    assert retries, "the writer never had to retry: the failure was not exercised"


# -------------------------------------------------------------------------------------- sync facade


def test_sync_connection_appends_and_reads_ranges(shared_cluster: Cluster) -> None:
    path = unique("sync")
    run(shared_cluster, lambda conn: create(conn, path, buckets=2, bucket_keys=["id"]))

    with SyncConnection({"bootstrap.servers": shared_cluster.bootstrap}) as conn:
        conn.append_arrow(path, rows(0, 5000))
        ends = conn.list_offsets(path, [0, 1])
        assert sum(ends.values()) == 5000
        seen: list[int] = []
        for bucket, end in ends.items():
            start = end // 3
            parts = list(conn.read_bucket_range(path, bucket, None, start, end, projection=["id", "tag"]))
            offsets = [o for p in parts for o in p.offsets().to_pylist()]
            assert offsets == list(range(start, end))
            assert all(p.batch.schema.names == ["id", "tag"] for p in parts)
            assert all(p.change_type_array().to_pylist() == [0] * p.num_rows for p in parts)
            seen.extend(i for p in parts for i in p.batch.column("id").to_pylist())
        assert len(seen) == len(set(seen)) == sum(e - e // 3 for e in ends.values())
        assert list(conn.read_bucket_range(path, 0, None, 5, 5)) == []


def test_write_pandas_and_to_pandas(shared_cluster: Cluster) -> None:
    path = unique("pandas")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=2)
        async with table.new_append().create_writer() as writer:
            writer.write_pandas(pd.DataFrame(rows(0, 300).to_pydict()))
        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({0: EARLIEST_OFFSET, 1: EARLIEST_OFFSET})
        df = await scanner.to_pandas()
        assert sorted(df["id"].tolist()) == list(range(300))

    run(shared_cluster, body)
