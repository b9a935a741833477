"""Issue 24's scenario end to end, without Spark: a lake-enabled log table with a short TTL is written
while no tiering service runs. Past its TTL nothing has expired (the log waits for the lake); then the
real tiering service (local runner) starts, the lake receives every record, and only then is the log
trimmed behind it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from harness import Cluster
from pyiceberg.catalog import load_catalog
from test_tiering_service import iceberg_properties, lake_config, start_tiering

from strom.client import Connection, OffsetSpec, Schema, TableDescriptor, TablePath

ROWS = 2000


def test_expired_log_waits_for_tiering_then_trims(cluster_factory: Any, tmp_path: Path) -> None:
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(
        tablet_servers=1,
        config={
            **config,
            "log.retention.check-interval": "500ms",
            "log.segment.file-size": "8kb",
            "remote.log.task-interval-duration": "500ms",
        },
    )
    path = TablePath("fluss", "events")
    properties = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s", "table.log.ttl": "1s"}

    async def earliest(conn: Connection) -> int:
        return (await conn.get_admin().list_offsets(path, [0], OffsetSpec.earliest()))[0]

    async def write_and_wait() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("name", pa.string())]))
            await conn.get_admin().create_table(
                path, TableDescriptor(schema, bucket_count=1, properties=properties)
            )
            writer = (await conn.get_table(path)).new_append().create_writer()
            for start in range(0, ROWS, 100):
                ids = list(range(start, start + 100))
                await writer.write_arrow(pa.table({"id": ids, "name": [f"event-{i:08x}" * 4 for i in ids]}))
                await writer.flush()
            await asyncio.sleep(4)  # TTL 1 s, retention and remote expiry every 0.5 s: all of it expired
            assert await earliest(conn) == 0

    asyncio.run(asyncio.wait_for(write_and_wait(), 60))
    assert "LAKE RETENTION HOLD EXPIRED" not in cluster.logs()

    tiering = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:

        async def caught_up() -> None:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                deadline = time.monotonic() + 60
                while await earliest(conn) < ROWS:
                    assert time.monotonic() < deadline, "the log was never trimmed behind the lake"
                    await asyncio.sleep(0.3)

        asyncio.run(caught_up())
    finally:
        tiering.terminate()
        tiering.wait(10)
    # the log is trimmed to its end only because the lake holds every record
    lake = load_catalog(**iceberg_properties(config)).load_table("fluss.events").scan().to_arrow()
    assert sorted(lake.column("id").to_pylist()) == list(range(ROWS))
