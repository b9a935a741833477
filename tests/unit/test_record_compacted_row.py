"""CompactedRow, BinaryArray/BinaryMap and key encoders (reference §5)."""

from __future__ import annotations

import datetime as dt
import random
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from strom.common.bucketing import iceberg_bucket, murmur3_32
from strom.common.errors import CorruptRecordError
from strom.common.types import (
    ARRAY,
    BIGINT,
    BINARY,
    BOOLEAN,
    BYTES,
    CHAR,
    DATE,
    DECIMAL,
    DOUBLE,
    FLOAT,
    INT,
    MAP,
    ROW,
    SMALLINT,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_LTZ,
    TINYINT,
    DataField,
    DataType,
)
from strom.record.binary_array import ArrayCodec, MapCodec
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder
from strom.record.key_encoder import (
    CompactedKeyEncoder,
    IcebergKeyEncoder,
    PaimonKeyEncoder,
    bucket_key_encoder,
    primary_key_encoder,
)

OBSERVED_TYPES = [INT().copy(False), STRING(), DOUBLE()]
OBSERVED_ROW = bytes.fromhex("00 01 05 6e616d6531 000000000000f83f")


def roundtrip(types: list[DataType], values: list[Any]) -> bytes:
    data = CompactedRowEncoder(types).encode(values)
    assert CompactedRowDecoder(types).decode(data) == tuple(values)
    return data


# ------------------------------------------------------------------ byte-level vectors


def test_observed_pyfluss_row() -> None:
    assert CompactedRowEncoder(OBSERVED_TYPES).encode([1, "name1", 1.5]) == OBSERVED_ROW
    decoder = CompactedRowDecoder(OBSERVED_TYPES)
    assert decoder.decode(OBSERVED_ROW) == (1, "name1", 1.5)
    assert decoder.decode(memoryview(OBSERVED_ROW)) == (1, "name1", 1.5)


def test_varints_are_not_zigzag() -> None:
    assert roundtrip([INT()], [-1]) == bytes.fromhex("00 ffffffff0f")
    assert roundtrip([BIGINT()], [-1]) == bytes.fromhex("00 ffffffffffffffffff01")
    assert roundtrip([INT()], [300]) == bytes.fromhex("00 ac02")
    assert roundtrip([INT()], [2**31 - 1]) == bytes.fromhex("00 ffffffff07")
    assert roundtrip([INT()], [-(2**31)]) == bytes.fromhex("00 8080808008")
    assert roundtrip([BIGINT()], [2**63 - 1]) == bytes.fromhex("00 ffffffffffffffff7f")
    assert roundtrip([BIGINT()], [-(2**63)]) == bytes.fromhex("00 80808080808080808001")
    assert roundtrip([INT()], [16383]) == bytes.fromhex("00 ff7f")
    assert roundtrip([INT()], [16384]) == bytes.fromhex("00 808001")


def test_fixed_width_fields() -> None:
    assert roundtrip([BOOLEAN(), TINYINT(), SMALLINT()], [True, -2, -2]) == bytes.fromhex("00 01 fe feff")
    assert roundtrip([FLOAT()], [1.5]) == bytes.fromhex("00 0000c03f")


def test_null_bitset_lsb_first() -> None:
    types = [INT()] * 9
    data = roundtrip(types, [None, 1, 2, 3, 4, 5, 6, 7, None])
    assert data[:2] == b"\x01\x01"
    assert data[2:] == bytes([1, 2, 3, 4, 5, 6, 7])
    assert roundtrip([STRING(), INT()], [None, None]) == b"\x03"


def test_not_null_fields_have_no_null_check() -> None:
    # A NOT NULL field is decoded even if its bit is set, like Fluss's reader.
    assert CompactedRowDecoder([INT().copy(False)]).decode(b"\x01\x05") == (5,)
    with pytest.raises(ValueError, match="NOT NULL"):
        CompactedRowEncoder([INT().copy(False)]).encode([None])


def test_temporal_and_decimal_encodings() -> None:
    assert roundtrip([DATE()], [dt.date(1970, 1, 2)]) == b"\x00\x01"
    assert roundtrip([DATE()], [dt.date(1969, 12, 31)]) == bytes.fromhex("00 ffffffff0f")
    assert roundtrip([TIME(3)], [dt.time(0, 0, 1, 5000)]) == bytes.fromhex("00 ed07")  # 1005 ms
    ts = dt.datetime(2023, 10, 25, 12, 1, 13, 182000)  # 1698235273182 ms
    millis = bytes.fromhex("de9fd7b5b631")  # LEB128 of 1698235273182
    assert roundtrip([TIMESTAMP(3)], [ts]) == b"\x00" + millis
    ts6 = dt.datetime(2023, 10, 25, 12, 1, 13, 182123)
    assert roundtrip([TIMESTAMP(6)], [ts6]) == b"\x00" + millis + bytes.fromhex("f8c007")  # 123000 ns
    ltz = dt.datetime(2023, 10, 25, 12, 1, 13, 182000, tzinfo=dt.UTC)
    assert roundtrip([TIMESTAMP_LTZ(3)], [ltz]) == b"\x00" + millis
    # Precision 0 still stores millis: Python values keep them, Arrow (unit "s") truncates.
    stored = b"\x00" + bytes.fromhex("dc0b")  # 1500
    assert CompactedRowDecoder([TIMESTAMP(0)]).decode(stored) == (dt.datetime(1970, 1, 1, 0, 0, 1, 500000),)
    assert CompactedRowDecoder([TIME(0)]).decode(stored) == (dt.time(0, 0, 1, 500000),)
    assert CompactedRowDecoder([TIMESTAMP(0)]).to_arrow([stored]).column(0).cast(pa.int64()).to_pylist() == [
        1
    ]
    assert roundtrip([DECIMAL(10, 2)], [Decimal("123.45")]) == bytes.fromhex("00 b960")  # 12345
    assert roundtrip([DECIMAL(20, 0)], [Decimal("-128")]) == bytes.fromhex("00 01 80")
    assert roundtrip([DECIMAL(20, 0)], [Decimal("128")]) == bytes.fromhex("00 02 0080")
    # HALF_UP rounding to the scale, as Fluss does
    assert CompactedRowEncoder([DECIMAL(10, 2)]).encode([Decimal("12.345")]) == bytes.fromhex("00 d309")
    with pytest.raises(ValueError, match="does not fit"):
        CompactedRowEncoder([DECIMAL(3, 2)]).encode([Decimal("10.00")])


def test_nested_row_is_length_prefixed_compacted_row() -> None:
    inner = ROW([DataField("a", INT()), DataField("b", STRING())])
    data = roundtrip([INT(), inner], [7, {"a": 1, "b": None}])
    assert data == bytes.fromhex("00 07 02 02 01")
    assert CompactedRowEncoder([inner]).encode([(1, None)]) == CompactedRowEncoder([inner]).encode([{"a": 1}])


# ------------------------------------------------------------------ BinaryArray / BinaryMap


def test_int_array_layout() -> None:
    data = ArrayCodec(INT()).encode([1, 2, 3])
    assert data == struct.pack("<iiiii", 3, 0, 1, 2, 3) + bytes(4)
    assert ArrayCodec(INT()).decode(data) == [1, 2, 3]
    assert ArrayCodec(INT()).encode([]) == struct.pack("<i", 0) + bytes(4)
    with_null = ArrayCodec(INT()).encode([1, None, 3])
    assert with_null[4] == 0b010 and with_null[12:16] == bytes(4)
    assert ArrayCodec(INT()).decode(with_null) == [1, None, 3]


def test_string_array_inline_and_variable_parts() -> None:
    codec = ArrayCodec(STRING())
    data = codec.encode(["abc", "a longer string"])
    assert len(data) == 8 + 16 + 16
    assert data[8:11] == b"abc" and data[15] == 0x83  # inline, length in the top byte
    slot = struct.unpack_from("<Q", data, 16)[0]
    assert (slot >> 32, slot & 0xFFFFFFFF) == (24, 15)
    assert data[24:39] == b"a longer string" and data[39] == 0
    assert codec.decode(data) == ["abc", "a longer string"]


def test_non_compact_decimal_array_reserves_16_bytes() -> None:
    codec = ArrayCodec(DECIMAL(22, 5))
    data = codec.encode([Decimal("1.5"), Decimal("-2")])
    first, second = struct.unpack_from("<QQ", data, 8)
    assert (second >> 32) - (first >> 32) == 16
    assert codec.decode(data) == [Decimal("1.50000"), Decimal("-2.00000")]


def test_map_layout_and_round_trip() -> None:
    codec = MapCodec(INT(), STRING())
    data = codec.encode({1: "a", 2: None})
    keys = ArrayCodec(INT()).encode([1, 2])
    assert data == struct.pack("<i", len(keys)) + keys + ArrayCodec(STRING()).encode(["a", None])
    assert codec.decode(data) == [(1, "a"), (2, None)]
    with pytest.raises(ValueError, match="null"):
        codec.encode([(None, "x")])


NESTED_TYPES: list[DataType] = [
    ARRAY(INT()),
    ARRAY(STRING()),
    ARRAY(ARRAY(INT())),
    ARRAY(TIMESTAMP(6)),
    ARRAY(DECIMAL(25, 3)),
    ARRAY(ROW([DataField("x", INT()), DataField("y", STRING())])),
    MAP(STRING(), ARRAY(BIGINT())),
    ROW([DataField("d", DATE()), DataField("m", MAP(INT(), DOUBLE()))]),
]
NESTED_VALUES: list[Any] = [
    [1, None, -3],
    ["", "x" * 7, "y" * 8, None],
    [[1, 2], [], None, [None]],
    [dt.datetime(2001, 2, 3, 4, 5, 6, 789012), None],
    [Decimal("1234567890123456789012.345"), Decimal("-0.001")],
    [{"x": 1, "y": "short"}, None, {"x": None, "y": "a longer value"}],
    [("k", [1, None, 2**40]), ("", [])],
    {"d": dt.date(2024, 2, 29), "m": [(1, 0.5), (2, None)]},
]


def test_nested_round_trip_and_arrow() -> None:
    roundtrip(NESTED_TYPES, NESTED_VALUES)
    schema = pa.schema([pa.field(f"c{i}", t.to_arrow()) for i, t in enumerate(NESTED_TYPES)])
    rows = [CompactedRowEncoder(NESTED_TYPES).encode(NESTED_VALUES)]
    out = CompactedRowDecoder(NESTED_TYPES).to_arrow(rows, schema)
    expected = pa.RecordBatch.from_pylist(
        [dict(zip(schema.names, NESTED_VALUES, strict=True))], schema=schema
    )
    assert out.equals(expected)


# ------------------------------------------------------------------ property test over many types

ALL_TYPES: list[DataType] = [
    BOOLEAN(),
    TINYINT(),
    SMALLINT(),
    INT(),
    BIGINT().copy(False),
    FLOAT(),
    DOUBLE(),
    CHAR(5),
    STRING(),
    BYTES(),
    BINARY(3),
    DECIMAL(10, 2),
    DECIMAL(18, 0),
    DECIMAL(38, 10),
    DATE(),
    TIME(0),
    TIME(3),
    TIME(6),
    TIMESTAMP(0),
    TIMESTAMP(3),
    TIMESTAMP(6),
    TIMESTAMP(9),
    TIMESTAMP_LTZ(3),
    TIMESTAMP_LTZ(6),
    ARRAY(INT()),
    MAP(STRING(), INT()),
    ROW([DataField("a", INT()), DataField("b", STRING())]),
]


def random_value(t: DataType, rnd: random.Random) -> Any:
    if t.nullable and rnd.random() < 0.15:
        return None
    root = t.root.value
    seconds = rnd.randint(-2_000_000_000, 4_000_000_000)
    if root == "BOOLEAN":
        return rnd.random() < 0.5
    if root in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT"):
        bits = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64}[root]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return rnd.choice([rnd.randint(lo, hi), rnd.randint(max(lo, -200), min(hi, 20000))])
    if root == "FLOAT":
        return rnd.randint(-(10**6), 10**6) / 8
    if root == "DOUBLE":
        return rnd.uniform(-1e300, 1e300)
    if root in ("CHAR", "STRING"):
        return "".join(rnd.choice("aé€𝄞z ") for _ in range(rnd.choice([0, 3, 200])))
    if root == "BYTES":
        return rnd.randbytes(rnd.choice([0, 5, 300]))
    if root == "BINARY":
        return rnd.randbytes(t.length or 1)
    if root == "DECIMAL":
        return Decimal(rnd.randint(-(10 ** (t.precision or 1)) + 1, 10 ** (t.precision or 1) - 1)).scaleb(
            -(t.scale or 0)
        )
    if root == "DATE":
        return dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-700_000, 2_000_000))
    if root == "TIME_WITHOUT_TIME_ZONE":
        ms = rnd.randint(0, 86_399_999)
        return (
            dt.datetime(2000, 1, 1) + dt.timedelta(milliseconds=ms if t.precision else ms // 1000 * 1000)
        ).time()
    if root.startswith("TIMESTAMP"):
        p = t.precision or 0
        micros = 0 if p == 0 else rnd.randint(0, 999) * 1000 if p <= 3 else rnd.randint(0, 999_999)
        value = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=micros)
        return value.replace(tzinfo=dt.UTC) if root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE" else value
    if root == "ARRAY":
        return [random_value(t.element_type, rnd) for _ in range(rnd.randint(0, 40))]  # type: ignore[arg-type]
    if root == "MAP":
        return [(f"k{i}", random_value(t.value_type, rnd)) for i in range(rnd.randint(0, 5))]  # type: ignore[arg-type]
    return {f.name: random_value(f.type, rnd) for f in t.fields}


def test_round_trip_property_over_many_types() -> None:
    rnd = random.Random(20241122)
    encoder = CompactedRowEncoder(ALL_TYPES)
    decoder = CompactedRowDecoder(ALL_TYPES)
    rows = [[random_value(t, rnd) for t in ALL_TYPES] for _ in range(300)]
    encoded = [encoder.encode(r) for r in rows]
    for row, data in zip(rows, encoded, strict=True):
        assert decoder.decode(data) == tuple(row)
    columns = decoder.decode_many(encoded)
    assert columns == [list(c) for c in zip(*rows, strict=True)]
    # Arrow path: what pyarrow itself makes of the same Python values.
    schema = pa.schema([t.to_arrow_field(f"c{i}") for i, t in enumerate(ALL_TYPES)])
    batch = decoder.to_arrow([memoryview(e) for e in encoded], schema)
    expected = pa.RecordBatch.from_pylist(
        [dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema
    )
    assert batch.equals(expected)


def test_arrow_path_keeps_nanoseconds() -> None:
    import pandas as pd

    value = pd.Timestamp("2020-01-01 00:00:00.123456789")
    types = [TIMESTAMP(9), TIMESTAMP_LTZ(9)]
    data = CompactedRowEncoder(types).encode([value, value.tz_localize("UTC")])
    batch = CompactedRowDecoder(types).to_arrow([data])
    assert batch.column(0).cast(pa.int64()).to_pylist() == [value.value]
    assert batch.column(1).type == pa.timestamp("ns", tz="UTC")
    assert batch.column(1).cast(pa.int64()).to_pylist() == [value.value]


def test_malformed_rows_raise_corrupt_record() -> None:
    decoder = CompactedRowDecoder(OBSERVED_TYPES)
    for bad in (OBSERVED_ROW[:-1], OBSERVED_ROW + b"\x00", OBSERVED_ROW[:3], b"", b"\x00\x01\x80"):
        with pytest.raises(CorruptRecordError):
            decoder.decode(bad)
    with pytest.raises(CorruptRecordError, match="row 1"):
        decoder.decode_many([OBSERVED_ROW, OBSERVED_ROW[:-2]])
    with pytest.raises(CorruptRecordError):
        CompactedRowDecoder([STRING()]).decode(b"\x00\x02\xff\xfe")  # invalid UTF-8


def test_encoder_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        CompactedRowEncoder([INT()]).encode([2**31])
    with pytest.raises(ValueError):
        CompactedRowEncoder([TINYINT()]).encode([200])
    with pytest.raises(ValueError):
        CompactedRowEncoder([STRING()]).encode([b"bytes"])
    with pytest.raises(ValueError, match="expected 2 values"):
        CompactedRowEncoder([INT(), INT()]).encode([1])


# ------------------------------------------------------------------ key encoders


def test_compacted_key_encoder() -> None:
    encoder = CompactedKeyEncoder([INT(), BIGINT(), INT()])
    assert encoder.encode([1, 3, 2]) == bytes([1, 3, 2])
    assert CompactedKeyEncoder([INT(), STRING()]).encode([1, "ab"]) == b"\x01\x02ab"
    with pytest.raises(ValueError, match="null"):
        encoder.encode([1, None, 2])
    with pytest.raises(ValueError, match="key column"):
        CompactedKeyEncoder([MAP(STRING(), INT())])
    # The observed PutKv key for INT k=1
    assert primary_key_encoder(OBSERVED_TYPES, [0], None, 2, True).encode_key([1, "name1", 1.5]) == b"\x01"


def iceberg_hash(t: DataType, value: Any) -> int:
    h = murmur3_32(IcebergKeyEncoder([t]).encode([value]))
    return h - (1 << 32) if h >= 1 << 31 else h


def test_iceberg_key_encoder_matches_iceberg_spec_hashes() -> None:
    # Iceberg spec, Appendix B
    assert iceberg_hash(INT(), 34) == 2017239379
    assert iceberg_hash(BIGINT(), 34) == 2017239379
    assert iceberg_hash(DECIMAL(4, 2), Decimal("14.20")) == -500754589
    assert iceberg_hash(DATE(), dt.date(2017, 11, 16)) == -653330422
    assert iceberg_hash(TIME(), dt.time(22, 31, 8)) == -662762989
    assert iceberg_hash(TIMESTAMP(6), dt.datetime(2017, 11, 16, 22, 31, 8)) == -2047944441
    assert iceberg_hash(TIMESTAMP(6), dt.datetime(2017, 11, 16, 22, 31, 8, 1)) == -1207196810
    assert iceberg_hash(STRING(), "iceberg") == 1210000089
    assert iceberg_hash(BINARY(4), b"\x00\x01\x02\x03") == -188683207
    assert iceberg_hash(BYTES(), b"\x00\x01\x02\x03") == -188683207
    assert IcebergKeyEncoder([INT()]).encode([42]) == struct.pack("<q", 42)
    assert iceberg_bucket(IcebergKeyEncoder([INT()]).encode([34]), 2**31 - 1) == 2017239379


def test_iceberg_key_encoder_rejections() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        IcebergKeyEncoder([INT(), INT()])
    for t in (BOOLEAN(), TINYINT(), SMALLINT(), TIMESTAMP_LTZ(3), ARRAY(INT())):
        with pytest.raises(ValueError):
            IcebergKeyEncoder([t])
    with pytest.raises(ValueError, match="null"):
        IcebergKeyEncoder([INT()]).encode([None])


def test_paimon_key_encoder_layout() -> None:
    data = PaimonKeyEncoder([INT()]).encode([42])
    assert data == bytes(8) + struct.pack("<i", 42) + bytes(4)
    data = PaimonKeyEncoder([INT(), STRING()]).encode([7, "hi"])
    assert len(data) == 24
    assert data[8:12] == struct.pack("<i", 7)
    assert data[16:18] == b"hi" and data[23] == 0x82
    long_value = "this_is_a_long_string"
    data = PaimonKeyEncoder([STRING()]).encode([long_value])
    assert len(data) == 16 + 24
    slot = struct.unpack_from("<q", data, 8)[0]
    assert (slot >> 32, slot & 0xFFFFFFFF) == (16, 21)
    assert data[16:37] == long_value.encode()
    data = PaimonKeyEncoder([INT(), INT()]).encode([None, 7])
    assert data[1] == 0x01 and data[8:16] == bytes(8) and data[16:20] == struct.pack("<i", 7)
    assert len(PaimonKeyEncoder([INT()] * 57).encode([1] * 57)) == 16 + 57 * 8  # 57 + 8 bits > 64
    with pytest.raises(ValueError):
        PaimonKeyEncoder([ARRAY(INT())])


def test_key_encoder_selection_rules() -> None:
    row_type = [INT(), STRING(), INT()]
    row = [5, "x", 6]
    compacted = b"\x05\x06"
    paimon = PaimonKeyEncoder([INT(), INT()]).encode([5, 6])
    assert primary_key_encoder(row_type, [0, 2], None, 2, False).encode_key(row) == compacted
    assert primary_key_encoder(row_type, [0, 2], "paimon", 1, False).encode_key(row) == paimon
    assert primary_key_encoder(row_type, [0, 2], "paimon", None, False).encode_key(row) == paimon
    assert primary_key_encoder(row_type, [0, 2], "paimon", 2, True).encode_key(row) == paimon
    assert primary_key_encoder(row_type, [0, 2], "paimon", 2, False).encode_key(row) == compacted
    assert primary_key_encoder(row_type, [0, 2], "lance", 2, True).encode_key(row) == compacted
    assert primary_key_encoder(row_type, [0], "iceberg", 2, True).encode_key(row) == struct.pack("<q", 5)
    assert bucket_key_encoder(row_type, [0, 2], "Paimon").encode_key(row) == paimon
    assert bucket_key_encoder(row_type, [2], None).encode_key(row) == b"\x06"
    with pytest.raises(ValueError):
        primary_key_encoder(row_type, [0], None, 3, True)
    # Delta (Strom's own format) encodes keys as Fluss does, like Lance
    assert bucket_key_encoder(row_type, [0, 2], "delta").encode_key(row) == compacted
    with pytest.raises(ValueError):
        bucket_key_encoder(row_type, [0], "hudi-ish")


def test_dict_decoder_matches_decode() -> None:
    rnd = random.Random(11)
    names = [f"c{i}" for i in range(len(ALL_TYPES))]
    decoder = CompactedRowDecoder(ALL_TYPES)
    to_dict = decoder.dict_decoder(names)
    encoder = CompactedRowEncoder(ALL_TYPES)
    for _ in range(50):
        data = encoder.encode([random_value(t, rnd) for t in ALL_TYPES])
        assert to_dict(data) == dict(zip(names, decoder.decode(data), strict=True))
    with pytest.raises(CorruptRecordError):
        CompactedRowDecoder(OBSERVED_TYPES).dict_decoder(["a", "b", "c"])(OBSERVED_ROW[:-1])
