"""Column-wise CompactedRow decoding (numpy) against the per-row decoder it replaces on the PK write
path: the same Arrow arrays for every supported type, nulls and edge values, and the same refusals."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from test_record_compacted_row import ALL_TYPES, OBSERVED_ROW, OBSERVED_TYPES, random_value

from strom.common.errors import CorruptRecordError
from strom.common.types import BIGINT, INT, STRING, TIME, TIMESTAMP, DataType
from strom.record.compacted_columns import ColumnarRowDecoder
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder

SCALAR_TYPES = [t for t in ALL_TYPES if ColumnarRowDecoder.supports([t])]


def both(types: list[DataType], rows: list[bytes], skip: int = 0) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    decoder = CompactedRowDecoder(types)
    assert decoder._columnar is not None
    columnar = decoder.to_arrow(rows, skip=skip)
    per_row = pa.RecordBatch.from_arrays(
        decoder._to_arrays([r[skip:] for r in rows]), names=columnar.schema.names
    )
    return columnar, per_row


def test_covers_the_scalar_types_and_leaves_the_rest_to_the_per_row_decoder() -> None:
    names = {t.root.value for t in SCALAR_TYPES}
    assert {
        "BOOLEAN",
        "INTEGER",
        "BIGINT",
        "DOUBLE",
        "STRING",
        "BYTES",
        "DATE",
        "TIMESTAMP_WITHOUT_TIME_ZONE",
    } <= names
    assert not names & {"DECIMAL", "ARRAY", "MAP", "ROW", "BINARY"}
    assert CompactedRowDecoder(ALL_TYPES)._columnar is None


@pytest.mark.parametrize("seed", range(3))
def test_same_arrays_as_the_per_row_decoder(seed: int) -> None:
    rnd = random.Random(seed)
    types = SCALAR_TYPES + [t.copy(False) for t in SCALAR_TYPES]
    encoder = CompactedRowEncoder(types)
    rows = [b"\x07\x00" + encoder.encode([random_value(t, rnd) for t in types]) for _ in range(500)]
    columnar, per_row = both(types, rows, skip=2)
    assert columnar.equals(per_row)
    assert columnar.num_rows == 500 and columnar.column(0).null_count > 0


def test_edge_values() -> None:
    types = [INT(), BIGINT(), STRING(), TIME(0), TIMESTAMP(0), TIMESTAMP(9)]
    encoder = CompactedRowEncoder(types)
    edge: list[list[Any]] = [
        [-(2**31), -(2**63), "", None, None, None],
        [2**31 - 1, 2**63 - 1, "𝄞" * 1000, None, None, None],
        [None, None, None, None, None, None],
        [127, 128, "x", None, None, None],
    ]
    rows = [encoder.encode(r) for r in edge]
    columnar, per_row = both(types, rows)
    assert columnar.equals(per_row)
    assert columnar.column(0).to_pylist() == [-(2**31), 2**31 - 1, None, 127]
    assert columnar.column(1).to_pylist() == [-(2**63), 2**63 - 1, None, 128]
    assert both(types, [])[0].num_rows == 0


def test_malformed_rows_are_refused_naming_the_row() -> None:
    decoder = CompactedRowDecoder(OBSERVED_TYPES)
    assert decoder._columnar is not None
    for bad in (OBSERVED_ROW[:-1], OBSERVED_ROW + b"\x00", OBSERVED_ROW[:3], b"", b"\x00\x01\x80"):
        with pytest.raises(CorruptRecordError, match="row 1"):
            decoder.to_arrow([OBSERVED_ROW, bad, OBSERVED_ROW])
    strings = CompactedRowDecoder([STRING()])
    for bad in (
        b"\x00\x02\xff\xfe",  # invalid UTF-8
        b"\x00\x85\x80\x80\x80\x08",  # negative length
        b"\x00\x7f" + b"a" * 10,  # length past the row
        b"\x00\x80\x80\x80\x80\x80\x01",  # a varint32 longer than 5 bytes
    ):
        with pytest.raises(CorruptRecordError):
            strings.to_arrow([b"\x00\x01a", bad])
    with pytest.raises(CorruptRecordError, match="row 0"):
        CompactedRowDecoder([INT(), INT()]).to_arrow([b"\x00\x80"])  # a varint running off the end
