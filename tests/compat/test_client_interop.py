"""Strom's client and the official pyfluss client on the same tables: whatever one writes, the other
reads back identically (same rows, same buckets, same offsets), for plain, bucket-keyed and
partitioned log tables with a spread of column types."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import uuid
from typing import Any

import fluss
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from harness import Cluster

from strom.client import Connection, TablePath
from strom.client.scanner import EARLIEST_OFFSET

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("region", pa.string()),
        ("price", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("ms")),
        ("flag", pa.bool_()),
        ("raw", pa.binary()),
        ("score", pa.float32()),
    ]
)
REGIONS = ("eu", "us")

LAYOUTS: dict[str, dict[str, Any]] = {
    "plain": {"bucket_count": 3},
    "keyed": {"bucket_count": 4, "bucket_keys": ["name"]},
    "partitioned": {"bucket_count": 2, "partition_keys": ["region"]},
}


def data(start: int, count: int, region: str | None = None) -> pa.Table:
    ids = range(start, start + count)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i % 37}" for i in ids],
            "region": [region or REGIONS[i % 2] for i in ids],
            "price": [decimal.Decimal(i).scaleb(-2) for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 300) for i in ids],
            "at": [dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i * 37) for i in ids],
            "flag": [i % 3 == 0 for i in ids],
            "raw": [i.to_bytes(4, "little") if i % 5 else None for i in ids],
            "score": pa.array([i / 8 for i in ids], pa.float32()),
        },
        schema=SCHEMA,
    )


Layout = dict[tuple[int | None, int], tuple[list[int], pa.Table]]


async def pyfluss_session(bootstrap: str, body: Any) -> Any:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        return await asyncio.wait_for(body(connection), 60)
    finally:
        await connection.close()


async def create_with_pyfluss(connection: Any, path: TablePath, layout: str) -> dict[str, int]:
    """Creates the table (and its partitions); returns partition name -> id."""
    admin = connection.get_admin()
    fpath = fluss.TablePath(path.database_name, path.table_name)
    await admin.create_table(fpath, fluss.TableDescriptor(fluss.Schema(SCHEMA), **LAYOUTS[layout]))
    if layout != "partitioned":
        return {}
    for region in REGIONS:
        await admin.create_partition(fpath, {"region": region})
    return {p.partition_name: p.partition_id for p in await admin.list_partition_infos(fpath)}


def subscriptions(layout: str, partitions: dict[str, int]) -> list[tuple[int | None, int]]:
    buckets = range(LAYOUTS[layout]["bucket_count"])
    if layout == "partitioned":
        return [(pid, b) for pid in partitions.values() for b in buckets]
    return [(None, b) for b in buckets]


async def read_with_pyfluss(
    connection: Any, path: TablePath, subs: list[tuple[int | None, int]], rows: int
) -> Layout:
    table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
    scanner = await table.new_scan().create_record_batch_log_scanner()
    for pid, bucket in subs:
        if pid is None:
            scanner.subscribe(bucket, fluss.EARLIEST_OFFSET)
        else:
            scanner.subscribe_partition(pid, bucket, fluss.EARLIEST_OFFSET)
    parts: dict[tuple[int | None, int], list[tuple[int, pa.RecordBatch]]] = {}
    seen = 0
    while seen < rows:
        polled = await scanner.poll_record_batch(5000)
        assert polled, f"pyfluss stalled after {seen} of {rows} rows"
        for item in polled:
            parts.setdefault((item.bucket.partition_id, item.bucket.bucket_id), []).append(
                (item.base_offset, item.batch)
            )
            seen += item.batch.num_rows
    return {key: _layout_entry(items) for key, items in parts.items()}


async def read_with_strom(conn: Connection, path: TablePath, subs: list[tuple[int | None, int]]) -> Layout:
    table = await conn.get_table(path)
    scanner = table.new_scan().create_log_scanner()
    for pid, bucket in subs:
        if pid is None:
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        else:
            scanner.subscribe_partition(pid, bucket, EARLIEST_OFFSET)
    parts: dict[tuple[int | None, int], list[tuple[int, pa.RecordBatch]]] = {}
    async with scanner:
        async for item in scanner.iter_batches(to_end=True):
            parts.setdefault((item.bucket.partition_id, item.bucket.bucket), []).append(
                (item.base_offset, item.batch)
            )
    return {key: _layout_entry(items) for key, items in parts.items()}


def _layout_entry(items: list[tuple[int, pa.RecordBatch]]) -> tuple[list[int], pa.Table]:
    offsets = [base + i for base, batch in items for i in range(batch.num_rows)]
    return offsets, pa.Table.from_batches([batch for _, batch in items], schema=SCHEMA)


def assert_same(ours: Layout, theirs: Layout, total: int) -> None:
    assert ours.keys() == theirs.keys()
    for key in ours:
        our_offsets, our_rows = ours[key]
        their_offsets, their_rows = theirs[key]
        assert our_offsets == their_offsets == list(range(len(our_offsets))), key
        assert our_rows.equals(their_rows), key
    everything = pa.concat_tables([t for _, t in ours.values()]).sort_by("id")
    assert everything.equals(data(0, total))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_written_by_pyfluss_reads_identically_with_strom(shared_cluster: Cluster, layout: str) -> None:
    path = TablePath("fluss", f"from_py_{layout}_{uuid.uuid4().hex[:6]}")
    total = 2100

    async def write(connection: Any) -> tuple[list[tuple[int | None, int]], Layout]:
        partitions = await create_with_pyfluss(connection, path, layout)
        table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
        writer = table.new_append().create_writer()
        chunk = data(0, 2000)
        if layout == "partitioned":  # pyfluss routes a whole batch by its first row
            for region in REGIONS:
                writer.write_arrow(chunk.filter(pc.equal(chunk["region"], region)))
        else:
            writer.write_arrow(chunk)
        for row in data(2000, 100).to_pylist():
            writer.append(row)
        await writer.flush()
        subs = subscriptions(layout, partitions)
        return subs, await read_with_pyfluss(connection, path, subs, total)

    subs, theirs = asyncio.run(pyfluss_session(shared_cluster.bootstrap, write))

    async def read(conn: Connection) -> Layout:
        return await read_with_strom(conn, path, subs)

    ours = asyncio.run(_strom_session(shared_cluster.bootstrap, read))
    assert_same(ours, theirs, total)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_written_by_strom_reads_identically_with_pyfluss(shared_cluster: Cluster, layout: str) -> None:
    path = TablePath("fluss", f"from_strom_{layout}_{uuid.uuid4().hex[:6]}")
    total = 2300

    async def create(connection: Any) -> list[tuple[int | None, int]]:
        return subscriptions(layout, await create_with_pyfluss(connection, path, layout))

    subs = asyncio.run(pyfluss_session(shared_cluster.bootstrap, create))

    async def write(conn: Connection) -> Layout:
        table = await conn.get_table(path)
        writer = table.new_append().create_writer()
        writer.write_arrow(data(0, 2000))  # both regions in one batch: split by partition here
        for row in data(2000, 100).to_pylist():
            writer.append(row)
        writer.write_pandas(data(2100, 200).to_pandas())
        await writer.flush()
        return await read_with_strom(conn, path, subs)

    ours = asyncio.run(_strom_session(shared_cluster.bootstrap, write))

    async def read(connection: Any) -> Layout:
        return await read_with_pyfluss(connection, path, subs, total)

    theirs = asyncio.run(pyfluss_session(shared_cluster.bootstrap, read))
    assert_same(ours, theirs, total)


async def _strom_session(bootstrap: str, body: Any) -> Any:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as conn:
        return await asyncio.wait_for(body(conn), 60)
