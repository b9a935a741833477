"""Lake key decoders invert the Iceberg and Paimon key encoders: what insert_if_not_exists needs to
turn a looked-up key back into the key columns of the row it inserts."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest

from strom.common.types import (
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
    SMALLINT,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_LTZ,
    TINYINT,
    DataType,
)
from strom.record.key_decoder import lake_key_decoder
from strom.record.key_encoder import CompactedKeyEncoder, IcebergKeyEncoder, PaimonKeyEncoder

UTC = dt.UTC
CASES: list[tuple[DataType, Any]] = [
    (INT(), -7),
    (BIGINT(), 2**40 + 3),
    (DATE(), dt.date(2024, 2, 29)),
    (TIME(), dt.time(13, 4, 5, 123000)),
    (FLOAT(), 1.5),
    (DOUBLE(), -2.25),
    (TIMESTAMP(6), dt.datetime(2024, 1, 2, 3, 4, 5, 678901)),
    (TIMESTAMP(3), dt.datetime(2024, 1, 2, 3, 4, 5, 678000)),
    (DECIMAL(10, 2), decimal.Decimal("-12345.67")),
    (DECIMAL(30, 4), decimal.Decimal("123456789012345678901.2345")),
    (STRING(), "short"),
    (STRING(), "a string longer than seven bytes, ünïcode"),
    (CHAR(3), "abc"),
    (BYTES(), b"\x00\x01\x02"),
    (BINARY(12), b"twelve bytes"),
]


@pytest.mark.parametrize(("key_type", "value"), CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_iceberg_keys_decode_to_their_values(key_type: DataType, value: Any) -> None:
    encoder = IcebergKeyEncoder([key_type])
    decode = lake_key_decoder(encoder)
    assert decode(encoder.encode([value])) == [value]


PAIMON_EXTRA: list[tuple[DataType, Any]] = [
    (BOOLEAN(), True),
    (TINYINT(), -3),
    (SMALLINT(), 300),
    (TIMESTAMP(9), dt.datetime(2024, 1, 2, 3, 4, 5, 678901)),
    (TIMESTAMP_LTZ(3), dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
]


def test_paimon_keys_decode_to_their_values() -> None:
    key_type = [t for t, _ in CASES + PAIMON_EXTRA]
    values = [v for _, v in CASES + PAIMON_EXTRA]
    encoder = PaimonKeyEncoder(key_type)
    decode = lake_key_decoder(encoder)
    assert decode(encoder.encode(values)) == values
    for t, v in CASES + PAIMON_EXTRA:  # one column keys too: the usual case
        single = PaimonKeyEncoder([t])
        assert lake_key_decoder(single)(single.encode([v])) == [v]


def test_compacted_keys_have_no_lake_decoder() -> None:
    with pytest.raises(ValueError, match="no lake key decoder"):
        lake_key_decoder(CompactedKeyEncoder([INT()]))


def test_key_rows_of_a_lake_keyed_table() -> None:
    """KeyRows turns Iceberg keys into key-only rows, and refuses bytes that are no such key."""
    from strom.common.errors import CorruptRecordError
    from strom.common.schema import Column, Schema
    from strom.common.table_descriptor import TableDescriptor, TableInfo
    from strom.common.table_path import TablePath
    from strom.record.compacted_row import CompactedRowDecoder
    from strom.record.kv_batch import KvRecordBatch
    from strom.server.tablet.kv.key_rows import KeyRows

    schema = Schema([Column("id", BIGINT()), Column("name", STRING())], primary_key=["id"])
    descriptor = TableDescriptor(schema, bucket_count=3, properties={"table.datalake.format": "iceberg"})
    rows = KeyRows(TableInfo(TablePath("fluss", "t"), 1, 1, descriptor, 0, 0))
    key = IcebergKeyEncoder([BIGINT()]).encode([42])
    records = KvRecordBatch.parse(rows.batch([key])).records
    decode = CompactedRowDecoder(schema.row_type).decode
    assert [(k, None if v is None else decode(v)) for k, v in records] == [(key, (42, None))]
    with pytest.raises(CorruptRecordError, match="is not a key of this table"):
        rows.batch([b"\x01\x02\x03"])
