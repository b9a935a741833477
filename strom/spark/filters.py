"""Spark's pushed filters, turned into partition pruning and a Fluss scan predicate.

Spark hands `pushFilters` simple comparisons of one column with literals. Each one is sorted:

- on a **partition column** whose type we can compare exactly (strings, integers, booleans), it
  prunes partitions, and Spark need not check it again: every row of a partition carries the
  partition's value, so a partition either matches entirely or not at all;
- on **other columns of a log table** (of simple types), it becomes part of the Fluss predicate the
  scanner sends with each fetch, so the server skips batches that cannot match; Spark still checks
  the rows, because the server only prunes whole batches;
- anything else goes back to Spark untouched.

Primary-key tables never get a server predicate: skipping part of a changelog before the changes
are merged by key would resurrect rows that were updated away.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.common.predicate import Compound, CompoundFunction, Leaf, LeafFunction, Predicate
from strom.common.schema import Schema
from strom.common.types import DataTypeRoot


class Op(enum.Enum):
    EQ = "="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    IN = "in"
    IS_NULL = "is null"
    IS_NOT_NULL = "is not null"
    STARTS_WITH = "starts with"
    ENDS_WITH = "ends with"
    CONTAINS = "contains"


@dataclass(frozen=True)
class Condition:
    """One pushed filter in our own picklable form: ``[not] column op value``."""

    column: str
    op: Op
    value: Any = None
    negated: bool = False


_INTEGRAL = frozenset(
    {DataTypeRoot.TINYINT, DataTypeRoot.SMALLINT, DataTypeRoot.INTEGER, DataTypeRoot.BIGINT}
)
_STRINGS = frozenset({DataTypeRoot.STRING, DataTypeRoot.CHAR})
_FLOATING = frozenset({DataTypeRoot.FLOAT, DataTypeRoot.DOUBLE})


def condition_of(spark_filter: Any) -> Condition | None:
    """Our form of a pyspark.sql.datasource Filter, or None for shapes we do not understand."""
    from pyspark.sql import datasource as ds

    negated = False
    f = spark_filter
    if isinstance(f, ds.Not):
        negated, f = True, f.child
    attribute = getattr(f, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # nested fields are not pushed
    column = attribute[0]
    simple: dict[type, Op] = {
        ds.EqualTo: Op.EQ,
        ds.EqualNullSafe: Op.EQ,
        ds.GreaterThan: Op.GT,
        ds.GreaterThanOrEqual: Op.GE,
        ds.LessThan: Op.LT,
        ds.LessThanOrEqual: Op.LE,
        ds.StringStartsWith: Op.STARTS_WITH,
        ds.StringEndsWith: Op.ENDS_WITH,
        ds.StringContains: Op.CONTAINS,
    }
    if type(f) in simple:
        if f.value is None:
            return None
        if isinstance(f, ds.EqualNullSafe) and negated:
            return None  # "a <=> v" negated also keeps NULLs: not worth special-casing
        return Condition(column, simple[type(f)], f.value, negated)
    if isinstance(f, ds.In):
        return Condition(column, Op.IN, tuple(f.value), negated)
    if isinstance(f, ds.IsNull):
        return Condition(column, Op.IS_NULL, None, negated)
    if isinstance(f, ds.IsNotNull):
        return Condition(column, Op.IS_NOT_NULL, None, negated)
    return None


# ---------------------------------------------------------------------------------- partitions


def _typed_partition_value(text: str, root: DataTypeRoot) -> Any:
    if root in _STRINGS:
        return text
    if root in _INTEGRAL:
        return int(text)
    if root is DataTypeRoot.BOOLEAN:
        return text.lower() == "true"
    raise TypeError(root)


def _literal_fits(value: Any, root: DataTypeRoot) -> bool:
    if root in _STRINGS:
        return isinstance(value, str)
    if root in _INTEGRAL:
        return isinstance(value, int) and not isinstance(value, bool)
    if root is DataTypeRoot.BOOLEAN:
        return isinstance(value, bool)
    return False


def can_prune(condition: Condition, schema: Schema, partition_keys: Sequence[str]) -> bool:
    """Whether `condition` is on a partition column and can be decided exactly from its value."""
    if condition.column not in partition_keys:
        return False
    root = schema.get_column(condition.column).data_type.root
    if root not in _STRINGS and root not in _INTEGRAL and root is not DataTypeRoot.BOOLEAN:
        return False
    if condition.op in (Op.IS_NULL, Op.IS_NOT_NULL):
        return True
    if condition.op in (Op.STARTS_WITH, Op.ENDS_WITH, Op.CONTAINS):
        return root in _STRINGS and isinstance(condition.value, str)
    if condition.op is Op.IN:
        return all(v is None or _literal_fits(v, root) for v in condition.value)
    return _literal_fits(condition.value, root)


def _holds(condition: Condition, value: Any) -> bool:
    """SQL truth of the condition for a non-null column value (NULL literals make IN not true)."""
    op = condition.op
    if op is Op.IS_NULL:
        result = False
    elif op is Op.IS_NOT_NULL:
        result = True
    elif op is Op.IN:
        if value in condition.value:
            result = True
        elif None in condition.value:
            return False  # "v in (.., NULL)" is NULL when v is absent, and so is its negation
        else:
            result = False
    elif op is Op.EQ:
        result = value == condition.value
    elif op is Op.GT:
        result = value > condition.value
    elif op is Op.GE:
        result = value >= condition.value
    elif op is Op.LT:
        result = value < condition.value
    elif op is Op.LE:
        result = value <= condition.value
    elif op is Op.STARTS_WITH:
        result = value.startswith(condition.value)
    elif op is Op.ENDS_WITH:
        result = value.endswith(condition.value)
    else:
        result = condition.value in value
    return not result if condition.negated else result


def partition_matches(conditions: Iterable[Condition], schema: Schema, spec: Mapping[str, str]) -> bool:
    """Whether a partition with these key values can hold rows matching all `conditions`."""
    for condition in conditions:
        root = schema.get_column(condition.column).data_type.root
        try:
            value = _typed_partition_value(spec[condition.column], root)
        except (KeyError, TypeError, ValueError):
            continue  # undecidable here: keep the partition
        if not _holds(condition, value):
            return False
    return True


# ---------------------------------------------------------------------------------- server predicate

_LEAF_OF: dict[Op, LeafFunction] = {
    Op.EQ: LeafFunction.EQUAL,
    Op.GT: LeafFunction.GREATER_THAN,
    Op.GE: LeafFunction.GREATER_OR_EQUAL,
    Op.LT: LeafFunction.LESS_THAN,
    Op.LE: LeafFunction.LESS_OR_EQUAL,
    Op.IN: LeafFunction.IN,
    Op.IS_NULL: LeafFunction.IS_NULL,
    Op.IS_NOT_NULL: LeafFunction.IS_NOT_NULL,
    Op.STARTS_WITH: LeafFunction.STARTS_WITH,
    Op.ENDS_WITH: LeafFunction.ENDS_WITH,
    Op.CONTAINS: LeafFunction.CONTAINS,
}
_NEGATED: dict[LeafFunction, LeafFunction] = {
    LeafFunction.EQUAL: LeafFunction.NOT_EQUAL,
    LeafFunction.GREATER_THAN: LeafFunction.LESS_OR_EQUAL,
    LeafFunction.GREATER_OR_EQUAL: LeafFunction.LESS_THAN,
    LeafFunction.LESS_THAN: LeafFunction.GREATER_OR_EQUAL,
    LeafFunction.LESS_OR_EQUAL: LeafFunction.GREATER_THAN,
    LeafFunction.IN: LeafFunction.NOT_IN,
    LeafFunction.IS_NULL: LeafFunction.IS_NOT_NULL,
    LeafFunction.IS_NOT_NULL: LeafFunction.IS_NULL,
}


def _server_literal_ok(value: Any, root: DataTypeRoot) -> bool:
    if root in _FLOATING:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return _literal_fits(value, root)


def leaf_of(condition: Condition, schema: Schema) -> Leaf | None:
    """The Fluss predicate leaf for a condition on a simple column, or None."""
    column = schema.get_column(condition.column)
    root = column.data_type.root
    if root not in _STRINGS | _INTEGRAL | _FLOATING | {DataTypeRoot.BOOLEAN}:
        return None
    function = _LEAF_OF[condition.op]
    if condition.op in (Op.STARTS_WITH, Op.ENDS_WITH, Op.CONTAINS):
        if condition.negated or root not in _STRINGS:
            return None
        return Leaf(function, column.column_id, (condition.value,))
    if condition.negated:
        # NOT (a > 1) is a <= 1 only for non-null a, and so is NOT IN; both drop NULL rows like SQL.
        function = _NEGATED[function]
    if condition.op in (Op.IS_NULL, Op.IS_NOT_NULL):
        return Leaf(function, column.column_id)
    values = condition.value if condition.op is Op.IN else (condition.value,)
    if any(v is None for v in values) or not all(_server_literal_ok(v, root) for v in values):
        return None
    if root in _FLOATING:
        values = tuple(float(v) for v in values)
    return Leaf(function, column.column_id, tuple(values))


def and_all(leaves: Sequence[Predicate]) -> Predicate | None:
    if not leaves:
        return None
    if len(leaves) == 1:
        return leaves[0]
    return Compound(CompoundFunction.AND, tuple(leaves))


@dataclass(frozen=True)
class PushedFilters:
    """What `pushFilters` kept: partition conditions and the server predicate (for log tables)."""

    partition_conditions: tuple[Condition, ...] = ()
    predicate: Predicate | None = None


def push(
    spark_filters: Iterable[Any], schema: Schema, partition_keys: Sequence[str], server_side: bool
) -> tuple[PushedFilters, list[Any]]:
    """Sort Spark filters as the module describes; returns what we keep and what Spark must check."""
    partition: list[Condition] = []
    leaves: list[Predicate] = []
    back: list[Any] = []
    names = set(schema.column_names)
    for spark_filter in spark_filters:
        condition = condition_of(spark_filter)
        if condition is None or condition.column not in names:
            back.append(spark_filter)
            continue
        if can_prune(condition, schema, partition_keys):
            partition.append(condition)
            continue
        back.append(spark_filter)
        if server_side and condition.column not in partition_keys:
            leaf = leaf_of(condition, schema)
            if leaf is not None:
                leaves.append(leaf)
    return PushedFilters(tuple(partition), and_all(leaves)), back
