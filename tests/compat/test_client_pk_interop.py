"""Strom's client and the official pyfluss client on the same primary-key tables: rows upserted and
deleted by one are found by the other's lookups, prefix lookups and changelog scans, in the same
buckets, for single and composite keys, partitioned tables, custom bucket keys and the key encoders
of the lake formats (Paimon, Iceberg)."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import uuid
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, OffsetSpec, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET
from strom.client.upsert.key_routing import KeyRouting

SCHEMA = pa.schema(
    [
        ("region", pa.string()),
        ("customer", pa.int64()),
        ("order", pa.int32()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("amount", pa.decimal128(10, 2)),
        ("at", pa.timestamp("ms")),
        ("flag", pa.bool_()),
        ("raw", pa.binary()),
    ]
)
REGIONS = ("eu", "us")

LAYOUTS: dict[str, dict[str, Any]] = {
    "single": {"pk": ["order"], "bucket_count": 3},
    "typed": {"pk": ["name", "day"], "bucket_count": 4},
    "partitioned": {
        "pk": ["region", "customer", "order"],
        "bucket_count": 3,
        "partition_keys": ["region"],
        "bucket_keys": ["customer"],
    },
    "paimon": {
        "pk": ["region", "customer", "order"],
        "bucket_count": 4,
        "partition_keys": ["region"],
        "bucket_keys": ["customer"],
        "properties": {"table.datalake.format": "paimon"},
    },
    "paimon_default": {
        "pk": ["name", "customer"],
        "bucket_count": 5,
        "properties": {"table.datalake.format": "paimon"},
    },
    "iceberg": {"pk": ["order"], "bucket_count": 4, "properties": {"table.datalake.format": "iceberg"}},
}


def rows(start: int, count: int, tag: str = "") -> list[dict[str, Any]]:
    out = []
    for i in range(start, start + count):
        out.append(
            {
                "region": REGIONS[i % 2],
                "customer": i // 4,
                "order": i,
                "name": f"n{i}",
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=i % 40),
                "amount": decimal.Decimal(i * 7).scaleb(-2),
                "at": dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i * 31),
                "flag": i % 3 == 0,
                "raw": f"{tag}{i}".encode() if i % 5 else None,
            }
        )
    return out


def key_of(layout: str, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in LAYOUTS[layout]["pk"])


def descriptor(layout: str) -> TableDescriptor:
    spec = LAYOUTS[layout]
    return TableDescriptor(
        Schema.from_arrow_schema(SCHEMA, spec["pk"]),
        partition_keys=spec.get("partition_keys", []),
        bucket_keys=spec.get("bucket_keys", []),
        bucket_count=spec["bucket_count"],
        properties=spec.get("properties", {}),
    )


async def strom_session(bootstrap: str, body: Any) -> Any:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as conn:
        return await asyncio.wait_for(body(conn), 90)


async def pyfluss_session(bootstrap: str, body: Any) -> Any:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        return await asyncio.wait_for(body(connection), 90)
    finally:
        await connection.close()


async def create_with_strom(conn: Connection, path: TablePath, layout: str) -> dict[str, int]:
    admin = conn.get_admin()
    await admin.create_table(path, descriptor(layout))
    if "partition_keys" not in LAYOUTS[layout]:
        return {}
    for region in REGIONS:
        await admin.create_partition(path, {"region": region})
    return {p.partition_name: p.partition_id for p in await admin.list_partition_infos(path)}


def subscriptions(layout: str, partitions: dict[str, int]) -> list[tuple[int | None, int]]:
    buckets = range(LAYOUTS[layout]["bucket_count"])
    if partitions:
        return [(pid, b) for pid in partitions.values() for b in buckets]
    return [(None, b) for b in buckets]


Placed = list[tuple[int | None, int, str, dict[str, Any]]]  # partition id, bucket, change type, row


async def end_offsets(
    conn: Connection, path: TablePath, subs: list[tuple[int | None, int]]
) -> dict[tuple[int | None, int], int]:
    admin = conn.get_admin()
    names: dict[int | None, str] = (
        {p.partition_id: p.partition_name for p in await admin.list_partition_infos(path)}
        if any(pid is not None for pid, _ in subs)
        else {}
    )
    ends: dict[tuple[int | None, int], int] = {}
    for pid in {pid for pid, _ in subs}:
        buckets = [b for p, b in subs if p == pid]
        found = await admin.list_offsets(path, buckets, OffsetSpec.latest(), partition_name=names.get(pid))
        ends.update({(pid, b): offset for b, offset in found.items()})
    return ends


async def changelog_with_pyfluss(
    connection: Any, path: TablePath, ends: dict[tuple[int | None, int], int]
) -> Placed:
    table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
    scanner = await table.new_scan().create_log_scanner()
    for pid, bucket in ends:
        if pid is None:
            scanner.subscribe(bucket, fluss.EARLIEST_OFFSET)
        else:
            scanner.subscribe_partition(pid, bucket, fluss.EARLIEST_OFFSET)
    seen: list[tuple[int | None, int, int, str, dict[str, Any]]] = []
    next_offsets = dict.fromkeys(ends, 0)
    for _ in range(100):
        if all(next_offsets[k] >= end for k, end in ends.items()):
            break
        records = await scanner.poll(500)
        for bucket in records.buckets():
            for r in records.records(bucket):
                where = (bucket.partition_id, bucket.bucket_id)
                next_offsets[where] = max(next_offsets[where], r.offset + 1)
                seen.append((*where, r.offset, r.change_type.short_string(), dict(r.row)))
    assert all(next_offsets[k] >= end for k, end in ends.items()), (next_offsets, ends)
    seen.sort(key=lambda x: (x[0] or 0, x[1], x[2]))
    return [(p, b, kind, row) for p, b, _, kind, row in seen]


async def changelog_with_strom(
    conn: Connection, path: TablePath, subs: list[tuple[int | None, int]]
) -> Placed:
    table = await conn.get_table(path)
    scanner = table.new_scan().create_log_scanner()
    for pid, bucket in subs:
        if pid is None:
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        else:
            scanner.subscribe_partition(pid, bucket, EARLIEST_OFFSET)
    out: Placed = []
    async with scanner:
        async for batch in scanner.iter_batches(to_end=True):
            for r in batch.records():
                out.append(
                    (batch.bucket.partition_id, batch.bucket.bucket, r.change_type.short_string, r.row)
                )
    return out


def check_placement(conn_routing: KeyRouting, placed: Placed, partitions: dict[str, int]) -> None:
    """Every change sits in the bucket (and partition) Strom's routing computes for its key."""
    for partition_id, bucket, _, row in placed:
        values = [row[n] for n in SCHEMA.names]
        assert conn_routing.bucket_of(values, conn_routing.encode_key(values)) == bucket, row
        if partitions:
            assert partitions[row["region"]] == partition_id, row


def fold(layout: str, placed: Placed) -> dict[tuple[Any, ...], dict[str, Any]]:
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _, _, kind, row in placed:
        if kind in ("+I", "+U"):
            state[key_of(layout, row)] = row
        else:
            state.pop(key_of(layout, row), None)
    return state


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_written_by_strom_found_by_pyfluss(shared_cluster: Cluster, layout: str) -> None:
    path = TablePath("fluss", f"pk_from_strom_{layout}_{uuid.uuid4().hex[:6]}")
    first, second = rows(0, 120), rows(80, 60, tag="v2-")  # 40 updates, 20 new keys

    async def write(conn: Connection) -> tuple[dict[str, int], KeyRouting, dict[tuple[Any, ...], Any], Any]:
        partitions = await create_with_strom(conn, path, layout)
        table = await conn.get_table(path)
        async with table.new_upsert().create_writer() as writer:
            writer.write_arrow(pa.Table.from_pylist(first, schema=SCHEMA))
            for row in second:
                writer.upsert(row)
            for row in first[:10]:
                writer.delete({k: row[k] for k in LAYOUTS[layout]["pk"]})
        expected = {key_of(layout, r): r for r in first + second}
        for row in first[:10]:
            expected.pop(key_of(layout, row), None)
        ends = await end_offsets(conn, path, subscriptions(layout, partitions))
        return partitions, KeyRouting(table.info), expected, ends

    partitions, routing, expected, ends = asyncio.run(strom_session(shared_cluster.bootstrap, write))

    async def read(connection: Any) -> tuple[Placed, list[Any], list[Any]]:
        placed = await changelog_with_pyfluss(connection, path, ends)
        table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
        sample = [*list(expected.values())[::13], first[0], first[5]]  # two deleted keys
        lookupers = [table.new_lookup().create_lookuper() for _ in range(len(sample))]
        pk = LAYOUTS[layout]["pk"]
        found = await asyncio.gather(
            *(lk.lookup({k: r[k] for k in pk}) for lk, r in zip(lookupers, sample, strict=True))
        )
        prefixes: list[Any] = []
        if "bucket_keys" in LAYOUTS[layout]:
            prefix = table.new_lookup().lookup_by(["region", "customer"]).create_lookuper()
            prefixes = [await prefix.lookup({"region": r, "customer": c}) for r, c in (("us", 3), ("eu", 30))]
        return placed, [(key_of(layout, r), f) for r, f in zip(sample, found, strict=True)], prefixes

    placed, found, prefixes = asyncio.run(pyfluss_session(shared_cluster.bootstrap, read))
    check_placement(routing, placed, partitions)
    assert fold(layout, placed) == expected
    for key, row in found:
        assert row == expected.get(key), key
    if prefixes:
        for got, (region, customer) in zip(prefixes, (("us", 3), ("eu", 30)), strict=True):
            want = [r for k, r in expected.items() if r["region"] == region and r["customer"] == customer]
            assert sorted(got, key=lambda r: r["order"]) == sorted(want, key=lambda r: r["order"])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_written_by_pyfluss_found_by_strom(shared_cluster: Cluster, layout: str) -> None:
    path = TablePath("fluss", f"pk_from_py_{layout}_{uuid.uuid4().hex[:6]}")
    first, second = rows(0, 100), rows(70, 50, tag="v2-")

    async def create(conn: Connection) -> dict[str, int]:
        return await create_with_strom(conn, path, layout)

    partitions = asyncio.run(strom_session(shared_cluster.bootstrap, create))

    async def write(connection: Any) -> None:
        table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
        writer = table.new_upsert().create_writer()
        for row in first + second:
            writer.upsert(row)
        for row in first[:7]:
            writer.delete({k: row[k] for k in LAYOUTS[layout]["pk"]})
        await writer.flush()

    asyncio.run(pyfluss_session(shared_cluster.bootstrap, write))
    expected = {key_of(layout, r): r for r in first + second}
    for row in first[:7]:
        expected.pop(key_of(layout, row), None)

    async def read(conn: Connection) -> None:
        table = await conn.get_table(path)
        routing = KeyRouting(table.info)
        pk = LAYOUTS[layout]["pk"]
        lookuper = table.new_lookup().create_lookuper()
        everything = first + second
        found = await lookuper.lookup_many([{k: r[k] for k in pk} for r in everything])
        for row, got in zip(everything, found, strict=True):
            assert got == expected.get(key_of(layout, row))
        placed = await changelog_with_strom(conn, path, subscriptions(layout, partitions))
        check_placement(routing, placed, partitions)
        assert fold(layout, placed) == expected
        if "bucket_keys" in LAYOUTS[layout]:
            prefix = table.new_lookup().lookup_by(["region", "customer"]).create_lookuper()
            got_rows = await prefix.lookup({"region": "eu", "customer": 20})
            want = [r for r in expected.values() if r["region"] == "eu" and r["customer"] == 20]
            assert sorted(got_rows, key=lambda r: r["order"]) == sorted(want, key=lambda r: r["order"])

    asyncio.run(strom_session(shared_cluster.bootstrap, read))
