"""The tiering service into Lance and Delta Lake on a real cluster: pyfluss writes a lake-enabled log
table, the service (local runner) is SIGKILLed after its first round and started again, and the lake
ends with every record exactly once, read by the format's own reader and by the union read's lake
half. Primary-key tables are refused at creation, with the reason."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster
from test_tiering_service import start_tiering

from strom.common.table_path import TablePath
from strom.lake import load_lake_storage
from strom.spark.lake_source import latest_cut, read_bucket

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
LAKE = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}


async def create_and_write(connection: Any, ids: range, create: bool) -> str | None:
    """Write `ids` to fluss.events (creating it first when asked); the PK table's creation error."""
    admin = connection.get_admin()
    refused = None
    if create:
        await admin.create_table(
            fluss.TablePath("fluss", "events"),
            fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=2, properties=LAKE),
        )
        try:
            await admin.create_table(
                fluss.TablePath("fluss", "accounts"),
                fluss.TableDescriptor(
                    fluss.Schema(SCHEMA, primary_keys=["id"]), bucket_count=2, properties=LAKE
                ),
            )
        except Exception as e:  # pyfluss's FlussError
            refused = str(e)
    table = await connection.get_table(fluss.TablePath("fluss", "events"))
    writer = table.new_append().create_writer()
    writer.write_arrow(pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"e{i}" for i in ids]}))
    await writer.flush()
    return refused


def pyfluss(cluster: Cluster, ids: range, create: bool = False) -> str | None:
    async def main() -> str | None:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": cluster.bootstrap})
        )
        try:
            return await asyncio.wait_for(create_and_write(connection, ids, create), 60)
        finally:
            await connection.close()

    return asyncio.run(main())


@pytest.mark.parametrize("lake_format", ["lance", "delta"])
def test_tiering_into_lance_and_delta_survives_a_killed_service(
    cluster_factory: Any, tmp_path: Path, lake_format: str
) -> None:
    config = {
        "datalake.format": lake_format,
        f"datalake.{lake_format}.warehouse": str(tmp_path / lake_format),
    }
    cluster: Cluster = cluster_factory(tablet_servers=1, config=config)
    refused = pyfluss(cluster, range(0, 300), create=True)
    assert refused is not None and "primary-key" in refused
    storage = load_lake_storage(lake_format, {"warehouse": str(tmp_path / lake_format)})
    lake = tuple(config.items())
    catalog: Any = storage.catalog()

    def lake_ids() -> list[int]:
        path = TablePath("fluss", "events")
        if lake_format == "lance":
            rows = catalog.open(path).to_table(columns=["id"])
        else:
            rows = catalog.open(path).to_pyarrow_table(columns=["id"])
        return sorted(rows.column("id").to_pylist())

    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        deadline = time.monotonic() + 60
        while not lake_ids():
            assert time.monotonic() < deadline, "the first round never reached the lake"
            time.sleep(0.2)
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait(30)
    pyfluss(cluster, range(300, 500))
    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        deadline = time.monotonic() + 60
        while lake_ids() != list(range(500)):
            assert len(lake_ids()) <= 500, "records were tiered twice"
            assert time.monotonic() < deadline, "the lake never caught up with Fluss"
            time.sleep(0.3)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)

    # The lake half of a union read: each bucket's rows below the snapshot's offsets, in offset order.
    from strom.client.sync import SyncConnection

    with SyncConnection({"bootstrap.servers": cluster.bootstrap}) as connection:
        info = connection.get_table_info("fluss.events")
    # bound to the format as Fluss binds tables (pyfluss wrote to it all the same, "delta" included)
    assert info.descriptor.properties["table.datalake.format"] == lake_format
    cut = latest_cut(lake, info)
    assert cut is not None and sum(cut.bucket_offsets.values()) == 500
    ids: list[int] = []
    for (_, bucket), end in cut.bucket_offsets.items():
        rows = read_bucket(lake, info, cut.snapshot_id, None, bucket, end, ["id", "name"])
        assert rows.column("__offset").to_pylist() == list(range(end))
        ids += rows.column("id").to_pylist()
    assert sorted(ids) == list(range(500))
