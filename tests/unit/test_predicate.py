"""Fluss filter predicates decoded from protobuf and evaluated on Arrow batches."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from strom.common.errors import InvalidScanRequestError
from strom.common.predicate import (
    BatchFilter,
    Compound,
    CompoundFunction,
    Leaf,
    LeafFunction,
    LiteralType,
    predicate_from_pb,
)
from strom.rpc.gen import fluss_api_pb2 as pb

BATCH = pa.record_batch(
    {
        "id": pa.array([1, 2, 3, None], pa.int64()),
        "name": pa.array(["apple", "banana", "cherry", None]),
        "price": pa.array(
            [decimal.Decimal("1.50"), decimal.Decimal("2.00"), None, None], pa.decimal128(10, 2)
        ),
        "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), None, None], pa.date32()),
    }
)
COLUMNS = {10: 0, 11: 1, 12: 2, 13: 3}  # schema column id -> index


def leaf(function: LeafFunction, field_id: int, *literals: pb.PbLiteralValue) -> pb.PbPredicate:
    message = pb.PbPredicate(type=0)
    message.leaf.function = function
    message.leaf.field_id = field_id
    message.leaf.literals.extend(literals)
    return message


def mask(message: pb.PbPredicate) -> list[bool | None]:
    return BatchFilter(predicate_from_pb(message), COLUMNS).mask(BATCH).to_pylist()


def test_comparisons_and_nulls() -> None:
    three = pb.PbLiteralValue(literal_type=LiteralType.BIGINT, is_null=False, bigint_value=2)
    assert mask(leaf(LeafFunction.GREATER_OR_EQUAL, 10, three)) == [False, True, True, None]
    assert mask(leaf(LeafFunction.IS_NULL, 10)) == [False, False, False, True]
    null = pb.PbLiteralValue(literal_type=LiteralType.BIGINT, is_null=True)
    assert (
        BatchFilter(predicate_from_pb(leaf(LeafFunction.EQUAL, 10, null)), COLUMNS).may_match(BATCH) is False
    )


def test_strings_in_and_compounds() -> None:
    b = pb.PbLiteralValue(literal_type=LiteralType.VARCHAR, is_null=False, string_value="b")
    starts = leaf(LeafFunction.STARTS_WITH, 11, b)
    assert mask(starts) == [False, True, False, None]
    values = [
        pb.PbLiteralValue(literal_type=LiteralType.VARCHAR, is_null=False, string_value=v)
        for v in ("apple", "cherry")
    ]
    assert mask(leaf(LeafFunction.IN, 11, *values)) == [True, False, True, False]
    either = pb.PbPredicate(type=1)
    either.compound.function = CompoundFunction.OR
    either.compound.children.extend([starts, leaf(LeafFunction.IN, 11, *values)])
    assert mask(either) == [True, True, True, None]


def test_decimal_and_date_literals() -> None:
    unscaled = pb.PbLiteralValue(literal_type=LiteralType.DECIMAL, is_null=False, decimal_value=175)
    assert mask(leaf(LeafFunction.GREATER_THAN, 12, unscaled)) == [False, True, None, None]
    day = pb.PbLiteralValue(literal_type=LiteralType.DATE, is_null=False, int_value=19724)  # 2024-01-02
    assert mask(leaf(LeafFunction.EQUAL, 13, day)) == [False, True, None, None]


def test_unknown_columns_and_functions_are_refused() -> None:
    with pytest.raises(InvalidScanRequestError, match="unknown column ids"):
        BatchFilter(Leaf(LeafFunction.IS_NULL, 99), COLUMNS)
    bad = pb.PbPredicate(type=0)
    bad.leaf.function = 77
    bad.leaf.field_id = 10
    with pytest.raises(InvalidScanRequestError):
        predicate_from_pb(bad)
    assert isinstance(Compound(CompoundFunction.AND, ()), Compound)
