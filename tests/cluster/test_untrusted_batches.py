"""Forged batches with valid CRCs but lying fields (the faults found by a protocol-level attack) are
refused with CORRUPT_RECORD naming the field, the rest of the request is unaffected, and the table stays
readable by the official client with its contents unchanged."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import fluss
import pytest
from harness import Cluster, run_pyfluss
from raw_table import Table, batch

from strom.common.schema import Column, Schema
from strom.common.types import BIGINT, STRING
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.kv_batch import build_kv_batch
from strom.record.log_batch import V0_HEADER_SIZE, write_crc
from strom.server.tablet.kv.recovery import table_key_encoder

CORRUPT_RECORD, INVALID_TARGET_COLUMN = 14, 35


def forged(records: bytes, **fields: int) -> bytes:
    """`records` (one V0 batch) with header fields overwritten and the CRC recomputed."""
    layout = {"magic": (12, "<b"), "attributes": (27, "<b"), "last_offset_delta": (28, "<i"),
              "writer_id": (32, "<q"), "batch_sequence": (40, "<i"), "record_count": (44, "<i")}  # fmt: skip
    buf = bytearray(records)
    for name, value in fields.items():
        offset, fmt = layout[name]
        struct.pack_into(fmt, buf, offset, value)
    write_crc(buf, 0, len(buf))
    return bytes(buf)


def garbage_body(records: bytes) -> bytes:
    buf = bytearray(records)
    for i in range(V0_HEADER_SIZE + 8, len(buf), 7):
        buf[i] ^= 0x5A
    write_crc(buf, 0, len(buf))
    return bytes(buf)


def read_all(cluster: Cluster, name: str, expected: int) -> list[tuple[int, str]]:
    async def body(conn: Any) -> list[tuple[int, str]]:
        table = await conn.get_table(fluss.TablePath("fluss", name))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
        rows: list[tuple[int, str]] = []
        deadline = time.monotonic() + 20
        while len(rows) < expected and time.monotonic() < deadline:
            got = await scanner.poll_arrow(300)
            rows.extend(zip(got["id"].to_pylist(), got["name"].to_pylist(), strict=True))
        return rows

    return run_pyfluss(cluster.bootstrap, body)


BAD_LOG_BATCHES = {
    "magic 1 over a V0 layout": (lambda b: forged(b, magic=1), "statistics"),
    "garbage Arrow body": (garbage_body, "Arrow"),
    "record count 0": (lambda b: forged(b, record_count=0), "record count 0"),
    # an empty batch (a no-op write's changelog) is legal, but only without records
    "empty batch with records": (lambda b: forged(b, record_count=0, last_offset_delta=0), "empty batch"),
    "record count -1": (lambda b: forged(b, record_count=-1), "record count -1"),
    "record count 10^6": (lambda b: forged(b, record_count=10**6, last_offset_delta=10**6 - 1), "1000000"),
    "last offset delta 0 for 3 rows": (lambda b: forged(b, last_offset_delta=0), "last offset delta 0"),
    "last offset delta 2^31-1": (lambda b: forged(b, last_offset_delta=2**31 - 1), "last offset delta"),
    "unknown attribute bits": (lambda b: forged(b, attributes=0x41), "attributes"),
    "sequence without a writer": (lambda b: forged(b, batch_sequence=5), "writer id -1"),
    "writer without a sequence": (lambda b: forged(b, writer_id=77), "writer id 77"),
}


@pytest.mark.parametrize("case", sorted(BAD_LOG_BATCHES))
def test_lying_log_batches_are_refused(shared_cluster: Cluster, case: str) -> None:
    mutate, named = BAD_LOG_BATCHES[case]
    name = f"lying_{abs(hash(case)) % 10**8}_{time.monotonic_ns() % 10**6}"

    async def main() -> None:
        async with Table(shared_cluster, name) as table:
            assert (await table.produce(batch(0, 3))).error_code == 0
            result = await table.produce(mutate(batch(3, 3)))
            assert result.error_code == CORRUPT_RECORD, result
            assert named in result.error_message, result.error_message
            assert await table.offsets() == (0, 3)  # nothing landed
            assert (await table.produce(batch(3, 3))).base_offset == 3  # the log goes on

    asyncio.run(main())
    assert read_all(shared_cluster, name, 6) == [(i, f"n{i}") for i in range(6)]


PK_SCHEMA = Schema([Column("id", BIGINT()), Column("name", STRING())], primary_key=["id"])


# the same row layout without NOT NULL on the key: how a hostile client sets the key's null bit
NULLABLE_ROW = CompactedRowEncoder([BIGINT(), STRING()]).encode


class PkRows:
    def __init__(self, info_schema: Schema) -> None:
        from strom.common.table_descriptor import TableDescriptor, TableInfo
        from strom.common.table_path import TablePath

        info = TableInfo(TablePath("fluss", "x"), 0, 1, TableDescriptor(info_schema, bucket_count=2), 0, 0)
        self.encode_row = CompactedRowEncoder(info_schema.row_type).encode
        self.encode_key = table_key_encoder(info).encode

    def record(self, key_id: int | None, row: tuple[Any, ...] | None) -> tuple[bytes, bytes | None]:
        key = b"" if key_id is None else self.encode_key([key_id])
        return key, None if row is None else self.encode_row(row)


def test_lying_kv_batches_are_refused(shared_cluster: Cluster) -> None:
    rows = PkRows(PK_SCHEMA)
    name = f"kv_lies_{time.monotonic_ns() % 10**8}"

    async def main() -> None:
        async with Table(shared_cluster, name, schema=PK_SCHEMA, buckets=2) as table:
            from strom.common.bucketing import fluss_bucket

            def bucket_of(key_id: int) -> int:
                return fluss_bucket(rows.encode_key([key_id]), 2)

            home = {b: next(i for i in range(100) if bucket_of(i) == b) for b in (0, 1)}
            good = build_kv_batch([rows.record(home[0], (home[0], "ok"))], schema_id=1)
            assert (await table.put_kv(good, bucket=0)).error_code == 0

            cases = {
                "2 stray bytes after the batch": (good + b"\0\0", "stray bytes"),
                "a key that is not the row's key": (
                    build_kv_batch([rows.record(home[0], (home[0] + 1000, "x"))], schema_id=1),
                    "not the encoding",
                ),
                "a row of the other bucket": (
                    build_kv_batch([rows.record(home[1], (home[1], "x"))], schema_id=1),
                    "belongs to bucket 1",
                ),
                "an empty key": (
                    build_kv_batch([rows.record(None, (home[0], "x"))], schema_id=1),
                    "empty key",
                ),
                "a NULL primary key": (
                    build_kv_batch([(rows.encode_key([home[0]]), NULLABLE_ROW((None, "x")))], schema_id=1),
                    "null",
                ),
                "unknown attributes": (_with_attributes(good, 3), "attributes"),
            }
            for case, (records, named) in cases.items():
                result = await table.put_kv(records, bucket=0)
                assert result.error_code == CORRUPT_RECORD, (case, result)
                assert named in result.error_message, (case, result.error_message)
            result = await table.put_kv(good, bucket=0, target_columns=[0, 1, 1])
            assert result.error_code == INVALID_TARGET_COLUMN and "more than once" in result.error_message
            # nothing of the above reached the changelog: one +I row only
            assert await table.offsets() == (0, 1)

    asyncio.run(main())


def _with_attributes(kv_batch: bytes, attributes: int) -> bytes:
    from strom.record.crc import crc32c

    buf = bytearray(kv_batch)
    buf[11] = attributes  # length 4, magic 1, crc 4, schema id 2
    struct.pack_into("<I", buf, 5, crc32c(bytes(buf[9:])))
    return bytes(buf)
