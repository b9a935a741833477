"""Rescaling a lake-enabled table (docs/operations.md "Rescaling buckets", docs/lake.md): a real cluster
with Iceberg or Paimon, the tiering service in-process (LocalSplitRunner, no Spark).

A log table without a bucket key (Iceberg: partitioned by identity on `__bucket`; Paimon:
bucket-unaware) goes 2 -> 4 between two tiering rounds: the old buckets resume from the lake's offsets,
the new ones are tiered from 0, and pyiceberg / pypaimon read every row exactly once, from all four
buckets. A lake-enabled primary-key table (laid out by bucket(2) of the key, or Paimon's `bucket = 2`)
is refused with its format's reason, and keeps 2 buckets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster
from pyiceberg.catalog import load_catalog
from pypaimon import CatalogFactory

from strom.client import Connection, OffsetSpec, Schema, TableDescriptor, TablePath
from strom.client.table_change import TableChange
from strom.common import errors
from strom.spark.tiering.runner import LocalSplitRunner
from strom.spark.tiering.service import TieringService, TieringSettings

LAKE = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}


def lake_rows(lake: str, properties: dict[str, str]) -> list[dict[str, Any]]:
    """The lake table's rows as the format's own library reads them."""
    if lake == "iceberg":
        return load_catalog(**properties).load_table(("lake", "events")).scan().to_arrow().to_pylist()
    table = CatalogFactory.create(properties).get_table("lake.events")
    builder = table.new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits()).to_pylist()


@pytest.mark.parametrize("lake", ["iceberg", "paimon"])
def test_lake_enabled_log_table_rescaled_between_tiering_rounds(tmp_path: Path, lake: str) -> None:
    properties = (
        {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/iceberg_catalog.db",
            "warehouse": f"file://{tmp_path}/wh",
        }
        if lake == "iceberg"
        else {"metastore": "filesystem", "warehouse": str(tmp_path / "paimon")}
    )
    config = {"datalake.format": lake, **{f"datalake.{lake}.{k}": v for k, v in properties.items()}}
    cluster = Cluster(tmp_path / "cluster", tablet_servers=1, config=config).start()
    settings = TieringSettings(cluster.bootstrap, lake, properties, poll_interval=0.2)
    path = TablePath("lake", "events")
    pk_path = TablePath("lake", "users")

    async def tier_once() -> None:
        await asyncio.wait_for(TieringService(settings, LocalSplitRunner()).run(max_rounds=1), 60)

    async def append(conn: Connection, ids: range) -> None:
        table = await conn.get_table(path)  # fetched again: after the rescale it routes by 4
        async with table.new_append().create_writer() as writer:
            for i in ids:
                writer.append({"id": i, "v": f"v{i}"})

    async def lake_offsets(admin: Any) -> dict[int, int]:
        snapshot = await admin.get_latest_lake_snapshot(path)
        return {bucket.bucket: offset for bucket, offset in snapshot.bucket_offsets.items()}

    async def main() -> Any:
        # round robin: every bucket gets rows, the new ones included
        client = {
            "bootstrap.servers": cluster.bootstrap,
            "client.writer.bucket.no-key-assigner": "round_robin",
        }
        async with await Connection.create(client) as conn:
            admin = conn.get_admin()
            await admin.create_database("lake", ignore_if_exists=True)
            columns = pa.schema([("id", pa.int32()), ("v", pa.string())])
            schema = Schema.from_arrow_schema(columns)
            await admin.create_table(path, TableDescriptor(schema, bucket_count=2, properties=LAKE))
            await append(conn, range(0, 200))
            await tier_once()
            before = await lake_offsets(admin)
            await admin.alter_table(path, [TableChange.set_option("bucket.num", "4")])
            assert (await admin.get_table_info(path)).bucket_count == 4
            await append(conn, range(200, 600))
            await tier_once()
            after = await lake_offsets(admin)
            ends = await admin.list_offsets(path, range(4), OffsetSpec.latest())

            # a primary-key table's lake table is laid out by the count: refused, unchanged
            pk = Schema.from_arrow_schema(columns, ["id"])
            await admin.create_table(pk_path, TableDescriptor(pk, bucket_count=2, properties=LAKE))
            reason = (
                "Iceberg table is partitioned by bucket" if lake == "iceberg" else "Paimon fixes the bucket"
            )
            with pytest.raises(errors.InvalidAlterTableError, match=reason):
                await admin.alter_table(pk_path, [TableChange.set_option("bucket.num", "4")])
            assert (await admin.get_table_info(pk_path)).bucket_count == 2
            return before, after, ends

    try:
        before, after, ends = asyncio.run(main())
    finally:
        cluster.stop()
    # the old buckets resumed from their offsets; the new ones were tiered from 0, to the log end
    assert sorted(before) == [0, 1] and sum(before.values()) == 200
    assert {b: after[b] for b in range(4)} == {b: ends[b] for b in range(4)}
    assert all(after[b] > before[b] for b in (0, 1)) and all(after[b] > 0 for b in (2, 3))
    rows = lake_rows(lake, properties)
    assert sorted(r["id"] for r in rows) == list(range(600))  # each row once
    assert all(r["v"] == f"v{r['id']}" for r in rows)
    assert {r["__bucket"] for r in rows} == {0, 1, 2, 3}
