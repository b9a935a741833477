"""A small builder for scan filters: ``col("score") >= 3``, combined with ``&`` and ``|``.

    scan = table.new_scan().filter((col("region") == "eu") & col("score").is_not_null())

Filters name columns; `bind` turns them into `strom.common.predicate` trees over the schema's column
ids, which `predicate_to_pb` puts on the wire. As in Fluss the server uses a filter only to skip
whole log batches that cannot match, so scans may still return rows that do not match: filter the
result again (``Filter.mask(batch)`` gives the exact row mask).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.common.predicate import (
    BatchFilter,
    Compound,
    CompoundFunction,
    Leaf,
    LeafFunction,
    Predicate,
)
from strom.common.schema import Schema

__all__ = ["ColumnRef", "Filter", "col"]


class Filter(ABC):
    """A filter expression over named columns."""

    __slots__ = ()

    def __and__(self, other: Filter) -> Filter:
        return _Compound(CompoundFunction.AND, (self, _check(other)))

    def __or__(self, other: Filter) -> Filter:
        return _Compound(CompoundFunction.OR, (self, _check(other)))

    def and_(self, other: Filter) -> Filter:
        return self & other

    def or_(self, other: Filter) -> Filter:
        return self | other

    def __bool__(self) -> bool:
        raise TypeError("a filter has no truth value: combine filters with & and |, not 'and' / 'or'")

    @abstractmethod
    def bind(self, schema: Schema) -> Predicate:
        """The predicate over `schema`'s column ids; unknown columns raise ValueError."""

    def mask(self, batch: pa.RecordBatch, schema: Schema) -> pa.Array:
        """Which rows of `batch` (columns named as in `schema`) match, as a boolean array."""
        names = batch.schema.names
        column_of_field = {c.column_id: names.index(c.name) for c in schema.columns if c.name in names}
        return BatchFilter(self.bind(schema), column_of_field).mask(batch)


def _check(other: Any) -> Filter:
    if not isinstance(other, Filter):
        raise TypeError(f"can only combine a filter with another filter, not {type(other).__name__}")
    return other


@dataclass(frozen=True, slots=True, eq=False)
class _Leaf(Filter):
    function: LeafFunction
    column: str
    literals: tuple[Any, ...] = ()

    def bind(self, schema: Schema) -> Predicate:
        if self.column not in schema.column_names:
            raise ValueError(f"filter column '{self.column}' is not in the table {schema.column_names}")
        column_id = schema.get_column(self.column).column_id
        return Leaf(self.function, column_id, self.literals)

    def __repr__(self) -> str:
        return f"{self.function.name}({self.column}{''.join(f', {v!r}' for v in self.literals)})"


@dataclass(frozen=True, slots=True, eq=False)
class _Compound(Filter):
    function: CompoundFunction
    children: tuple[Filter, ...]

    def bind(self, schema: Schema) -> Predicate:
        return Compound(self.function, tuple(c.bind(schema) for c in self.children))

    def __repr__(self) -> str:
        return f"{self.function.name}({', '.join(repr(c) for c in self.children)})"


class ColumnRef:
    """A column in a filter; compare it with a value to get a `Filter`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _leaf(self, function: LeafFunction, *literals: Any) -> Filter:
        return _Leaf(function, self.name, tuple(literals))

    def __eq__(self, value: Any) -> Filter:  # type: ignore[override]
        return self._leaf(LeafFunction.EQUAL, value)

    def __ne__(self, value: Any) -> Filter:  # type: ignore[override]
        return self._leaf(LeafFunction.NOT_EQUAL, value)

    def __lt__(self, value: Any) -> Filter:
        return self._leaf(LeafFunction.LESS_THAN, value)

    def __le__(self, value: Any) -> Filter:
        return self._leaf(LeafFunction.LESS_OR_EQUAL, value)

    def __gt__(self, value: Any) -> Filter:
        return self._leaf(LeafFunction.GREATER_THAN, value)

    def __ge__(self, value: Any) -> Filter:
        return self._leaf(LeafFunction.GREATER_OR_EQUAL, value)

    __hash__ = None  # type: ignore[assignment]  # == builds a filter, so refs cannot be dict keys

    def is_null(self) -> Filter:
        return self._leaf(LeafFunction.IS_NULL)

    def is_not_null(self) -> Filter:
        return self._leaf(LeafFunction.IS_NOT_NULL)

    def starts_with(self, prefix: str) -> Filter:
        return self._leaf(LeafFunction.STARTS_WITH, prefix)

    def ends_with(self, suffix: str) -> Filter:
        return self._leaf(LeafFunction.ENDS_WITH, suffix)

    def contains(self, infix: str) -> Filter:
        return self._leaf(LeafFunction.CONTAINS, infix)

    def is_in(self, values: Iterable[Any]) -> Filter:
        return self._leaf(LeafFunction.IN, *values)

    def not_in(self, values: Iterable[Any]) -> Filter:
        return self._leaf(LeafFunction.NOT_IN, *values)

    def __repr__(self) -> str:
        return f"col({self.name!r})"


def col(name: str) -> ColumnRef:
    return ColumnRef(name)
