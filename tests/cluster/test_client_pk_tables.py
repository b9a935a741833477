"""Strom's own client on primary-key tables of a real cluster: upsert writers (rows, partial updates,
deletes, Arrow and pandas, changelogs with a change-type column), lookups and prefix lookups (single
and composite keys, partitioned or not, batched across concurrent callers), KV snapshot reads, the
``full`` / ``latest`` / ``timestamp`` startup modes, and the current rows of a bucket as of an offset."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, OffsetSpec, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET, ScanBatch, SnapshotReader
from strom.client.sync import SyncConnection
from strom.client.upsert.key_routing import KeyRouting
from strom.common import errors
from strom.common.table_bucket import TableBucket
from strom.record.change_type import ChangeType
from strom.rpc.api import ApiKey

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])
ORDERS = pa.schema(
    [("region", pa.string()), ("customer", pa.int64()), ("order", pa.int64()), ("amount", pa.float64())]
)


@pytest.fixture(scope="module")
def snapshot_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster that snapshots KV tablets every second, for the snapshot and startup-mode tests."""
    cluster = Cluster(
        tmp_path_factory.mktemp("pk-snapshots"), tablet_servers=2, config={"kv.snapshot.interval": "1s"}
    ).start()
    yield cluster
    cluster.stop()


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]], **settings: str) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap, **settings}) as conn:
            return await asyncio.wait_for(body(conn), 90)

    return asyncio.run(main())


def unique(prefix: str) -> TablePath:
    return TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


async def create(
    conn: Connection,
    path: TablePath,
    schema: pa.Schema,
    primary_key: list[str],
    *,
    buckets: int,
    partitions: tuple[str, ...] = (),
    **descriptor: Any,
) -> Any:
    admin = conn.get_admin()
    await admin.create_table(
        path,
        TableDescriptor(Schema.from_arrow_schema(schema, primary_key), bucket_count=buckets, **descriptor),
    )
    for value in partitions:
        await admin.create_partition(path, {descriptor["partition_keys"][0]: value})
    return await conn.get_table(path)


async def changelog(table: Any, subscriptions: dict[Any, int]) -> list[tuple[str, dict[str, Any]]]:
    """Every change (short change type, row) up to the current end, by bucket then offset."""
    scanner = table.new_scan().startup_mode("earliest").create_log_scanner()
    for key, offset in subscriptions.items():
        if isinstance(key, tuple):
            scanner.subscribe_partition(key[0], key[1], offset)
        else:
            scanner.subscribe(key, offset)
    out: list[tuple[int, int, str, dict[str, Any]]] = []
    async with scanner:
        async for batch in scanner.iter_batches(to_end=True):
            for r in batch.records():
                out.append((batch.bucket.bucket, r.offset, r.change_type.short_string, r.row))
    out.sort(key=lambda x: (x[0], x[1]))
    return [(kind, row) for _, _, kind, row in out]


def fold(changes: list[tuple[str, dict[str, Any]]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, Any]:
    state: dict[Any, Any] = {}
    for kind, row in changes:
        if kind in ("+I", "+U"):
            state[key(row)] = row
        elif kind in ("-D", "-U"):
            state.pop(key(row), None)
    return state


# ------------------------------------------------------------------------------------------ writes


def test_upsert_delete_lookup_and_changelog(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        table = await create(conn, unique("pk"), SCHEMA, ["id"], buckets=1)
        async with table.new_upsert().create_writer() as writer:
            writer.upsert({"id": 1, "name": "a", "score": 1.0})
            writer.upsert((2, "b", 2.0))
            writer.upsert({"id": 1, "name": "a2", "score": 1.5})
            writer.delete({"id": 2})
            writer.delete((99,))  # a missing key: no change at all
            result = writer.upsert({"id": 3, "name": None, "score": 3.0})
        await result
        assert result.done()

        lookuper = table.new_lookup().create_lookuper()
        assert await lookuper.lookup({"id": 1}) == {"id": 1, "name": "a2", "score": 1.5}
        assert await lookuper.lookup((2,)) is None
        assert await lookuper.lookup_many([{"id": 3}, (1,), (99,)]) == [
            {"id": 3, "name": None, "score": 3.0},
            {"id": 1, "name": "a2", "score": 1.5},
            None,
        ]
        assert await changelog(table, {0: EARLIEST_OFFSET}) == [
            ("+I", {"id": 1, "name": "a", "score": 1.0}),
            ("+I", {"id": 2, "name": "b", "score": 2.0}),
            ("-U", {"id": 1, "name": "a", "score": 1.0}),
            ("+U", {"id": 1, "name": "a2", "score": 1.5}),
            ("-D", {"id": 2, "name": "b", "score": 2.0}),
            ("+I", {"id": 3, "name": None, "score": 3.0}),
        ]

    run(shared_cluster, body)


def test_partial_updates(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        table = await create(conn, unique("partial"), SCHEMA, ["id"], buckets=2)
        async with table.new_upsert().create_writer() as writer:
            for i in range(10):
                writer.upsert({"id": i, "name": f"n{i}", "score": float(i)})
        by_name = table.new_upsert().partial_update_by_name(["id", "score"]).create_writer()
        by_name.upsert({"id": 1, "score": 10.5})
        by_name.upsert((2, 20.5))  # values in target-column order
        by_name.upsert({"id": 50, "score": 5.0})  # a new key: the other columns are null
        by_index = table.new_upsert().partial_update_by_index([0, 1]).create_writer()
        by_index.write_arrow(pa.table({"id": pa.array([3, 4], pa.int32()), "name": ["x3", "x4"]}))
        await by_name.flush()
        await by_index.flush()
        rows = await table.new_lookup().create_lookuper().lookup_many([(i,) for i in (1, 2, 3, 4, 5, 50)])
        assert rows == [
            {"id": 1, "name": "n1", "score": 10.5},
            {"id": 2, "name": "n2", "score": 20.5},
            {"id": 3, "name": "x3", "score": 3.0},
            {"id": 4, "name": "x4", "score": 4.0},
            {"id": 5, "name": "n5", "score": 5.0},
            {"id": 50, "name": None, "score": 5.0},
        ]
        with pytest.raises(ValueError, match="not target columns"):
            by_name.upsert({"id": 1, "name": "z"})
        with pytest.raises(ValueError, match="not target columns"):
            by_index.write_arrow(pa.table({"id": pa.array([1], pa.int32()), "score": [1.0]}))
        with pytest.raises(errors.InvalidTargetColumnError, match="primary key"):
            table.new_upsert().partial_update_by_name(["score"])
        with pytest.raises(errors.InvalidTargetColumnError, match="Cannot find"):
            table.new_upsert().partial_update_by_name(["id", "nope"])
        strict = await create(
            conn,
            unique("strict"),
            pa.schema([("id", pa.int32()), ("must", pa.string(), False), ("score", pa.float64())]),
            ["id"],
            buckets=1,
        )
        with pytest.raises(errors.InvalidTargetColumnError, match="NOT NULL"):
            strict.new_upsert().partial_update_by_name(["id", "score"])

    run(shared_cluster, body)


def test_bad_input_and_wrong_table_kinds(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        table = await create(conn, unique("bad"), SCHEMA, ["id"], buckets=1)
        writer = table.new_upsert().create_writer()
        with pytest.raises(ValueError, match="unknown column"):
            writer.upsert({"id": 1, "nope": 2})
        with pytest.raises(TypeError):
            writer.upsert({"id": "one", "name": "a", "score": 1.0})
        with pytest.raises(ValueError, match="primary-key"):
            writer.delete({"name": "a"})
        with pytest.raises(ValueError):
            writer.upsert({"id": None, "name": "a", "score": 1.0})  # a PK column is NOT NULL
        await writer.flush()  # nothing was queued
        lookuper = table.new_lookup().create_lookuper()
        with pytest.raises(ValueError, match="needs the column"):
            await lookuper.lookup({"name": "a"})
        with pytest.raises(ValueError, match="whole primary key"):
            table.new_lookup().lookup_by(["id"]).create_lookuper()
        log_path = unique("log")
        await conn.get_admin().create_table(log_path, TableDescriptor(Schema.from_arrow_schema(SCHEMA)))
        log_table = await conn.get_table(log_path)
        with pytest.raises(errors.NonPrimaryKeyTableError):
            log_table.new_upsert()
        with pytest.raises(errors.NonPrimaryKeyTableError):
            log_table.new_lookup()
        with pytest.raises(errors.NonPrimaryKeyTableError):
            table.new_append()

    run(shared_cluster, body)


def test_arrow_pandas_and_change_type_column(shared_cluster: Cluster) -> None:
    n = 3000

    async def body(conn: Connection) -> None:
        table = await create(conn, unique("arrow"), SCHEMA, ["id"], buckets=3)
        ids = pa.array(range(n), pa.int32())
        writer = table.new_upsert().create_writer()
        writer.write_arrow(pa.table({"id": ids, "name": [f"n{i}" for i in range(n)], "score": [1.0] * n}))
        # a changelog: updates (-U skipped, +U applied), inserts and deletes, with string change types
        changes = pa.table(
            {
                "_change_type": ["-U", "+U", "-D", "+I", "-D", "+A"],
                "id": pa.array([5, 5, 6, 5000, 7, 5001], pa.int32()),
                "name": ["old", "new5", "n6", "new", "n7", "appended"],
                "score": [1.0, 5.5, 1.0, 50.0, 1.0, 51.0],
            }
        )
        writer.write_arrow(changes, change_type_column="_change_type")
        # int8 codes work as well (4 = -D, 3 = +U)
        coded = pa.record_batch(
            {
                "op": pa.array([4, 3], pa.int8()),
                "id": pa.array([8, 9], pa.int32()),
                "name": ["n8", "new9"],
                "score": [1.0, 9.5],
            }
        )
        writer.write_arrow_batch(coded, change_type_column="op")
        writer.write_pandas(pd.DataFrame({"id": [10, 11], "name": ["p10", "p11"], "score": [0.5, 0.25]}))
        writer.delete_arrow(pa.table({"id": pa.array([12, 13], pa.int32())}))
        await writer.flush()

        lookuper = table.new_lookup().create_lookuper()
        keys = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 5000, 5001, 99999]
        got = await lookuper.lookup_arrow(pa.table({"id": pa.array(keys, pa.int32())}), keep_missing=True)
        assert got.column("name").to_pylist() == [
            "new5",
            None,
            None,
            None,
            "new9",
            "p10",
            "p11",
            None,
            None,
            "n14",
            "new",
            "appended",
            None,
        ]
        found = await lookuper.lookup_arrow(pa.table({"id": pa.array(keys, pa.int32())}))
        assert found.schema == table.arrow_schema
        assert found.column("id").to_pylist() == [5, 9, 10, 11, 14, 5000, 5001]
        with pytest.raises(ValueError, match="no change-type column"):
            writer.write_arrow(changes, change_type_column="nope")
        with pytest.raises(ValueError, match="unknown change type"):
            writer.write_arrow(
                pa.table({"op": ["+X"], "id": pa.array([1], pa.int32())}), change_type_column="op"
            )

        # every bucket's changelog folds to what the lookups see
        state = fold(await changelog(table, {b: EARLIEST_OFFSET for b in range(3)}), lambda r: r["id"])
        assert len(state) == n - 5 + 2  # 6, 7, 8, 12, 13 deleted; 5000, 5001 added
        sample = sorted(state)[::97]
        assert await lookuper.lookup_many([(k,) for k in sample]) == [state[k] for k in sample]

    run(shared_cluster, body)


def test_routing_matches_key_routing_and_columnar_encoding(shared_cluster: Cluster) -> None:
    """Rows written one by one and as Arrow land in the same buckets, the ones KeyRouting computes."""
    schema = pa.schema(
        [
            ("k", pa.string()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us")),
            ("price", pa.decimal128(12, 2)),
            ("flag", pa.bool_()),
        ]
    )
    rows = [
        {
            "k": f"key-{i}",
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
            "at": dt.datetime(2024, 1, 1, 0, 0, i % 60, i),
            "price": None,
            "flag": i % 2 == 0,
        }
        for i in range(200)
    ]

    async def body(conn: Connection) -> None:
        one_by_one = await create(conn, unique("rows"), schema, ["k", "day"], buckets=4)
        as_arrow = await create(conn, unique("arrow"), schema, ["k", "day"], buckets=4)
        async with one_by_one.new_upsert().create_writer() as writer:
            for row in rows:
                writer.upsert(row)
        async with as_arrow.new_upsert().create_writer() as writer:
            writer.write_arrow(pa.Table.from_pylist(rows, schema=schema))
        routing = KeyRouting(one_by_one.info)
        for table in (one_by_one, as_arrow):
            scanner = table.new_scan().create_log_scanner()
            scanner.subscribe_buckets({b: EARLIEST_OFFSET for b in range(4)})
            placed: dict[Any, int] = {}  # key column value -> bucket
            async with scanner:
                async for batch in scanner.iter_batches(to_end=True):
                    for row in batch.batch.to_pylist():
                        placed[row["k"]] = batch.bucket.bucket
            for row in rows:
                values = [row[n] for n in schema.names]
                assert placed[row["k"]] == routing.bucket_of(values, routing.encode_key(values))
        found = (
            await as_arrow.new_lookup()
            .create_lookuper()
            .lookup_many([{"k": r["k"], "day": r["day"]} for r in rows])
        )
        assert found == rows

    run(shared_cluster, body)


# ------------------------------------------------------------------------------------------ lookups


def test_composite_keys_partitions_and_prefix_lookups(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        table = await create(
            conn,
            unique("orders"),
            ORDERS,
            ["region", "customer", "order"],
            buckets=3,
            partitions=("eu", "us"),
            partition_keys=["region"],
            bucket_keys=["customer"],
        )
        expected: dict[tuple[str, int, int], float] = {}
        regions, customers, orders, amounts = [], [], [], []
        for region in ("eu", "us"):
            for customer in range(6):
                for order in range(4):
                    expected[(region, customer, order)] = float(customer * 10 + order)
                    regions.append(region)
                    customers.append(customer)
                    orders.append(order)
                    amounts.append(float(customer * 10 + order))
        async with table.new_upsert().create_writer() as writer:
            # one Arrow table spanning both partitions: split by partition and bucket here
            writer.write_arrow(
                pa.table({"region": regions, "customer": customers, "order": orders, "amount": amounts})
            )
            writer.delete({"region": "eu", "customer": 5, "order": 3})
        del expected[("eu", 5, 3)]

        lookuper = table.new_lookup().create_lookuper()
        keys = list(expected)[::5]
        rows = await lookuper.lookup_many([{"region": r, "customer": c, "order": o} for r, c, o in keys])
        assert [row["amount"] for row in rows if row] == [expected[k] for k in keys]
        assert await lookuper.lookup(("eu", 5, 3)) is None
        assert await lookuper.lookup(("asia", 1, 1)) is None  # no such partition: nothing to find

        prefix = table.new_lookup().lookup_by(["region", "customer"]).create_lookuper()
        found = await prefix.lookup({"region": "us", "customer": 3})
        assert sorted((r["order"], r["amount"]) for r in found) == [(o, 30.0 + o) for o in range(4)]
        assert await prefix.lookup(("eu", 42)) == []
        assert await prefix.lookup(("asia", 1)) == []
        many = await prefix.lookup_many([("eu", 5), ("us", 5)])
        assert [len(m) for m in many] == [3, 4]
        arrow = await prefix.lookup_arrow(pa.table({"region": ["eu", "us"], "customer": [1, 2]}))
        assert arrow.num_rows == 8 and set(arrow.column("customer").to_pylist()) == {1, 2}
        with pytest.raises(ValueError, match="partition keys"):
            table.new_lookup().lookup_by(["customer"]).create_lookuper()
        # a write to a partition that does not exist creates it (client.writer.dynamic-create-partition)
        async with table.new_upsert().create_writer() as writer:
            writer.upsert({"region": "asia", "customer": 1, "order": 1, "amount": 1.0})
        assert (await lookuper.lookup(("asia", 1, 1)) or {}).get("amount") == 1.0

    run(shared_cluster, body)


async def create_numbered(conn: Connection, name: str, n: int, buckets: int) -> Any:
    """A SCHEMA table holding rows id i, name "n{i}", score float(i) for i < n."""
    table = await create(conn, unique(name), SCHEMA, ["id"], buckets=buckets)
    async with table.new_upsert().create_writer() as writer:
        ids = range(n)
        writer.write_arrow(
            pa.table(
                {
                    "id": pa.array(ids, pa.int32()),
                    "name": [f"n{i}" for i in ids],
                    "score": [float(i) for i in ids],
                }
            )
        )
    return table


def test_concurrent_lookups_share_batches(shared_cluster: Cluster) -> None:
    n = 2000

    async def body(conn: Connection) -> None:
        table = await create_numbered(conn, "batched", n, buckets=4)
        requests: list[int] = []
        original = conn.pool.request

        async def counting(
            host: str, port: int, api_key: ApiKey, message: Any, *, timeout: float | None = None
        ) -> Any:
            if api_key == ApiKey.LOOKUP:
                requests.append(sum(len(b.keys) for b in message.buckets_req))
            return await original(host, port, api_key, message, timeout=timeout)

        conn.pool.request = counting  # type: ignore[method-assign]
        lookupers = [table.new_lookup().create_lookuper() for _ in range(4)]
        started = time.monotonic()
        rows = await asyncio.gather(*(lookupers[i % 4].lookup((i,)) for i in range(n)))
        elapsed = time.monotonic() - started
        assert [r["name"] for r in rows if r] == [f"n{i}" for i in range(n)]
        assert sum(requests) == n
        # keys of concurrent callers (and of different lookupers) travel together, at most 128 a request
        assert len(requests) <= n // 100 and max(requests) <= 128, requests
        assert elapsed < 10
        # a lone lookup does not wait for a batch timeout
        started = time.monotonic()
        for i in range(20):
            assert await lookupers[0].lookup((i,)) is not None
        assert time.monotonic() - started < 1.5

    run(shared_cluster, body)


def test_direct_lookups_route_each_key_to_its_bucket(shared_cluster: Cluster) -> None:
    """Single-key lookups of an unpartitioned table hash their keys together (column-wise when many
    arrive in one turn of the event loop): every key must still reach its own bucket, whether looked
    up alone or among many, by dict or tuple; a cancelled caller does not disturb the others; after
    the connection closes, a lookup fails with a clear error."""
    n = 600

    async def body(conn: Connection) -> None:
        table = await create_numbered(conn, "direct", n, buckets=5)
        lookuper = table.new_lookup().create_lookuper()
        alone = [await lookuper.lookup({"id": i}) for i in range(0, n, 37)]
        assert [r["name"] for r in alone] == [f"n{i}" for i in range(0, n, 37)]
        many = await asyncio.gather(*(lookuper.lookup({"id": i} if i % 2 else (i,)) for i in range(n + 50)))
        assert [r and r["score"] for r in many] == [float(i) for i in range(n)] + [None] * 50
        cancelled = asyncio.ensure_future(lookuper.lookup({"id": 1}))
        others = [asyncio.ensure_future(lookuper.lookup({"id": i})) for i in range(10)]
        cancelled.cancel()
        assert [r["id"] for r in await asyncio.gather(*others)] == list(range(10))
        with pytest.raises(ValueError, match="null"):
            await lookuper.lookup({"id": None})
        await conn.close()
        with pytest.raises(errors.FlussError, match="closed"):
            await asyncio.wait_for(lookuper.lookup({"id": 1}), 5)

    run(shared_cluster, body)


# ------------------------------------------------------------------------------ snapshots and scans


async def wait_for_snapshots(
    conn: Connection, path: TablePath, buckets: int, min_offset: int = 1
) -> dict[int, tuple[int, int]]:
    """bucket -> (snapshot id, log offset) once every bucket has a snapshot covering `min_offset`."""
    table = await conn.get_table(path)
    reader = SnapshotReader(table)
    for _ in range(150):
        latest = await reader.latest()
        if len(latest) == buckets and all(offset >= min_offset for _, offset in latest.values()):
            return latest
        await asyncio.sleep(0.2)
    raise AssertionError(f"no KV snapshot of every bucket of {path}: {latest}")


def write_ids(writer: Any, ids: range, tag: str) -> None:
    writer.write_arrow(
        pa.table(
            {
                "id": pa.array(ids, pa.int32()),
                "name": [f"{tag}{i}" for i in ids],
                "score": [float(i) for i in ids],
            }
        )
    )


def test_full_scan_is_snapshot_then_changes(snapshot_cluster: Cluster) -> None:
    path = unique("full")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, SCHEMA, ["id"], buckets=2)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(0, 500), "v1-")
        snapshots = await wait_for_snapshots(conn, path, 2)
        async with table.new_upsert().create_writer() as writer:  # after the snapshot
            write_ids(writer, range(400, 600), "v2-")
            writer.delete_arrow(pa.table({"id": pa.array(range(0, 50), pa.int32())}))
        expected = {i: f"v1-{i}" for i in range(50, 400)} | {i: f"v2-{i}" for i in range(400, 600)}

        scanner = table.new_scan().project_by_name(["name", "id"]).startup_mode("full").create_log_scanner()
        await scanner.subscribe_startup()
        batches: list[ScanBatch] = []
        async with scanner:
            async for batch in scanner.iter_batches(to_end=True):
                batches.append(batch)
            # snapshot rows first in every bucket, and the changelog starts right after the snapshot
            for bucket in range(2):
                mine = [b for b in batches if b.bucket.bucket == bucket]
                kinds = [b.from_snapshot for b in mine]
                assert kinds == sorted(kinds, reverse=True) and kinds[0], kinds
                changelog_part = [b for b in mine if not b.from_snapshot]
                assert changelog_part[0].base_offset == snapshots[bucket][1]
                assert all(b.batch.schema.names == ["name", "id"] for b in mine)
            state: dict[int, str] = {}
            for batch in batches:
                types = batch.change_type_array().to_pylist()
                for kind, row in zip(types, batch.batch.to_pylist(), strict=True):
                    if kind in (ChangeType.INSERT, ChangeType.UPDATE_AFTER):
                        state[row["id"]] = row["name"]
                    else:
                        state.pop(row["id"], None)
            assert state == expected
            assert scanner.finished

            # the scan goes on with live changes once the stop offsets are lifted
            live = table.new_scan().startup_mode("full").create_log_scanner()
            await live.subscribe_startup()
            async with live:
                ends = await conn.get_admin().list_offsets(path, [0, 1], OffsetSpec.latest())
                caught_up = {TableBucket(table.table_id, None, b): end for b, end in ends.items()}
                while live.snapshots_pending or any(
                    live.positions()[b] < end for b, end in caught_up.items()
                ):
                    await live.poll_batches(500)
                async with table.new_upsert().create_writer() as writer:
                    writer.upsert({"id": 7777, "name": "live", "score": 1.0})
                records = []
                for _ in range(20):
                    records += [r for b in await live.poll_batches(500) for r in b.records()]
                    if records:
                        break
                assert [(r.change_type, r.row["name"]) for r in records] == [(ChangeType.INSERT, "live")]

    run(snapshot_cluster, body)


def test_snapshot_reader_and_bucket_state(snapshot_cluster: Cluster) -> None:
    path = unique("state")

    async def body(
        conn: Connection,
    ) -> tuple[dict[int, int], dict[int, dict[int, Any]], dict[int, dict[int, Any]]]:
        table = await create(conn, path, SCHEMA, ["id"], buckets=2)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(0, 300), "a")
        latest = await wait_for_snapshots(conn, path, 2)
        reader = SnapshotReader(table)
        for bucket, (snapshot_id, log_offset) in latest.items():
            snapshot = await reader.open(TableBucket(table.table_id, None, bucket))
            assert snapshot is not None
            async with snapshot:
                assert snapshot.snapshot_id >= snapshot_id and snapshot.log_offset >= log_offset
                rows = await snapshot.to_arrow()
                assert rows.schema == table.arrow_schema and rows.num_rows > 0
            assert not snapshot.directory.exists()
        # the state at a midpoint, then more changes on top
        middle = await conn.get_admin().list_offsets(path, [0, 1], OffsetSpec.latest())
        routing = KeyRouting(table.info)
        before: dict[int, dict[int, Any]] = {0: {}, 1: {}}
        lookuper = table.new_lookup().create_lookuper()
        for row in await lookuper.lookup_many([(i,) for i in range(300)]):
            assert row is not None
            values = [row["id"], row["name"], row["score"]]
            before[routing.bucket_of(values, routing.encode_key(values))][row["id"]] = row
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(250, 400), "b")
            writer.delete_arrow(pa.table({"id": pa.array(range(0, 20), pa.int32())}))
        after: dict[int, dict[int, Any]] = {0: {}, 1: {}}
        for row in await lookuper.lookup_many([(i,) for i in range(400)]):
            if row is not None:
                values = [row["id"], row["name"], row["score"]]
                after[routing.bucket_of(values, routing.encode_key(values))][row["id"]] = row
        return middle, before, after

    middle, before, after = run(snapshot_cluster, body)
    with SyncConnection({"bootstrap.servers": snapshot_cluster.bootstrap}) as sync:
        for bucket in (0, 1):
            now = sync.read_bucket_state(path, bucket, None)
            assert {r["id"]: r for r in now.to_pylist()} == after[bucket]
            assert now.num_rows == len(after[bucket])
            then = sync.read_bucket_state(
                path, bucket, None, end_offset=middle[bucket], projection=["id", "name"]
            )
            assert then.column_names == ["id", "name"]
            assert {r["id"]: r["name"] for r in then.to_pylist()} == {
                k: v["name"] for k, v in before[bucket].items()
            }
            offset, batches = sync.read_bucket_snapshot(path, bucket, None, projection=["id"])
            assert offset is not None and offset > 0
            ids = [i for b in batches for i in b.column("id").to_pylist()]
            assert ids and set(ids) <= set(range(400))
        # a PK table written through the sync facade, changelog style, and looked up
        sync.upsert_arrow(
            path,
            pa.table(
                {
                    "op": ["+I", "-D"],
                    "id": pa.array([900, 250], pa.int32()),
                    "name": ["s", "x"],
                    "score": [1.0, 1.0],
                }
            ),
            change_type_column="op",
        )
        sync.delete_arrow(path, pa.table({"id": pa.array([251], pa.int32())}))
        assert sync.lookup(path, [(900,), (250,), (251,), (252,)]) == [
            {"id": 900, "name": "s", "score": 1.0},
            None,
            None,
            {"id": 252, "name": "b252", "score": 252.0},
        ]


def test_startup_modes_latest_and_timestamp(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        table = await create(conn, unique("modes"), SCHEMA, ["id"], buckets=2)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(0, 100), "old")
        await asyncio.sleep(0.05)
        boundary = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(100, 150), "new")

        latest = table.new_scan().startup_mode("latest").create_log_scanner()
        await latest.subscribe_startup()
        from_time = table.new_scan().options(
            {"scan.startup.mode": "timestamp", "scan.startup.timestamp": boundary}
        )
        timed = from_time.create_log_scanner()
        await timed.subscribe_startup(buckets=[0, 1])
        earliest = table.new_scan().startup_mode("earliest").create_log_scanner()
        await earliest.subscribe_startup()
        async with latest, timed, earliest:
            assert await latest.poll_batches(300) == []
            names = [
                r["name"]
                for b in [b async for b in timed.iter_batches(to_end=True)]
                for r in b.batch.to_pylist()
            ]
            assert sorted(names) == sorted(f"new{i}" for i in range(100, 150))
            everything = [b async for b in earliest.iter_batches(to_end=True)]
            assert sum(b.num_rows for b in everything) == 150
            async with table.new_upsert().create_writer() as writer:
                writer.upsert({"id": 1, "name": "later", "score": 0.0})
            seen = []
            for _ in range(20):
                seen += [r for b in await latest.poll_batches(500) for r in b.records()]
                if len(seen) >= 2:
                    break
            assert [(r.change_type, r.row["name"]) for r in seen] == [
                (ChangeType.UPDATE_BEFORE, "old1"),
                (ChangeType.UPDATE_AFTER, "later"),
            ]
        with pytest.raises(ValueError, match="unknown startup mode"):
            table.new_scan().startup_mode("sometime")
        with pytest.raises(ValueError, match="timestamp"):
            table.new_scan().startup_mode("timestamp")

    run(shared_cluster, body)


def test_full_startup_on_partitioned_table_without_snapshots(shared_cluster: Cluster) -> None:
    """Buckets without a snapshot read their whole changelog; log tables read from the start."""

    async def body(conn: Connection) -> None:
        table = await create(
            conn,
            unique("fullpart"),
            ORDERS,
            ["region", "customer", "order"],
            buckets=2,
            partitions=("eu", "us"),
            partition_keys=["region"],
        )
        async with table.new_upsert().create_writer() as writer:
            writer.write_arrow(
                pa.table(
                    {
                        "region": ["eu", "us", "eu"],
                        "customer": [1, 2, 3],
                        "order": [1, 1, 1],
                        "amount": [1.0, 2.0, 3.0],
                    }
                )
            )
            writer.upsert({"region": "eu", "customer": 1, "order": 1, "amount": 1.5})
        scanner = table.new_scan().create_log_scanner()  # full is the default startup mode
        await scanner.subscribe_startup()
        async with scanner:
            batches = [b async for b in scanner.iter_batches(to_end=True)]
        assert not any(b.from_snapshot for b in batches)
        kinds = [k for b in batches for k in b.change_type_array().to_pylist()]
        assert sorted(kinds) == sorted([1, 1, 1, 2, 3])
        assert {b.bucket.partition_id for b in batches} == {
            p.partition_id for p in await conn.get_admin().list_partition_infos(table.path)
        }

    run(shared_cluster, body)


def test_sync_snapshot_of_bucket_without_one(shared_cluster: Cluster) -> None:
    path = unique("nosnap")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, SCHEMA, ["id"], buckets=1)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(10), "x")
            writer.delete((3,))

    run(shared_cluster, body)
    with SyncConnection({"bootstrap.servers": shared_cluster.bootstrap}) as sync:
        offset, batches = sync.read_bucket_snapshot(path, 0, None)
        assert offset is None and list(batches) == []
        state = sync.read_bucket_state(path, 0, None)  # the whole changelog, replayed
        assert sorted(state.column("id").to_pylist()) == [i for i in range(10) if i != 3]
        assert np.array_equal(
            np.sort(state.column("score").to_numpy()), np.array([float(i) for i in range(10) if i != 3])
        )


def test_snapshot_files_are_read_through_fsspec(snapshot_cluster: Cluster, tmp_path: Path) -> None:
    """The snapshot reader downloads into client.scanner.io.tmpdir and cleans up after itself."""
    path = unique("tmpdir")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, SCHEMA, ["id"], buckets=1)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(100), "t")
        await wait_for_snapshots(conn, path, 1)
        table = await conn.get_table(path)
        snapshot = await SnapshotReader(table).open(TableBucket(table.table_id, None, 0))
        assert snapshot is not None
        with snapshot:
            assert snapshot.directory.parent == tmp_path
            assert len(list(tmp_path.iterdir())) == 1
            assert (await snapshot.to_arrow()).num_rows == 100
        assert list(tmp_path.iterdir()) == []

    run(snapshot_cluster, body, **{"client.scanner.io.tmpdir": str(tmp_path)})


def test_replaced_snapshots_fall_back_to_newer_ones(snapshot_cluster: Cluster) -> None:
    """A snapshot retired by retention before it is read: scans and bucket states use the newest one."""
    path = unique("retired")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, SCHEMA, ["id"], buckets=1)
        async with table.new_upsert().create_writer() as writer:
            write_ids(writer, range(0, 100), "a")
        first = (await wait_for_snapshots(conn, path, 1))[0]
        scanner = table.new_scan().startup_mode("full").create_log_scanner()
        await scanner.subscribe_startup()  # plans with the first snapshot
        expected = {i: f"a{i}" for i in range(100)}
        reader = SnapshotReader(table)
        for round_ in range(1, 4):  # newer snapshots retire the first (kv.snapshot.num-retained = 2)
            async with table.new_upsert().create_writer() as writer:
                write_ids(writer, range(round_ * 10, round_ * 10 + 5), f"r{round_}-")
            expected.update({i: f"r{round_}-{i}" for i in range(round_ * 10, round_ * 10 + 5)})
            for _ in range(100):
                latest = (await reader.latest())[0]
                if latest[1] > first[1] and latest[0] > first[0] + round_ - 1:
                    break
                await asyncio.sleep(0.1)
        with pytest.raises(errors.KvSnapshotNotExistError):
            await reader.info(TableBucket(table.table_id, None, 0), first[0])
        state: dict[int, str] = {}
        async with scanner:
            async for batch in scanner.iter_batches(to_end=True):
                for kind, row in zip(
                    batch.change_type_array().to_pylist(), batch.batch.to_pylist(), strict=True
                ):
                    if kind in (ChangeType.INSERT, ChangeType.UPDATE_AFTER):
                        state[row["id"]] = row["name"]
                    else:
                        state.pop(row["id"], None)
        assert state == expected
        from strom.client.scanner import read_bucket_state

        rows = await read_bucket_state(table, 0, None, snapshot_id=first[0])
        assert {r["id"]: r["name"] for r in rows.to_pylist()} == expected

    run(snapshot_cluster, body)


def test_scanned_arrow_buffers_are_aligned(
    shared_cluster: Cluster, capfd: pytest.CaptureFixture[str]
) -> None:
    """An uncompressed changelog batch puts its Arrow message right after one change-type byte per row,
    so decoding it in place gave arrays whose buffers were misaligned for their types: Arrow calls that
    undefined behaviour, and every Acero call over the scanned rows (group_by, join; also Spark's
    fold of a primary-key table) printed "An input buffer was poorly aligned"."""
    path = unique("aligned")
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("amount", pa.decimal128(20, 3))]
    )

    async def body(conn: Connection) -> pa.Table:
        table = await create(
            conn, path, schema, ["id"], buckets=2, properties={"table.log.arrow.compression.type": "NONE"}
        )
        for round_ in range(3):  # batches of 5, 6 and 7 rows: change-type vectors of odd lengths
            async with table.new_upsert().create_writer() as writer:
                for i in range(5 + round_):
                    writer.upsert({"id": i, "name": f"n{round_}", "score": 1.5, "amount": round_})
        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({b: EARLIEST_OFFSET for b in range(2)})
        async with scanner:
            rows: pa.Table = await scanner.to_arrow()
        return rows

    rows = run(shared_cluster, body)
    assert rows.num_rows == 5 + (2 * 5 + 1) + (2 * 6 + 1)  # +I per new key, -U/+U per updated one
    misaligned = [
        (name, i, buffer.address % 8)
        for name, column in zip(rows.column_names, rows.columns, strict=True)
        for chunk in column.chunks
        for i, buffer in enumerate(chunk.buffers())
        if buffer is not None and buffer.address % 8
    ]
    assert not misaligned
    capfd.readouterr()
    assert rows.group_by("id").aggregate([("score", "sum")]).num_rows == 7
    assert "poorly aligned" not in capfd.readouterr().err


def test_a_full_lookup_queue_makes_callers_wait(shared_cluster: Cluster) -> None:
    """client.lookup.queue-size bounds the keys waiting to be sent: 300 concurrent lookups against a
    real tablet server never queue more than 8 keys, and every one is answered."""

    async def body(conn: Connection) -> None:
        table = await create(conn, unique("lookup_queue"), SCHEMA, ["id"], buckets=2)
        async with table.new_upsert().create_writer() as writer:
            writer.write_arrow(
                pa.table({"id": pa.array(range(300), pa.int32()), "name": ["n"] * 300, "score": [1.0] * 300})
            )
        lookuper = table.new_lookup().create_lookuper()
        client = conn.lookup_client
        most_queued = 0
        stop = asyncio.Event()

        async def watch() -> None:
            nonlocal most_queued
            while not stop.is_set():
                most_queued = max(most_queued, client.queued)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        rows = await asyncio.gather(*(lookuper.lookup({"id": i}) for i in range(300)))
        stop.set()
        await watcher
        assert [r["id"] for r in rows if r] == list(range(300))
        assert 0 < most_queued <= 8

    run(
        shared_cluster,
        body,
        **{"client.lookup.queue-size": "8", "client.lookup.max-inflight-requests": "1"},
    )
