"""Fluss 1.0 batch statistics end to end: the official client (pyfluss 1.0) writes V1 batches with
statistics when the table sets `table.statistics.columns`; the server validates and stores them; a
filtered fetch skips the batches whose statistics prove no row matches (counted in
`batchesSkippedByStatistics`) and returns exactly the rows a table without statistics returns.
Strom's own client writes the same layout, which pyfluss reads back."""

from __future__ import annotations

import asyncio
import re
import urllib.request
import uuid
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET, col

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tag", pa.int32())])
CONFIG = {"metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": "0"}


def rows(start: int, count: int) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.record_batch(
        [
            pa.array(ids, pa.int64()),
            pa.array([f"n{i}" for i in ids]),
            pa.array([start // 100] * count, pa.int32()),
        ],
        schema=SCHEMA,
    )


def skipped_batches(cluster: Cluster, table: str) -> float:
    """The table's batchesSkippedByStatistics, summed over the tablet servers (the bucket leader's)."""
    total = 0.0
    pattern = rf'^\S*batchesSkippedByStatistics\S*\{{[^}}]*table="{table}"[^}}]*\}} (\S+)$'
    for server in cluster.tablet_servers.values():
        port = re.findall(r"Prometheus metrics on http://[^:]+:(\d+)/metrics", server.log_path.read_text())[
            -1
        ]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        found = re.search(pattern, text, re.M)
        total += float(found.group(1)) if found else 0.0
    return total


def test_filtered_fetch_skips_batches_on_statistics(cluster_factory: Any) -> None:
    # one server keeps it lean: followers run the same batch check (Replica.batch_check) as leaders
    cluster: Cluster = cluster_factory(tablet_servers=1, config=CONFIG)
    suffix = uuid.uuid4().hex[:8]
    with_stats, without, own = f"stats_{suffix}", f"plain_{suffix}", f"own_{suffix}"

    async def pyfluss_writes() -> pa.Table:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": cluster.bootstrap})
        )
        try:
            admin = connection.get_admin()
            for name, properties in ((with_stats, {"table.statistics.columns": "*"}), (without, {})):
                path = fluss.TablePath("fluss", name)
                descriptor = fluss.TableDescriptor(
                    fluss.Schema(SCHEMA), bucket_count=1, properties=properties
                )
                await admin.create_table(path, descriptor)
                writer = (await connection.get_table(path)).new_append().create_writer()
                for start in range(0, 600, 100):  # six batches, tag = 0..5
                    writer.write_arrow_batch(rows(start, 100))
                    await writer.flush()
            # what Strom's own client wrote with statistics, read back by the official client
            scanner = (
                await (await connection.get_table(fluss.TablePath("fluss", own)))
                .new_scan()
                .create_record_batch_log_scanner()
            )
            scanner.subscribe(0, fluss.EARLIEST_OFFSET)
            parts: list[pa.Table] = []
            while sum(p.num_rows for p in parts) < 300:
                parts.append(await scanner.poll_arrow(1000))
            return pa.concat_tables(parts)
        finally:
            await connection.close()

    async def strom_side() -> pa.Table:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            admin = conn.get_admin()
            await admin.create_table(
                TablePath("fluss", own),
                TableDescriptor(
                    Schema.from_arrow_schema(SCHEMA),
                    bucket_count=1,
                    properties={"table.statistics.columns": "id,tag"},
                ),
            )
            table = await conn.get_table(TablePath("fluss", own))
            writer = table.new_append().create_writer()
            for start in range(0, 300, 100):
                writer.write_arrow_batch(rows(start, 100))
                await writer.flush()
            return await asyncio.wait_for(pyfluss_writes(), 60)

    read_back = asyncio.run(strom_side())
    assert sorted(read_back.column("id").to_pylist()) == list(range(300))

    async def filtered(name: str, predicate: Any) -> list[int]:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            table = await conn.get_table(TablePath("fluss", name))
            scanner = table.new_scan().filter(predicate).create_log_scanner()
            scanner.subscribe(0, EARLIEST_OFFSET)
            async with scanner:
                return [
                    i
                    for b in [b async for b in scanner.iter_batches(to_end=True)]
                    for i in b.batch["id"].to_pylist()
                ]

    predicate = (col("tag") == 2) | (col("tag") >= 5)
    expected = list(range(200, 300)) + list(range(500, 600))
    assert asyncio.run(filtered(without, predicate)) == expected
    assert skipped_batches(cluster, without) == 0  # V0 batches: decoded and evaluated, never skipped
    assert asyncio.run(filtered(with_stats, predicate)) == expected
    assert skipped_batches(cluster, with_stats) == 4  # tags 0, 1, 3, 4: no row matches
    # only V1 batches can be skipped on statistics: pyfluss wrote them, and Strom's client too
    # filters prune whole batches: the one holding ids 250.. comes back whole
    assert asyncio.run(filtered(own, col("id") >= 250)) == list(range(200, 300))
    assert skipped_batches(cluster, own) == 2
