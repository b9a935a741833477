"""Schema evolution read by the official pyfluss client: batches and KV rows written before AddColumn
keep their schema id and are read under the new schema with the added column null."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster, run_pyfluss

from strom.client import Connection, TableChange

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string())])


def unique(prefix: str) -> fluss.TablePath:
    return fluss.TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


def add_column(cluster: Cluster, path: fluss.TablePath, name: str, data_type: Any) -> None:
    async def main() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            await conn.get_admin().alter_table(
                f"{path.database_name}.{path.table_name}", [TableChange.add_column(name, data_type)]
            )

    asyncio.run(main())


async def read_all(table: Any, buckets: int, projection: list[str] | None = None) -> pa.Table:
    scan = table.new_scan()
    if projection is not None:
        scan = scan.project_by_name(projection)
    scanner = await scan.create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    return await scanner.to_arrow()


async def read_rows(table: Any, buckets: int, expected: int) -> list[dict[str, Any]]:
    scanner = await table.new_scan().create_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    rows: list[dict[str, Any]] = []
    for _ in range(40):
        if len(rows) >= expected:
            break
        records = await scanner.poll(500)
        for bucket in records.buckets():
            rows += [dict(r.row) for r in records.records(bucket)]
    return sorted(rows, key=lambda r: r["id"])


def test_pyfluss_reads_a_log_table_across_add_column(shared_cluster: Cluster) -> None:
    path = unique("evolve_log")

    async def before(connection: Any) -> None:
        await connection.get_admin().create_table(
            path, fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=2)
        )
        table = await connection.get_table(path)
        writer = table.new_append().create_writer()
        for i in range(10):
            writer.append({"id": i, "name": f"old-{i}"})
        await writer.flush()

    async def after(connection: Any) -> tuple[pa.Table, pa.Table, list[dict[str, Any]]]:
        table = await connection.get_table(path)
        writer = table.new_append().create_writer()
        for i in range(10, 15):
            writer.append({"id": i, "name": f"new-{i}", "note": f"note-{i}"})
        await writer.flush()
        return (
            await read_all(table, 2),
            await read_all(table, 2, ["id", "note"]),
            await read_rows(table, 2, 15),
        )

    run_pyfluss(shared_cluster.bootstrap, before)
    add_column(shared_cluster, path, "note", pa.string())
    everything, projected, rows = run_pyfluss(shared_cluster.bootstrap, after)
    notes = [None] * 10 + [f"note-{i}" for i in range(10, 15)]
    everything = everything.sort_by("id")
    assert everything.column_names == ["id", "name", "note"]
    assert everything.column("id").to_pylist() == list(range(15))
    assert everything.column("name").to_pylist() == [f"old-{i}" for i in range(10)] + [
        f"new-{i}" for i in range(10, 15)
    ]
    assert everything.column("note").to_pylist() == notes
    projected = projected.sort_by("id")
    assert projected.column_names == ["id", "note"] and projected.column("note").to_pylist() == notes
    assert [r["note"] for r in rows] == notes and [r["id"] for r in rows] == list(range(15))


def test_pyfluss_looks_up_and_reads_a_pk_table_across_add_column(shared_cluster: Cluster) -> None:
    """Rows stored before AddColumn come back from lookups with the new column null; an upsert of an
    old key fills it; a writer still on the old schema keeps writing; the changelog reads as one
    schema."""
    path = unique("evolve_pk")
    name = f"{path.database_name}.{path.table_name}"

    async def before(connection: Any) -> None:
        schema = fluss.Schema(SCHEMA, primary_keys=["id"])
        await connection.get_admin().create_table(path, fluss.TableDescriptor(schema, bucket_count=2))
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        for i in range(6):
            writer.upsert({"id": i, "name": f"old-{i}"})
        await writer.flush()

    async def old_schema_writer_across_the_change() -> None:
        async with await Connection.create({"bootstrap.servers": shared_cluster.bootstrap}) as conn:
            table = await conn.get_table(name)
            writer = table.new_upsert().create_writer()
            await conn.get_admin().alter_table(name, [TableChange.add_column("note", "STRING")])
            writer.upsert({"id": 5, "name": "old-writer-5"})  # still schema 1
            writer.upsert({"id": 6, "name": "old-writer-6"})
            await writer.flush()

    async def after(connection: Any) -> tuple[list[Any], list[tuple[str, dict[str, Any]]]]:
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        writer.upsert({"id": 1, "name": "new-1", "note": "filled"})
        writer.upsert({"id": 7, "name": "new-7", "note": "seven"})
        await writer.flush()
        lookuper = table.new_lookup().create_lookuper()
        found = [await lookuper.lookup({"id": i}) for i in range(9)]
        scanner = await table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(2)})
        changes: list[tuple[int, int, str, dict[str, Any]]] = []
        for _ in range(40):
            if len(changes) >= 12:
                break
            records = await scanner.poll(500)
            for bucket in records.buckets():
                for r in records.records(bucket):
                    changes.append((bucket.bucket_id, r.offset, r.change_type.short_string(), dict(r.row)))
        changes.sort(key=lambda c: (c[0], c[1]))
        return found, [(kind, row) for _, _, kind, row in changes]

    run_pyfluss(shared_cluster.bootstrap, before)
    asyncio.run(old_schema_writer_across_the_change())
    found, changes = run_pyfluss(shared_cluster.bootstrap, after)
    assert found[0] == {"id": 0, "name": "old-0", "note": None}
    assert found[1] == {"id": 1, "name": "new-1", "note": "filled"}
    assert found[2] == {"id": 2, "name": "old-2", "note": None}
    assert found[5] == {"id": 5, "name": "old-writer-5", "note": None}
    assert found[6] == {"id": 6, "name": "old-writer-6", "note": None}
    assert found[7] == {"id": 7, "name": "new-7", "note": "seven"}
    assert found[8] is None
    # 6 inserts; id 5 updated (-U, +U), id 6 inserted by the old writer; id 1 updated, id 7 inserted
    assert len(changes) == 12
    assert all(set(row) == {"id", "name", "note"} for _, row in changes)
    assert ("-U", {"id": 1, "name": "old-1", "note": None}) in changes
    assert ("+U", {"id": 1, "name": "new-1", "note": "filled"}) in changes
    assert ("+U", {"id": 5, "name": "old-writer-5", "note": None}) in changes
    assert ("+I", {"id": 6, "name": "old-writer-6", "note": None}) in changes


def test_pyfluss_reads_tiered_segments_written_before_add_column(cluster_factory: Any) -> None:
    """Segments copied to remote storage before AddColumn are read under the new schema too."""
    cluster: Cluster = cluster_factory(
        tablet_servers=1,
        config={"log.segment.file-size": "4kb", "remote.log.task-interval-duration": "200ms"},
    )
    path = fluss.TablePath("fluss", "tiered_evolve")

    async def before(connection: Any) -> None:
        properties = {"table.log.tiered.local-segments": "1", "table.log.arrow.compression.type": "NONE"}
        await connection.get_admin().create_table(
            path, fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=1, properties=properties)
        )
        table = await connection.get_table(path)
        writer = table.new_append().create_writer()
        for start in range(0, 1000, 50):  # many small batches: many 4 KB segments
            writer.write_arrow_batch(
                pa.RecordBatch.from_pylist(
                    [{"id": i, "name": f"old-{i}"} for i in range(start, start + 50)], schema=SCHEMA
                )
            )
            await writer.flush()

    run_pyfluss(cluster.bootstrap, before)
    remote = cluster.base_dir / "remote" / "log"
    deadline = time.monotonic() + 30
    while len(list(remote.rglob("*.log"))) < 3 or (
        len(list((cluster.tablet_servers[0].data_dir / "fluss").rglob("*.log"))) > 2
    ):
        assert time.monotonic() < deadline, "segments were not tiered and trimmed locally"
        time.sleep(0.2)

    add_column(cluster, path, "note", pa.string())

    async def after(connection: Any) -> tuple[pa.Table, pa.Table]:
        table = await connection.get_table(path)
        writer = table.new_append().create_writer()
        for i in range(1000, 1010):
            writer.append({"id": i, "name": f"new-{i}", "note": f"note-{i}"})
        await writer.flush()
        return await read_all(table, 1), await read_all(table, 1, ["id", "note"])

    everything, projected = run_pyfluss(cluster.bootstrap, after)
    notes = [None] * 1000 + [f"note-{i}" for i in range(1000, 1010)]
    everything = everything.sort_by("id")
    assert everything.column_names == ["id", "name", "note"]
    assert everything.column("id").to_pylist() == list(range(1010))
    assert everything.column("name").to_pylist()[:1000] == [f"old-{i}" for i in range(1000)]
    assert everything.column("note").to_pylist() == notes
    projected = projected.sort_by("id")
    assert projected.column_names == ["id", "note"] and projected.column("note").to_pylist() == notes
