"""Schema evolution read by the official pyfluss client: batches and KV rows written before AddColumn
keep their schema id and are read under the new schema with the added column null."""

from __future__ import annotations

import asyncio
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
