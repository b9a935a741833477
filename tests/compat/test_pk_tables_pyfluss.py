"""Primary-key tables through the official pyfluss client: upserts, partial updates, deletes, lookups,
prefix lookups and the exact changelog each merge engine produces; durability across SIGKILL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster, run_pyfluss

from strom.client import Connection

run = run_pyfluss


def unique(prefix: str) -> fluss.TablePath:
    return fluss.TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


async def changelog(table: Any, buckets: int, expected: int) -> list[tuple[str, dict[str, Any]]]:
    """Every changelog record (change type, row), ordered by (bucket, offset)."""
    scanner = await table.new_scan().create_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    seen: list[tuple[int, int, str, dict[str, Any]]] = []
    for _ in range(50):
        if len(seen) >= expected:
            break
        records = await scanner.poll(500)
        for bucket in records.buckets():
            for r in records.records(bucket):
                seen.append((bucket.bucket_id, r.offset, r.change_type.short_string(), dict(r.row)))
    seen.sort(key=lambda x: (x[0], x[1]))
    return [(kind, row) for _, _, kind, row in seen]


SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])


def test_upsert_delete_lookup_and_changelog(shared_cluster: Cluster) -> None:
    path = unique("pk")

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            path, fluss.TableDescriptor(fluss.Schema(SCHEMA, primary_keys=["id"]), bucket_count=1)
        )
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        writer.upsert({"id": 1, "name": "a", "score": 1.0})
        writer.upsert({"id": 2, "name": "b", "score": 2.0})
        writer.upsert({"id": 1, "name": "a2", "score": 1.5})
        writer.delete({"id": 2})
        writer.delete({"id": 99})  # missing key: no change at all
        await writer.flush()

        lookuper = table.new_lookup().create_lookuper()
        assert await lookuper.lookup({"id": 1}) == {"id": 1, "name": "a2", "score": 1.5}
        assert await lookuper.lookup({"id": 2}) is None
        assert await lookuper.lookup({"id": 99}) is None

        log = await changelog(table, 1, 5)
        assert log == [
            ("+I", {"id": 1, "name": "a", "score": 1.0}),
            ("+I", {"id": 2, "name": "b", "score": 2.0}),
            ("-U", {"id": 1, "name": "a", "score": 1.0}),
            ("+U", {"id": 1, "name": "a2", "score": 1.5}),
            ("-D", {"id": 2, "name": "b", "score": 2.0}),
        ]

        partial = table.new_upsert().partial_update_by_name(["id", "score"]).create_writer()
        partial.upsert({"id": 1, "score": 9.0})
        await partial.flush()
        assert await lookuper.lookup({"id": 1}) == {"id": 1, "name": "a2", "score": 9.0}

    run(shared_cluster.bootstrap, body)


def test_composite_keys_partitions_and_prefix_lookup(shared_cluster: Cluster) -> None:
    path = unique("orders")
    schema = pa.schema(
        [("region", pa.string()), ("customer", pa.int64()), ("order", pa.int64()), ("amount", pa.float64())]
    )

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        descriptor = fluss.TableDescriptor(
            fluss.Schema(schema, primary_keys=["region", "customer", "order"]),
            partition_keys=["region"],
            bucket_keys=["customer"],
            bucket_count=3,
        )
        await admin.create_table(path, descriptor)
        for region in ("eu", "us"):
            await admin.create_partition(path, {"region": region})
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        expected: dict[tuple[str, int, int], float] = {}
        for region in ("eu", "us"):
            for customer in range(5):
                for order in range(4):
                    amount = float(customer * 10 + order)
                    writer.upsert({"region": region, "customer": customer, "order": order, "amount": amount})
                    expected[(region, customer, order)] = amount
        await writer.flush()

        lookuper = table.new_lookup().create_lookuper()
        for (region, customer, order), amount in list(expected.items())[::7]:
            row = await lookuper.lookup({"region": region, "customer": customer, "order": order})
            assert row is not None and row["amount"] == amount

        prefix = table.new_lookup().lookup_by(["region", "customer"]).create_lookuper()
        rows = await prefix.lookup({"region": "us", "customer": 3})
        assert sorted((r["order"], r["amount"]) for r in rows) == [(o, 30.0 + o) for o in range(4)]
        assert await prefix.lookup({"region": "eu", "customer": 42}) == []

    run(shared_cluster.bootstrap, body)


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ("first_row", [("+I", 1.0)]),
        ("versioned", [("+I", 1.0), ("-U", 1.0), ("+U", 3.0)]),
    ],
)
def test_merge_engine_changelogs(
    shared_cluster: Cluster, engine: str, expected: list[tuple[str, float]]
) -> None:
    path = unique(engine)
    schema = pa.schema([("id", pa.int32()), ("version", pa.int64()), ("score", pa.float64())])
    properties = {"table.merge-engine": engine}
    if engine == "versioned":
        properties["table.merge-engine.versioned.ver-column"] = "version"

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            path,
            fluss.TableDescriptor(
                fluss.Schema(schema, primary_keys=["id"]), bucket_count=1, properties=properties
            ),
        )
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        writer.upsert({"id": 1, "version": 5, "score": 1.0})
        writer.upsert({"id": 1, "version": 3, "score": 2.0})  # older version: ignored by versioned
        writer.upsert({"id": 1, "version": 7, "score": 3.0})
        await writer.flush()
        log = await changelog(table, 1, len(expected))
        assert [(kind, row["score"]) for kind, row in log] == expected
        row = await table.new_lookup().create_lookuper().lookup({"id": 1})
        assert row is not None and row["score"] == expected[-1][1]

    run(shared_cluster.bootstrap, body)


def test_acknowledged_writes_survive_sigkill_with_and_without_snapshot(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1, config={"kv.snapshot.interval": "1s"})
    path = fluss.TablePath("fluss", "durable_pk")
    n = 2000

    async def write(connection: Any, start: int, version: int) -> None:
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        for i in range(start, start + n):
            writer.upsert({"id": i % 1500, "name": f"v{version}-{i}", "score": float(i)})
        await writer.flush()

    async def first(connection: Any) -> None:
        await connection.get_admin().create_table(
            path, fluss.TableDescriptor(fluss.Schema(SCHEMA, primary_keys=["id"]), bucket_count=2)
        )
        await write(connection, 0, 1)

    async def check(connection: Any, last: dict[int, float]) -> None:
        table = await connection.get_table(path)
        # pyfluss answers one lookup per lookuper at a time, each after its 100 ms batch timeout: check a
        # spread of keys through several lookupers; the scan below checks every key
        keys = list(last)[::30]
        lookupers = [table.new_lookup().create_lookuper() for _ in range(10)]
        rows = await asyncio.gather(*(lookupers[i % 10].lookup({"id": k}) for i, k in enumerate(keys)))
        for key, row in zip(keys, rows, strict=True):
            assert row is not None and row["score"] == last[key], (key, row)
        # the changelog, folded by key, ends at exactly the same state for all keys
        scanner = await table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET, 1: fluss.EARLIEST_OFFSET})
        state: dict[int, float] = {}
        offsets = await connection.get_admin().list_offsets(path, [0, 1], fluss.OffsetSpec.latest())
        seen = {0: -1, 1: -1}
        while any(seen[b] < offsets[b] - 1 for b in (0, 1)):
            records = await scanner.poll(1000)
            for bucket in records.buckets():
                for r in records.records(bucket):
                    seen[bucket.bucket_id] = r.offset
                    if r.change_type in (fluss.ChangeType.Insert, fluss.ChangeType.UpdateAfter):
                        state[r.row["id"]] = r.row["score"]
                    elif r.change_type == fluss.ChangeType.Delete:
                        state.pop(r.row["id"], None)
        assert state == last

    def expected(rounds: int) -> dict[int, float]:
        out: dict[int, float] = {}
        for r in range(rounds):
            for i in range(r * n, r * n + n):
                out[i % 1500] = float(i)
        return out

    run(cluster.bootstrap, first)
    cluster.kill_tablet_server(0)  # no snapshot may exist yet: recovery replays the whole changelog
    cluster.start_tablet_server(0)
    cluster.wait_for_tablet_servers({0})
    run(cluster.bootstrap, lambda c: check(c, expected(1)))

    async def wait_for_snapshot() -> None:
        # the coordinator's KV snapshot registry, through Strom's own client
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as ours:
            for _ in range(100):
                snapshots = await ours.get_admin().get_latest_kv_snapshots("fluss.durable_pk")
                if len(snapshots.snapshot_ids) == 2 and min(snapshots.log_offsets.values()) > 0:
                    return
                await asyncio.sleep(0.2)
        raise AssertionError("no KV snapshot of both buckets was committed")

    asyncio.run(wait_for_snapshot())
    run(cluster.bootstrap, lambda c: write(c, n, 2))  # more writes after the snapshot
    cluster.kill_tablet_server(0)
    cluster.start_tablet_server(0)
    cluster.wait_for_tablet_servers({0})
    run(cluster.bootstrap, lambda c: check(c, expected(2)))
    snapshot_dirs = list((cluster.base_dir / "remote").rglob("_METADATA"))
    assert snapshot_dirs, "no KV snapshot was uploaded"


def test_writes_that_change_nothing_keep_a_replicated_table_moving(shared_cluster: Cluster) -> None:
    """A delete of a missing key or a FIRST_ROW duplicate changes nothing, yet the leader appends an
    EMPTY changelog batch (it moves the idempotent writer's sequence, as in Fluss). Followers must copy
    it: when they refused it, the high watermark stuck until they left the ISR (30 s), so every acked
    write after it waited that long, and the bucket ran on one replica."""
    path = unique("noop")

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            path,
            fluss.TableDescriptor(
                fluss.Schema(SCHEMA, primary_keys=["id"]),
                bucket_count=1,
                properties={"table.replication.factor": "2", "table.merge-engine": "first_row"},
            ),
        )
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        writer.upsert({"id": 1, "name": "a", "score": 1.0})
        await writer.flush()
        loop = asyncio.get_running_loop()
        for change in (
            lambda: writer.delete({"id": 99}),  # a missing key
            lambda: writer.upsert({"id": 1, "name": "dup", "score": 2.0}),  # FIRST_ROW keeps the first
            lambda: writer.upsert({"id": 2, "name": "b", "score": 3.0}),
        ):
            started = loop.time()
            change()
            await writer.flush()
            assert loop.time() - started < 10, "an acked write waited for a follower stuck on an empty batch"

        lookuper = table.new_lookup().create_lookuper()
        assert await lookuper.lookup({"id": 1}) == {"id": 1, "name": "a", "score": 1.0}
        assert await changelog(table, 1, 2) == [
            ("+I", {"id": 1, "name": "a", "score": 1.0}),
            ("+I", {"id": 2, "name": "b", "score": 3.0}),
        ]

    run(shared_cluster.bootstrap, body)
