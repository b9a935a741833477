"""Fluss filter predicates decoded from protobuf and evaluated on Arrow batches."""

from __future__ import annotations

import datetime as dt
import decimal
import re

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
    predicate_to_pb,
)
from strom.common.types import BIGINT, DATE, STRING
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


def test_date_literals_use_flusss_bigint_field() -> None:
    """Fluss's PredicateMessageUtils writes a DATE literal's days into bigint_value."""
    day = pb.PbLiteralValue(literal_type=LiteralType.DATE, is_null=False, bigint_value=19724)  # 2024-01-02
    assert mask(leaf(LeafFunction.EQUAL, 13, day)) == [False, True, None, None]
    target = pb.PbPredicate()
    predicate_to_pb(Leaf(LeafFunction.EQUAL, 13, (dt.date(2024, 1, 2),)), {13: DATE()}, target)
    assert target.leaf.literals[0].HasField("bigint_value") and target.leaf.literals[0].bigint_value == 19724


def test_malformed_predicates_are_refused() -> None:
    bigint = pb.PbLiteralValue(literal_type=LiteralType.BIGINT, is_null=False, bigint_value=2)
    types = {10: BIGINT(), 11: STRING()}
    malformed = {
        "the predicate type is missing": pb.PbPredicate(),
        "a leaf predicate without its leaf": pb.PbPredicate(type=0),
        "unknown predicate type 5": pb.PbPredicate(type=5),
        "unknown leaf function 77": leaf(77, 10, bigint),  # type: ignore[arg-type]
        "EQUAL takes exactly one literal, got 0": leaf(LeafFunction.EQUAL, 10),
        "EQUAL takes exactly one literal, got 2": leaf(LeafFunction.EQUAL, 10, bigint, bigint),
        "IS_NULL takes no literal, got 1": leaf(LeafFunction.IS_NULL, 10, bigint),
        "unknown column id 99": leaf(LeafFunction.EQUAL, 99, bigint),
        "a VARCHAR literal for column id 10": leaf(
            LeafFunction.EQUAL,
            10,
            pb.PbLiteralValue(literal_type=LiteralType.VARCHAR, is_null=False, string_value="2"),
        ),
        "STARTS_WITH on column id 10": leaf(LeafFunction.STARTS_WITH, 10, bigint),
        "a non-null BIGINT literal without its bigint_value": leaf(
            LeafFunction.EQUAL, 10, pb.PbLiteralValue(literal_type=LiteralType.BIGINT, is_null=False)
        ),
        "a literal without its required field literal_type": leaf(
            LeafFunction.EQUAL, 10, pb.PbLiteralValue(is_null=False, bigint_value=2)
        ),
        "unknown literal type 40": leaf(
            LeafFunction.EQUAL, 10, pb.PbLiteralValue(literal_type=40, is_null=False, bigint_value=2)
        ),
        "a compound predicate needs at least one child": pb.PbPredicate(
            type=1, compound=pb.PbCompoundPredicate(function=CompoundFunction.OR)
        ),
        "unknown compound function 3": pb.PbPredicate(
            type=1,
            compound=pb.PbCompoundPredicate(function=3, children=[leaf(LeafFunction.IS_NULL, 10)]),
        ),
    }
    for message, bad in malformed.items():
        with pytest.raises(InvalidScanRequestError, match=re.escape(message)):
            predicate_from_pb(bad, types)
    # `id IN ()` is well formed and matches nothing, as the client's `col("id").is_in([])` means
    assert mask(leaf(LeafFunction.IN, 10)) == [False, False, False, False]
    # CHAR and STRING literals are interchangeable, as in Fluss
    char = pb.PbLiteralValue(literal_type=LiteralType.CHAR, is_null=False, string_value="apple")
    assert predicate_from_pb(leaf(LeafFunction.EQUAL, 11, char), types) == Leaf(
        LeafFunction.EQUAL, 11, ("apple",)
    )
