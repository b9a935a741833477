"""Fluss 1.0's V1 batch statistics: byte layout (vectors written out from Fluss's published format),
strict parsing, and the server's decision to skip a batch on its statistics alone."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import pyarrow as pa
import pytest

from strom.common.errors import CorruptRecordError
from strom.common.predicate import BatchFilter, Compound, CompoundFunction, Leaf, LeafFunction
from strom.record.arrow_batch import build_arrow_log_batch, decode_arrow_batch
from strom.record.batch_statistics import (
    collect_statistics,
    parse_statistics,
    statistics_columns,
    statistics_may_match,
)
from strom.record.batch_validation import check_log_batch
from strom.record.log_batch import V1_HEADER_SIZE, crc_is_valid, read_header, records_offset, write_crc

INT_ROW_NULL_BITS = bytes(8)  # 8 header bits + 1 field bit round up to one 8-byte word


def test_int_column_vector_matches_the_published_layout() -> None:
    # version 1 | 1 column | index 0 | 1 null | min row (16 bytes): null bits, slot = 1 |
    # max row (16 bytes): null bits, slot = 3; all little-endian (LogRecordBatchStatisticsWriter)
    expected = bytes.fromhex(
        "01"
        "0100"
        "0000"
        "01000000"
        "10000000" + INT_ROW_NULL_BITS.hex() + "0100000000000000"
        "10000000" + INT_ROW_NULL_BITS.hex() + "0300000000000000"
    )
    records = pa.record_batch([pa.array([3, None, 1, 2], pa.int32())], names=["id"])
    assert collect_statistics(records, [0]) == expected
    stats = parse_statistics(expected, 0, len(expected), 4, records.schema)
    assert stats is not None
    assert (stats.columns, stats.null_counts, stats.mins, stats.maxs) == ((0,), (1,), (1,), (3,))


def test_strings_inline_and_in_the_variable_part_and_all_null_bounds() -> None:
    schema = pa.schema([("a", pa.int64()), ("s", pa.string()), ("n", pa.int32())])
    records = pa.record_batch(
        [
            pa.array([5, 6], pa.int64()),
            pa.array(["bb", "a string of 20 bytes"]),
            pa.array([None, None], pa.int32()),
        ],
        schema=schema,
    )
    block = collect_statistics(records, [1, 2])
    # prefix: version, count 2, indexes 1 and 2, null counts 0 and 2
    assert block[:15] == bytes.fromhex("010200010002000000000002000000")
    (min_size,) = struct.unpack_from("<i", block, 15)
    min_row = block[19 : 19 + min_size]
    # 2 fields: one null-bit word, two slots, then the 20-byte string padded to 24
    assert min_size == 8 + 16 + 24
    assert min_row[0] == 0 and min_row[1] == 0b10  # field 1 (bit 9) null: column n has no bound
    slot = struct.unpack_from("<Q", min_row, 8)[0]
    assert (slot >> 32, slot & 0xFFFFFFFF) == (24, 20)
    assert min_row[24:44] == b"a string of 20 bytes"
    max_row = block[19 + min_size + 4 :]
    assert max_row[8:10] == b"bb" and max_row[15] == 0x82  # inline: bytes, then 0x80 | length
    stats = parse_statistics(block, 0, len(block), 2, schema)
    assert stats is not None
    assert stats.mins == ("a string of 20 bytes", None) and stats.maxs == ("bb", None)


def test_decimal_timestamp_time_date_round_trip() -> None:
    schema = pa.schema(
        [
            ("d", pa.decimal128(10, 2)),
            ("big", pa.decimal128(30, 3)),
            ("ms", pa.timestamp("ms")),
            ("us", pa.timestamp("us", tz="UTC")),
            ("t", pa.time64("us")),
            ("day", pa.date32()),
            ("ok", pa.bool_()),
            ("f", pa.float32()),
        ]
    )
    records = pa.record_batch(
        [
            pa.array([decimal.Decimal("1.25"), decimal.Decimal("-7.00")], pa.decimal128(10, 2)),
            pa.array(
                [decimal.Decimal("12345678901234567890.123"), decimal.Decimal("-1.5")], pa.decimal128(30, 3)
            ),
            pa.array(
                [dt.datetime(2024, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999000)], pa.timestamp("ms")
            ),
            pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0, 1), dt.datetime(2023, 1, 1)], pa.timestamp("us", tz="UTC")
            ),
            pa.array([dt.time(0, 0, 1, 2500), dt.time(23, 0)], pa.time64("us")),
            pa.array([dt.date(2000, 1, 1), dt.date(1970, 1, 2)]),
            pa.array([True, False]),
            pa.array([0.5, -2.0], pa.float32()),
        ],
        schema=schema,
    )
    columns = statistics_columns("*", schema)
    assert columns == tuple(range(8))
    block = collect_statistics(records, columns)
    stats = parse_statistics(block, 0, len(block), 2, schema)
    assert stats is not None
    assert stats.mins == (-700, -1500, -1_000_000, 1_672_531_200_000_000_000, 1_002, 1, False, -2.0)
    assert stats.maxs == (
        125,
        12345678901234567890123,
        1_704_067_200_000_000_000,
        1_704_067_200_000_001_000,
        82_800_000,
        10_957,
        True,
        0.5,
    )


def test_v1_batch_is_built_validated_and_decoded() -> None:
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    records = pa.record_batch([pa.array([1, 2, 3], pa.int32()), pa.array(["x", None, "z"])], schema=schema)
    batch = build_arrow_log_batch(records, schema_id=1, statistics_columns=(0, 1))
    header = read_header(batch)
    assert header.magic == 1 and crc_is_valid(batch, 0, header)
    (stats_len,) = struct.unpack_from("<i", batch, 48)
    assert records_offset(batch, 0, header) == V1_HEADER_SIZE + stats_len
    check_log_batch(batch, 0, header, schema)
    assert decode_arrow_batch(batch, 0, header, schema)[0].equals(records)
    # an empty statistics block (StatisticsLength 0) is a valid V1 batch too
    plain = build_arrow_log_batch(records, schema_id=1, statistics_columns=())
    check_log_batch(plain, 0, read_header(plain), schema)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.__setitem__(0, 2), "version"),
        (lambda b: struct.pack_into("<h", b, 1, 0), "0 columns"),
        (lambda b: struct.pack_into("<h", b, 3, 5), "ascending"),
        (lambda b: struct.pack_into("<i", b, 5, 9), "null counts"),
        (lambda b: struct.pack_into("<i", b, 9, 400), "does not fit"),
        (lambda b: b.extend(b"\0"), "stray"),
        # a min row of 8 bytes cannot hold the null bits and one 8-byte slot
        (lambda b: b.__setitem__(slice(9, 29), struct.pack("<i", 8) + bytes(8)), "shorter"),
    ],
)
def test_malformed_statistics_are_refused(mutate: object, message: str) -> None:
    records = pa.record_batch([pa.array([1, 2], pa.int32())], names=["id"])
    block = bytearray(collect_statistics(records, [0]))
    mutate(block)  # type: ignore[operator]
    with pytest.raises(CorruptRecordError, match=message):
        parse_statistics(block, 0, len(block), 2, records.schema)


def test_statistics_prove_or_leave_open_a_match() -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64()), ("n", pa.int32())])
    records = pa.record_batch(
        [
            pa.array([10, 20, 30], pa.int64()),
            pa.array(["apple", "banana", None]),
            pa.array([1.0, float("nan"), 3.0]),
            pa.array([None, None, None], pa.int32()),
        ],
        schema=schema,
    )
    block = collect_statistics(records, [0, 1, 2, 3])
    stats = parse_statistics(block, 0, len(block), 3, schema)
    assert stats is not None
    fields = {100 + i: i for i in range(4)}  # column ids differ from positions

    def may(predicate: object) -> bool:
        result = statistics_may_match(predicate, stats, fields, schema, 3)  # type: ignore[arg-type]
        # whatever the statistics say, never skip a batch the row-level evaluation keeps
        if not result:
            assert not BatchFilter(predicate, fields).may_match(records)  # type: ignore[arg-type]
        return result

    leaf = Leaf
    assert not may(leaf(LeafFunction.EQUAL, 100, (5,)))
    assert may(leaf(LeafFunction.EQUAL, 100, (15,)))  # inside the range: unsure, kept
    assert not may(leaf(LeafFunction.GREATER_THAN, 100, (30,)))
    assert may(leaf(LeafFunction.GREATER_OR_EQUAL, 100, (30,)))
    assert not may(leaf(LeafFunction.LESS_THAN, 100, (10,)))
    assert not may(leaf(LeafFunction.IN, 100, (1, 2, 99)))
    assert may(leaf(LeafFunction.NOT_EQUAL, 100, (10,)))
    assert not may(leaf(LeafFunction.IS_NULL, 100))
    assert may(leaf(LeafFunction.IS_NULL, 101))
    assert not may(leaf(LeafFunction.IS_NOT_NULL, 103))
    assert not may(leaf(LeafFunction.EQUAL, 103, (1,)))  # an all-null column matches no comparison
    assert not may(leaf(LeafFunction.STARTS_WITH, 101, ("c",)))
    assert may(leaf(LeafFunction.STARTS_WITH, 101, ("b",)))
    assert may(leaf(LeafFunction.CONTAINS, 101, ("zzz",)))  # no bound says anything: kept
    assert may(leaf(LeafFunction.NOT_EQUAL, 102, (1.0,)))  # NaN rows are unequal to 1.0
    and_ = Compound(
        CompoundFunction.AND, (leaf(LeafFunction.EQUAL, 100, (20,)), leaf(LeafFunction.EQUAL, 100, (99,)))
    )
    or_ = Compound(
        CompoundFunction.OR, (leaf(LeafFunction.EQUAL, 100, (5,)), leaf(LeafFunction.EQUAL, 101, ("apple",)))
    )
    assert not may(and_)
    assert may(or_)
    # a literal of another type than the column cannot be compared exactly: kept
    assert may(leaf(LeafFunction.EQUAL, 100, ("10",)))


def test_statistics_that_leave_out_stored_values_are_refused() -> None:
    # a filtered fetch would skip this batch for `id >= 5` although it holds id 9: never stored
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    records = pa.record_batch([pa.array([1, 9, None], pa.int32()), pa.array(["a", "b", "c"])], schema=schema)
    for stats_of, message in (
        (
            pa.record_batch([pa.array([1, 2, None], pa.int32()), pa.array(["a", "b", "c"])], schema=schema),
            "maximum",
        ),
        (
            pa.record_batch([pa.array([5, 9, None], pa.int32()), pa.array(["a", "b", "c"])], schema=schema),
            "minimum",
        ),
        (
            pa.record_batch([pa.array([1, 9, 3], pa.int32()), pa.array(["a", "b", "c"])], schema=schema),
            "nulls",
        ),
    ):
        block = collect_statistics(stats_of, [0, 1])
        batch = build_arrow_log_batch(records, schema_id=1, statistics_columns=())
        # the same records under another batch's statistics block, with a fresh CRC
        stats_len = struct.unpack_from("<i", batch, 48)[0]
        assert stats_len == 0
        forged = bytearray(batch[:48] + struct.pack("<i", len(block)) + block + batch[52:])
        struct.pack_into("<i", forged, 8, len(forged) - 12)
        write_crc(forged, 0, len(forged))
        with pytest.raises(CorruptRecordError, match=message):
            check_log_batch(forged, 0, read_header(forged), schema)
    # looser bounds are fine: they only make the server read a batch it could have skipped
    loose = pa.record_batch([pa.array([0, 20, None], pa.int32()), pa.array(["", "z", "c"])], schema=schema)
    block = collect_statistics(loose, [0, 1])
    batch = build_arrow_log_batch(records, schema_id=1, statistics_columns=())
    forged = bytearray(batch[:48] + struct.pack("<i", len(block)) + block + batch[52:])
    struct.pack_into("<i", forged, 8, len(forged) - 12)
    write_crc(forged, 0, len(forged))
    check_log_batch(forged, 0, read_header(forged), schema)
