"""KvRecordBatch (PutKv) and ValueRecordBatch (LimitScan) framing (reference §4.2, §4.5)."""

from __future__ import annotations

import struct

import google_crc32c
import pytest

from strom.common.errors import CorruptRecordError
from strom.record.kv_batch import KV_HEADER_SIZE, KvRecordBatch, build_kv_batch
from strom.record.value_batch import build_value_batch, parse_value_batch, split_value

UPSERT_KEY = b"\x01"
UPSERT_VALUE = bytes.fromhex("00 01 05 6e616d6531 000000000000f83f")  # (1, 'name1', 1.5), observed
DELETE_KEY = b"\x03"


def hand_built_kv_batch(records: list[tuple[bytes, bytes | None]], schema_id: int = 1) -> bytes:
    """Laid out field by field from the reference, independently of build_kv_batch."""
    body = b""
    for key, value in records:
        rec = bytes([len(key)]) + key + (value or b"")  # key lengths < 128: one varint byte
        body += struct.pack("<i", len(rec)) + rec
    tail = struct.pack("<hbqii", schema_id, 0, 42, 7, len(records)) + body
    crc = google_crc32c.value(tail)
    return struct.pack("<ibI", 5 + len(tail), 0, crc) + tail


def test_build_matches_the_reference_layout() -> None:
    records = [(UPSERT_KEY, UPSERT_VALUE), (DELETE_KEY, None)]
    built = build_kv_batch(records, schema_id=1, writer_id=42, batch_sequence=7)
    assert built == hand_built_kv_batch(records)
    # upsert record: int32 length 18, key length 1, key 01, then the row; delete: length 2, 01 03
    assert built[KV_HEADER_SIZE:] == (
        struct.pack("<i", 18) + b"\x01\x01" + UPSERT_VALUE + struct.pack("<i", 2) + b"\x01\x03"
    )


def test_parse_header_records_and_crc() -> None:
    data = hand_built_kv_batch([(UPSERT_KEY, UPSERT_VALUE), (DELETE_KEY, None)], schema_id=5)
    batch = KvRecordBatch.parse(data)
    assert (batch.magic, batch.schema_id, batch.attributes) == (0, 5, 0)
    assert (batch.writer_id, batch.batch_sequence, batch.record_count) == (42, 7, 2)
    assert batch.size == len(data) and batch.length == len(data) - 4
    assert batch.records == [(UPSERT_KEY, UPSERT_VALUE), (DELETE_KEY, None)]
    assert batch.crc == google_crc32c.value(data[9:])
    assert batch.crc_is_valid()
    damaged = bytearray(data)
    damaged[-1] ^= 1
    assert not KvRecordBatch.parse(bytes(damaged)).crc_is_valid()
    assert KvRecordBatch.parse(memoryview(data)).records == batch.records


def test_long_keys_use_multi_byte_varints() -> None:
    key = bytes(range(200))
    value = b"\x00" * 1000
    data = build_kv_batch([(key, value), (b"k", b"v")], schema_id=2)
    assert data[KV_HEADER_SIZE + 4 : KV_HEADER_SIZE + 6] == b"\xc8\x01"  # 200
    batch = KvRecordBatch.parse(data)
    assert batch.records == [(key, value), (b"k", b"v")]
    assert batch.crc_is_valid()
    assert KvRecordBatch.parse(build_kv_batch([], schema_id=1)).records == []


def test_malformed_batches_name_the_problem() -> None:
    data = build_kv_batch([(UPSERT_KEY, UPSERT_VALUE), (DELETE_KEY, None)], schema_id=1)
    for cut in (0, 10, 27, 30, len(data) - 1):
        with pytest.raises(CorruptRecordError) as e:
            KvRecordBatch.parse(data[:cut])
        assert e.value.code == 14
    bad_magic = bytearray(data)
    bad_magic[4] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        KvRecordBatch.parse(bytes(bad_magic))
    too_many = bytearray(data)
    struct.pack_into("<i", too_many, 24, 3)
    with pytest.raises(CorruptRecordError):
        KvRecordBatch.parse(bytes(too_many))
    too_few = bytearray(data)
    struct.pack_into("<i", too_few, 24, 1)
    with pytest.raises(CorruptRecordError, match="after"):
        KvRecordBatch.parse(bytes(too_few))
    long_key = bytearray(data)
    long_key[KV_HEADER_SIZE + 4] = 50  # key length beyond its record
    with pytest.raises(CorruptRecordError, match="key"):
        KvRecordBatch.parse(bytes(long_key))


def test_value_batch_round_trip() -> None:
    values = [struct.pack("<h", 1) + UPSERT_VALUE, struct.pack("<h", 2) + b"\x00\x07"]
    data = build_value_batch(values)
    expected_body = b"".join(struct.pack("<i", len(v)) + v for v in values)
    assert data == struct.pack("<ibi", 5 + len(expected_body), 0, 2) + expected_body
    assert parse_value_batch(data) == values
    assert split_value(values[0]) == (1, UPSERT_VALUE)
    assert parse_value_batch(build_value_batch([])) == []
    for cut in (3, 12, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            parse_value_batch(data[:cut])
