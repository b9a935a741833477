"""The AGGREGATION merge engine: each column of an upsert is folded into the stored row by its function.

As Fluss's AggregateRowMerger:
* the first row of a key is stored as it comes; later rows aggregate column by column
  (strom/common/aggregation.py names the functions and their defaults);
* sum, product, max, min, listagg, bool_and and bool_or ignore nulls (a null never changes the
  result; the first non-null value starts it); last_value takes every value, nulls included;
  last_value_ignore_nulls takes non-null values; first_value keeps the stored value unless it is null
  (so a null first value is replaced, as in Fluss); first_value_ignore_nulls keeps the first non-null;
* integer sums and products wrap around like Java's arithmetic; a DECIMAL result that no longer fits
  its precision becomes null (Fluss's Decimal.fromBigDecimal);
* a delete (only with `table.delete.behavior=allow`) removes the whole row — there are no
  retractions; a partial-update delete nulls the target columns instead (see PartialUpdateMerger);
* partial updates aggregate only the target columns and keep the others.

Work stays on the encoded fields (row_merger.RowFields): value-picking functions return the chosen
field's bytes unchanged; arithmetic decodes one field, computes and encodes it back.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from strom.common.aggregation import AggFunction, AggFunctionType, agg_functions
from strom.common.config import DeleteBehavior
from strom.common.errors import InvalidTableError
from strom.common.schema import Schema
from strom.common.types import DataType, DataTypeRoot
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder
from strom.server.tablet.kv.row_merger import (
    PartialUpdateMerger,
    RowFields,
    compact_timestamp_version,
    timestamp_version,
)

__all__ = ["AggregateRowMerger"]

_R = DataTypeRoot
_SCHEMA_ID = struct.Struct("<h")
_F = AggFunctionType

# (stored field, incoming field) -> merged field; None is a null field.
FieldAgg = Callable[[bytes | None, bytes | None], bytes | None]


class AggregateRowMerger:
    """Aggregates upserts into the stored row; optionally only over a partial update's target columns."""

    __slots__ = ("_aggs", "_fields", "_partial", "_prefix", "_schema", "_schema_id", "delete_behavior")

    def __init__(
        self,
        schema: Schema,
        schema_id: int,
        delete_behavior: DeleteBehavior,
        target_columns: Sequence[int] | None = None,
    ) -> None:
        self.delete_behavior = delete_behavior
        self._schema = schema
        self._schema_id = schema_id
        self._fields = RowFields(schema.row_type)
        self._prefix = _SCHEMA_ID.pack(schema_id)
        try:
            functions = agg_functions(schema)
            columns = zip(functions, schema.columns, strict=True)
            aggs = [_field_agg(f, c.name, c.data_type) for f, c in columns]
        except ValueError as e:
            raise InvalidTableError(str(e)) from e
        # A partial update keeps the non-target columns: their "function" keeps the stored field.
        targets = set(range(len(aggs)) if target_columns is None else target_columns)
        self._aggs = tuple(a if i in targets else _keep for i, a in enumerate(aggs))
        self._partial = (
            None
            if target_columns is None
            else PartialUpdateMerger(schema, schema_id, target_columns, delete_behavior)
        )

    def with_targets(self, target_columns: Sequence[int]) -> AggregateRowMerger:
        return AggregateRowMerger(self._schema, self._schema_id, self.delete_behavior, target_columns)

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        if old is None:
            return new if self._partial is None else self._partial.merge(None, new)
        fields = self._fields
        merged = [
            agg(o, n) for agg, o, n in zip(self._aggs, fields.split(old), fields.split(new), strict=True)
        ]
        return fields.join(self._prefix, merged)

    def delete(self, old: bytes) -> bytes | None:
        return None if self._partial is None else self._partial.delete(old)


# ---------------------------------------------------------------------------------------------------
# Field functions


def _keep(old: bytes | None, new: bytes | None) -> bytes | None:
    return old


def _last(old: bytes | None, new: bytes | None) -> bytes | None:
    return new


def _last_non_null(old: bytes | None, new: bytes | None) -> bytes | None:
    return old if new is None else new


def _first(old: bytes | None, new: bytes | None) -> bytes | None:
    return new if old is None else old


class _Codec:
    """Decodes and encodes one field's bytes (a one-field CompactedRow without its null byte)."""

    __slots__ = ("_decode", "_encode")

    def __init__(self, t: DataType) -> None:
        self._decode = CompactedRowDecoder([t]).decode
        self._encode = CompactedRowEncoder([t]).encode

    def decode(self, field: bytes) -> Any:
        return self._decode(b"\x00" + field)[0]

    def encode(self, value: Any) -> bytes | None:
        return None if value is None else self._encode([value])[1:]


def _non_null(combine: Callable[[bytes, bytes], bytes | None]) -> FieldAgg:
    """A function that ignores nulls: a null side leaves the other side as the result."""

    def agg(old: bytes | None, new: bytes | None) -> bytes | None:
        if old is None:
            return new
        if new is None:
            return old
        return combine(old, new)

    return agg


_INT_BITS = {_R.TINYINT: 8, _R.SMALLINT: 16, _R.INTEGER: 32, _R.BIGINT: 64}


def _wrap(bits: int) -> Callable[[int], int]:
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    return lambda v: ((v + half) & mask) - half


def _float32(v: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:
        return math.copysign(math.inf, v)


def _arithmetic(t: DataType, op: Callable[[Any, Any], Any]) -> FieldAgg:
    codec = _Codec(t)
    root = t.root
    if root in _INT_BITS:
        wrap = _wrap(_INT_BITS[root])
        finish: Callable[[Any], Any] = lambda v: wrap(v)  # noqa: E731
    elif root is _R.FLOAT:
        finish = _float32
    elif root is _R.DECIMAL:
        precision, scale = t.precision or 10, t.scale or 0
        quantum = Decimal(1).scaleb(-scale)

        def finish(v: Decimal) -> Decimal | None:
            v = v.quantize(quantum)
            return None if len(v.as_tuple().digits) > precision and v != 0 else v
    else:
        finish = float

    def combine(old: bytes, new: bytes) -> bytes | None:
        return codec.encode(finish(op(codec.decode(old), codec.decode(new))))

    return _non_null(combine)


def _comparison_key(t: DataType) -> Callable[[bytes], Any]:
    """A sort key of a field's bytes; timestamps are compared on their raw parts to keep nanoseconds."""
    if t.root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
        return timestamp_version if (t.precision or 0) > 3 else compact_timestamp_version
    return _Codec(t).decode


def _extreme(t: DataType, larger: bool) -> FieldAgg:
    key = _comparison_key(t)
    if larger:
        return _non_null(lambda old, new: new if key(old) < key(new) else old)
    return _non_null(lambda old, new: new if key(new) < key(old) else old)


def _listagg(t: DataType, delimiter: str) -> FieldAgg:
    codec = _Codec(t)
    return _non_null(lambda old, new: codec.encode(codec.decode(old) + delimiter + codec.decode(new)))


def _bool(both: bool) -> FieldAgg:
    # A BOOLEAN field is one byte, 0 or 1.
    if both:
        return _non_null(lambda old, new: old if old == b"\x00" else new)
    return _non_null(lambda old, new: old if old == b"\x01" else new)


def _field_agg(function: AggFunction, column: str, t: DataType) -> FieldAgg:
    kind = function.type
    if kind is _F.LAST_VALUE:
        return _last
    if kind is _F.LAST_VALUE_IGNORE_NULLS:
        return _last_non_null
    if kind in (_F.FIRST_VALUE, _F.FIRST_VALUE_IGNORE_NULLS):
        # Both keep the stored value unless it is null (Fluss's FieldFirstValueAgg behaves the same).
        return _first
    function.check(column, t)  # CreateTable checked it already; a stored schema is checked again
    if kind is _F.SUM:
        return _arithmetic(t, lambda a, b: a + b)
    if kind is _F.PRODUCT:
        return _arithmetic(t, lambda a, b: a * b)
    if kind in (_F.MAX, _F.MIN):
        return _extreme(t, larger=kind is _F.MAX)
    if kind in (_F.LISTAGG, _F.STRING_AGG):
        return _listagg(t, function.delimiter)
    if kind in (_F.BOOL_AND, _F.BOOL_OR):
        return _bool(both=kind is _F.BOOL_AND)
    raise ValueError(f"Strom does not support the '{kind}' aggregation function yet.")
