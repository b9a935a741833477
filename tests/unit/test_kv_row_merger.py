"""Row mergers on stored values: field splitting over every type, partial updates, versions."""

from __future__ import annotations

import random

import pytest
from kv_table_maker import make_info
from test_record_compacted_row import ALL_TYPES, random_value

from strom.common.config import DeleteBehavior
from strom.common.errors import CorruptRecordError, InvalidTableError
from strom.common.schema import Column, Schema
from strom.common.types import BIGINT, INT, STRING, TIMESTAMP_LTZ
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder
from strom.server.tablet.kv.row_merger import (
    DefaultRowMerger,
    FirstRowMerger,
    PartialUpdateMerger,
    RowFields,
    VersionedRowMerger,
    create_row_merger,
    effective_delete_behavior,
)

PREFIX = b"\x01\x00"


def test_split_and_join_are_exact_over_every_type() -> None:
    rnd = random.Random(7)
    encoder = CompactedRowEncoder(ALL_TYPES)
    decoder = CompactedRowDecoder(ALL_TYPES)
    fields = RowFields(ALL_TYPES)
    for _ in range(200):
        row = [random_value(t, rnd) for t in ALL_TYPES]
        value = PREFIX + encoder.encode(row)
        parts = fields.split(value)
        assert len(parts) == len(ALL_TYPES)
        assert [p is None for p in parts] == [v is None for v in row]
        assert fields.join(PREFIX, parts) == value
        # a row mixed from two rows' fields decodes to the mixed values
        other = [random_value(t, rnd) for t in ALL_TYPES]
        other_parts = fields.split(PREFIX + encoder.encode(other))
        mixed = [a if i % 2 else b for i, (a, b) in enumerate(zip(parts, other_parts, strict=True))]
        expected = [a if i % 2 else b for i, (a, b) in enumerate(zip(row, other, strict=True))]
        assert decoder.decode(fields.join(PREFIX, mixed)[2:]) == tuple(expected)


def test_split_rejects_malformed_values() -> None:
    fields = RowFields([INT(), STRING()])
    value = PREFIX + CompactedRowEncoder([INT(), STRING()]).encode([300, "abc"])
    with pytest.raises(CorruptRecordError):
        fields.split(value[:-1])
    with pytest.raises(CorruptRecordError):
        fields.split(value + b"x")


def test_versions_compare_signed_and_nulls_lowest() -> None:
    schema = Schema([Column("k", INT()), Column("s", STRING()), Column("v", BIGINT())], primary_key=["k"])
    merger = VersionedRowMerger(schema, "v", DeleteBehavior.IGNORE)
    encode = CompactedRowEncoder(schema.row_type).encode

    def value(v: int | None) -> bytes:
        return PREFIX + encode([1, "x" * 200, v])

    assert merger.version(value(None)) == (-(2**63), 0)
    assert merger.version(value(-3)) == (-3, 0)
    assert merger.version(value(2**63 - 1)) == (2**63 - 1, 0)
    old = value(10)
    assert merger.merge(old, value(9)) is old
    new = value(10)
    assert merger.merge(old, new) is new

    ltz = Schema([Column("k", INT()), Column("v", TIMESTAMP_LTZ(6))], primary_key=["k"])
    assert VersionedRowMerger(ltz, "v", DeleteBehavior.IGNORE).version(
        PREFIX + CompactedRowEncoder(ltz.row_type).encode([1, None])
    ) == (-(2**63), 0)
    with pytest.raises(InvalidTableError, match="must be one type of"):
        VersionedRowMerger(schema, "s", DeleteBehavior.IGNORE)
    with pytest.raises(InvalidTableError, match="doesn't exist"):
        VersionedRowMerger(schema, "nope", DeleteBehavior.IGNORE)
    with pytest.raises(InvalidTableError, match="not supported"):
        VersionedRowMerger(schema, "v", DeleteBehavior.ALLOW)


def test_merger_choice_and_delete_behavior_defaults() -> None:
    schema = Schema([Column("k", INT()), Column("s", STRING())], primary_key=["k"])
    assert create_row_merger(make_info(schema)) == DefaultRowMerger(DeleteBehavior.ALLOW)
    first_row = make_info(schema, {"table.merge-engine": "first_row"})
    assert effective_delete_behavior(first_row) is DeleteBehavior.IGNORE
    assert create_row_merger(first_row) == FirstRowMerger(DeleteBehavior.IGNORE)
    disabled = make_info(schema, {"table.merge-engine": "first_row", "table.delete.behavior": "disable"})
    assert create_row_merger(disabled).delete_behavior is DeleteBehavior.DISABLE
    partial = create_row_merger(make_info(schema), [0])
    assert isinstance(partial, PartialUpdateMerger)
    assert create_row_merger(make_info(schema), [1, 0]) == DefaultRowMerger(DeleteBehavior.ALLOW)
