"""Fluss 1.0 batch statistics end to end: the official client (pyfluss 1.0) writes V1 batches with
statistics when the table sets `table.statistics.columns`; the server validates and stores them; a
filtered fetch skips the batches whose statistics prove no row matches (counted in
`batchesSkippedByStatistics`) and returns exactly the rows a table without statistics returns.
Strom's own client writes the same layout, which pyfluss reads back; for a batch holding every type
statistics exist for, pyfluss's statistics block and Strom's are the same bytes."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import re
import urllib.request
import uuid
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET, col
from strom.common import errors
from strom.common.table_bucket import TableBucket
from strom.record.arrow_batch import build_arrow_log_batch
from strom.record.batch_statistics import collect_statistics, parse_statistics
from strom.record.log_batch import (
    V1_HEADER_SIZE,
    V2_HEADER_SIZE,
    crc_is_valid,
    read_header,
    records_offset,
    write_crc,
)
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tag", pa.int32())])
# every type statistics exist for; floats left out of the comparison (pyfluss orders NaN last, as Java
# does, where Arrow's min/max skip it)
TYPED = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i64", pa.int64()),
        ("d1", pa.decimal128(10, 2)),
        ("d2", pa.decimal128(30, 3)),
        ("day", pa.date32()),
        ("t", pa.time32("ms")),
        ("ts", pa.timestamp("us")),
        ("ltz", pa.timestamp("us", tz="UTC")),
        ("ts3", pa.timestamp("ms")),
        ("s", pa.string()),
    ]
)


def typed_records() -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array([True, False, None]),
            pa.array([1, -5, None], pa.int8()),
            pa.array([300, -2, None], pa.int16()),
            pa.array([2**40, -7, None], pa.int64()),
            pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None], pa.decimal128(10, 2)),
            pa.array(
                [decimal.Decimal("123456789012345678901.123"), decimal.Decimal("-1"), None],
                pa.decimal128(30, 3),
            ),
            pa.array([dt.date(2020, 1, 1), dt.date(1960, 5, 5), None]),
            pa.array([dt.time(1, 2, 3, 4000), dt.time(0, 0), None], pa.time32("ms")),
            pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 123456), dt.datetime(1969, 1, 1, 0, 0, 0, 1), None]),
            pa.array(
                [dt.datetime(2020, 1, 1), dt.datetime(2021, 1, 1, 0, 0, 0, 999999), None],
                pa.timestamp("us", "UTC"),
            ),
            pa.array(
                [dt.datetime(2020, 1, 1), dt.datetime(1960, 1, 1, 0, 0, 0, 5000), None], pa.timestamp("ms")
            ),
            pa.array(["a string longer than seven bytes", "", None]),
        ],
        schema=TYPED,
    )


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
        assert server.log_path is not None
        log_text = server.log_path.read_text()
        port = re.findall(r"Prometheus metrics on http://[^:]+:(\d+)/metrics", log_text)[-1]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        found = re.search(pattern, text, re.M)
        total += float(found.group(1)) if found else 0.0
    return total


def test_filtered_fetch_skips_batches_on_statistics(cluster_factory: Any) -> None:
    # one server keeps it lean: followers run the same batch check (Replica.batch_check) as leaders
    cluster: Cluster = cluster_factory(tablet_servers=1, config=CONFIG)
    suffix = uuid.uuid4().hex[:8]
    with_stats, without, own = f"stats_{suffix}", f"plain_{suffix}", f"own_{suffix}"
    typed = f"typed_{suffix}"

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
            typed_path = fluss.TablePath("fluss", typed)
            properties = {"table.statistics.columns": "*"}
            await admin.create_table(
                typed_path, fluss.TableDescriptor(fluss.Schema(TYPED), properties=properties)
            )
            writer = (await connection.get_table(typed_path)).new_append().create_writer()
            writer.write_arrow_batch(typed_records())
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

    async def stored_batch(name: str) -> bytes:
        """The first stored batch of a table, as FetchLog returns it."""
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            table = await conn.get_table(TablePath("fluss", name))
            leader = conn.metadata.leader_for(TableBucket(table.table_id, None, 0))
            assert leader is not None
            request = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1 << 20)
            entry = request.tables_req.add(table_id=table.table_id, projection_pushdown_enabled=False)
            entry.buckets_req.add(bucket_id=0, fetch_offset=0, max_fetch_bytes=1 << 20)
            server = await conn.pool.get(leader.host, leader.port)
            return bytes(
                (await server.request(ApiKey.FETCH_LOG, request)).tables_resp[0].buckets_resp[0].records
            )

    # pyfluss's statistics of every type parse to what Strom's own collector computes of the records
    stored = asyncio.run(stored_batch(typed))
    header = read_header(stored)
    assert header.magic == 1
    theirs = parse_statistics(stored, V1_HEADER_SIZE, records_offset(stored, 0, header), 3, TYPED)
    ours_block = collect_statistics(typed_records(), range(len(TYPED)))
    assert theirs == parse_statistics(ours_block, 0, len(ours_block), 3, TYPED)
    assert stored[V1_HEADER_SIZE : records_offset(stored, 0, header)] == ours_block  # byte for byte

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

    # Fluss 1.0's magic 2 (V1 + leader epoch): stored with the leader's epoch stamped outside the CRC,
    # read back, skipped on its statistics; a V2 batch whose statistics lie is refused
    v2 = f"v2_{suffix}"

    async def produce_v2() -> list[int]:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            path = TablePath("fluss", v2)
            descriptor = TableDescriptor(
                Schema.from_arrow_schema(SCHEMA), bucket_count=1, properties={"table.statistics.columns": "*"}
            )
            await conn.get_admin().create_table(path, descriptor)
            table = await conn.get_table(path)
            leader = conn.metadata.leader_for(TableBucket(table.table_id, None, 0))
            assert leader is not None
            server = await conn.pool.get(leader.host, leader.port)
            codes = []
            good = build_arrow_log_batch(rows(0, 5), schema_id=1, statistics_columns=[0], magic=2)
            fake = collect_statistics(rows(1000, 5), [0])  # same size, bounds that leave the rows out
            lying = bytearray(good[:V2_HEADER_SIZE] + fake + good[V2_HEADER_SIZE + len(fake) :])
            write_crc(lying, 0, len(lying))
            for batch in (
                *(
                    build_arrow_log_batch(rows(s, 100), schema_id=1, statistics_columns=[0, 1, 2], magic=2)
                    for s in (0, 100, 200)
                ),
                bytes(lying),
            ):
                request = pb.ProduceLogRequest(acks=-1, table_id=table.table_id, timeout_ms=5000)
                request.buckets_req.add(bucket_id=0, records=batch)
                answer = (await server.request(ApiKey.PRODUCE_LOG, request)).buckets_resp[0]
                codes.append(answer.error_code if answer.HasField("error_code") else 0)
            return codes

    assert asyncio.run(produce_v2()) == [0, 0, 0, errors.CorruptRecordError.code]
    stored = asyncio.run(stored_batch(v2))
    header = read_header(stored)
    assert header.magic == 2 and header.leader_epoch >= 0 and crc_is_valid(stored, 0, header)
    assert asyncio.run(filtered(v2, col("tag") == 1)) == list(range(100, 200))
    assert skipped_batches(cluster, v2) == 2
