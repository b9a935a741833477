"""Rows given as dicts, tuples or lists, collected column-wise until their batch is built.

A row is checked when it is appended (column count or names, nulls in NOT NULL columns, and the
Python type of each value, with cheap `isinstance` checks), so most mistakes raise right at the
``append`` call. Rows are kept as they come and transposed into one list per column only when they
become Arrow: a single ``pa.array`` per column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from strom.common.schema import Schema
from strom.common.types import DataTypeRoot

__all__ = ["RowBuffer", "RowLayout"]

_R = DataTypeRoot
_INTS = (int, np.integer)
_FLOATS = (float, int, np.floating, np.integer)
_BYTES = (bytes, bytearray, memoryview)

# Python types accepted per type root; nested types are left to Arrow.
_ACCEPTED: dict[DataTypeRoot, tuple[type, ...]] = {
    _R.BOOLEAN: (bool, np.bool_),
    _R.TINYINT: _INTS,
    _R.SMALLINT: _INTS,
    _R.INTEGER: _INTS,
    _R.BIGINT: _INTS,
    _R.FLOAT: _FLOATS,
    _R.DOUBLE: _FLOATS,
    _R.CHAR: (str,),
    _R.STRING: (str,),
    _R.BYTES: _BYTES,
    _R.BINARY: _BYTES,
    _R.DECIMAL: (decimal.Decimal, int, float, str),
    _R.DATE: (dt.date,),
    _R.TIME_WITHOUT_TIME_ZONE: (dt.time,),
    _R.TIMESTAMP_WITHOUT_TIME_ZONE: (dt.datetime, np.datetime64),
    _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE: (dt.datetime, np.datetime64),
}


class RowLayout:
    """How a table's rows are checked and turned into column values."""

    def __init__(self, schema: Schema, arrow_schema: pa.Schema) -> None:
        self.arrow_schema = arrow_schema
        self.names = tuple(schema.column_names)
        self._name_set = frozenset(self.names)
        getter = operator.itemgetter(*self.names)
        # itemgetter of one name returns the bare value, not a 1-tuple.
        self._getter: Any = getter if len(self.names) > 1 else (lambda row: (getter(row),))
        types = schema.row_type
        self.nullable = tuple(t.nullable for t in types)
        # Per column, the Python types a value may have (None included when the column is nullable),
        # so a whole row is checked with one C-level `all(map(isinstance, ...))`.
        self._accepted = tuple(
            (_ACCEPTED.get(t.root) or (object,)) + ((type(None),) if t.nullable else ()) for t in types
        )
        # A rough Arrow size of a row before any row was seen, for staging.
        self.estimated_row_size = sum(
            (f.type.bit_width + 7) // 8 if _has_bit_width(f.type) else 16 for f in arrow_schema
        )

    def values(self, row: Mapping[str, Any] | Sequence[Any]) -> Sequence[Any]:
        """The row's values in column order, checked; raises ValueError / TypeError naming the column."""
        if isinstance(row, dict):
            if not row.keys() <= self._name_set:
                unknown = [k for k in row if k not in self._name_set]
                raise ValueError(f"unknown column(s) {unknown}; the table has {list(self.names)}")
            # Every column given: one C call; otherwise missing columns are None.
            full = len(row) == len(self.names)
            values: Sequence[Any] = self._getter(row) if full else list(map(row.get, self.names))
        elif isinstance(row, tuple | list):
            if len(row) != len(self.names):
                raise ValueError(
                    f"the row has {len(row)} values but the table has {len(self.names)} columns "
                    f"{list(self.names)}"
                )
            values = row
        elif isinstance(row, Mapping):
            return self.values(dict(row))
        else:
            raise TypeError(f"a row must be a dict, list or tuple, not {type(row).__name__}")
        if not all(map(isinstance, values, self._accepted)):
            self._raise_for(values)
        return values

    def _raise_for(self, values: Sequence[Any]) -> None:
        for i, v in enumerate(values):
            if isinstance(v, self._accepted[i]):
                continue
            if v is None:
                raise ValueError(f"column '{self.names[i]}' is NOT NULL but the row has no value for it")
            raise TypeError(
                f"column '{self.names[i]}' ({self.arrow_schema.field(i).type}) cannot take "
                f"{type(v).__name__} value {v!r}"
            )


def _has_bit_width(t: pa.DataType) -> bool:
    try:
        return t.bit_width > 0
    except ValueError:
        return False


class RowBuffer:
    """Rows waiting to become one Arrow batch; transposed to columns only when converted."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[Sequence[Any]] = []

    def append(self, values: Sequence[Any]) -> None:
        self.rows.append(values)

    @property
    def count(self) -> int:
        return len(self.rows)

    def to_record_batch(self, schema: pa.Schema) -> pa.RecordBatch:
        arrays = []
        columns = zip(*self.rows, strict=True) if self.rows else ([] for _ in schema)
        for column, field in zip(columns, schema, strict=True):
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                raise ValueError(f"column '{field.name}' ({field.type}): {e}") from e
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
