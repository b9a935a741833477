"""The Spark connector across AddColumn: a stream running while the column is added sees every row
once (in the schema it started with), and a read planned afterwards has the new column, null for the
rows written before."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from fluss_helpers import append, create_table, unique
from harness import Cluster

from strom.client import Connection, TableChange

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(ids: range, note: bool = False) -> pa.Table:
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}
    if note:
        columns["note"] = [f"note{i}" for i in ids]
    return pa.table(columns)


def add_note(cluster: Cluster, name: str) -> None:
    async def main() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            await conn.get_admin().alter_table(f"fluss.{name}", [TableChange.add_column("note", "STRING")])

    asyncio.run(main())


def test_a_stream_runs_across_add_column_and_later_reads_see_the_column(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    name = unique("spark_evolve")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2)
    append(shared_cluster.bootstrap, name, rows(range(0, 100)))
    seen: list[pa.Table] = []
    query = (
        spark.readStream.format("fluss")
        .option("bootstrap.servers", shared_cluster.bootstrap)
        .load(f"fluss.{name}")
        .writeStream.foreachBatch(lambda df, _: seen.append(df.toArrow()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while sum(t.num_rows for t in seen) < 100:
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(0.2)
        add_note(shared_cluster, name)
        append(shared_cluster.bootstrap, name, rows(range(100, 150), note=True))
        while sum(t.num_rows for t in seen) < 150:
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.5)  # a few more micro-batches: nothing may come twice
    finally:
        query.stop()
    streamed = pa.concat_tables(t for t in seen if t.num_rows)
    assert streamed.column_names == ["id", "name"]
    assert sorted(streamed["id"].to_pylist()) == list(range(150))

    batch = (
        spark.read.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).load(f"fluss.{name}")
    )
    assert batch.schema.simpleString() == "struct<id:bigint,name:string,note:string>"
    got = batch.toArrow().sort_by("id").to_pylist()
    assert got == [{"id": i, "name": f"n{i}", "note": None if i < 100 else f"note{i}"} for i in range(150)]
