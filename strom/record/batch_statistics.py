"""The per-column statistics of a magic-1 log batch (Fluss 1.0): collect, encode, parse, and decide
whether a filter can match any row of the batch without decoding its records.

The block sits right after the 52-byte V1 header, its length in the header's StatisticsLength field
(0: no statistics). All little-endian:

    version (int8, 1) | column count N (int16) | N column indexes (int16, ascending schema positions)
    | N null counts (int32) | min row size (int32) | min row | max row size (int32) | max row

The min and max rows are AlignedRows of the N statistics columns (`aligned_row`). A bound is null
when every value of its column is null.

Writers collect statistics for the columns `table.statistics.columns` names ('*': every column of a
supported type). The server never trusts a bound it cannot compare exactly: a column without
statistics, a NaN, an unsupported filter function all keep the batch.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strom.common.errors import CorruptRecordError
from strom.common.predicate import Compound, CompoundFunction, Leaf, LeafFunction, Predicate, unscaled_literal
from strom.record import values as conv
from strom.record.aligned_row import decode_aligned_row, encode_aligned_row, supports_statistics

__all__ = [
    "STATISTICS_VERSION",
    "BatchStatistics",
    "collect_statistics",
    "parse_statistics",
    "statistics_columns",
    "statistics_contradiction",
    "statistics_may_match",
]

STATISTICS_VERSION = 1
Buffer = bytes | bytearray | memoryview

_U8 = struct.Struct("<B")
_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_NANOS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_TIME_MILLIS_DIVISOR = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


@dataclass(frozen=True, slots=True)
class BatchStatistics:
    """Bounds of some columns of one batch; `mins[i]`/`maxs[i]` None when column `columns[i]` is all
    null. Values are in `aligned_row`'s comparable form."""

    columns: tuple[int, ...]
    null_counts: tuple[int, ...]
    mins: tuple[Any, ...]
    maxs: tuple[Any, ...]


def statistics_columns(option: str | None, arrow_schema: pa.Schema) -> tuple[int, ...]:
    """The schema positions `table.statistics.columns` selects (empty: no statistics)."""
    if option is None:
        return ()
    if option.strip() == "*":
        return tuple(i for i, f in enumerate(arrow_schema) if supports_statistics(f.type))
    names = {c.strip() for c in option.split(",") if c.strip()}
    return tuple(i for i, f in enumerate(arrow_schema) if f.name in names and supports_statistics(f.type))


# ------------------------------------------------------------------------------------- collecting


def _bounds(column: pa.Array) -> tuple[Any, Any]:
    """(min, max) of a column in comparable form, (None, None) when it holds no non-null value."""
    t = column.type
    if column.null_count == len(column):
        return None, None
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        column = column.cast(pa.int32())
    elif pa.types.is_time64(t) or pa.types.is_timestamp(t):
        column = column.cast(pa.int64())
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None or high is None:
        return None, None
    if pa.types.is_decimal128(t):
        return int(low.scaleb(t.scale)), int(high.scaleb(t.scale))
    if pa.types.is_time(t):
        divisor = _TIME_MILLIS_DIVISOR[t.unit]
        if divisor is None:  # seconds
            return low * 1000, high * 1000
        return low // divisor, high // divisor
    if pa.types.is_timestamp(t):
        factor = _NANOS_PER_UNIT[t.unit]
        return low * factor, high * factor
    return low, high


def collect_statistics(records: pa.RecordBatch, columns: Sequence[int]) -> bytes:
    """The statistics block of `records` for the given schema positions (b"" when there are none)."""
    if not columns or records.num_rows == 0:
        return b""
    types = [records.schema.field(i).type for i in columns]
    mins: list[Any] = []
    maxs: list[Any] = []
    parts = [_U8.pack(STATISTICS_VERSION), _I16.pack(len(columns))]
    parts += [_I16.pack(i) for i in columns]
    for i in columns:
        column = records.column(i)
        parts.append(_I32.pack(column.null_count))
        low, high = _bounds(column)
        mins.append(low)
        maxs.append(high)
    for row in (encode_aligned_row(mins, types), encode_aligned_row(maxs, types)):
        parts += [_I32.pack(len(row)), row]
    return b"".join(parts)


def statistics_contradiction(stats: BatchStatistics, records: pa.RecordBatch) -> str | None:
    """Why `stats` cannot describe `records` (a null count that differs, a bound tighter than the
    values), or None. Looser bounds are allowed; a NaN bound (Java orders NaN last) covers anything."""
    for i, column_index in enumerate(stats.columns):
        column = records.column(column_index)
        name = records.schema.field(column_index).name
        if stats.null_counts[i] != column.null_count:
            stated = stats.null_counts[i]
            return f"statistics say {stated} nulls in column {name}, the records hold {column.null_count}"
        low, high = _bounds(column)
        if low is None or high is None:
            continue
        stated_low, stated_high = stats.mins[i], stats.maxs[i]
        if stated_low is None or stated_high is None:
            return f"statistics give column {name} no bounds, the records hold values"
        if not _nan(stated_low) and stated_low > low:
            return f"statistics minimum {stated_low!r} of column {name} is above the records' {low!r}"
        if not _nan(stated_high) and stated_high < high:
            return f"statistics maximum {stated_high!r} of column {name} is below the records' {high!r}"
    return None


# ---------------------------------------------------------------------------------------- parsing


def parse_statistics(
    buf: Buffer, begin: int, end: int, record_count: int, arrow_schema: pa.Schema | None
) -> BatchStatistics | None:
    """The statistics in buf[begin:end] (None when the block is empty), checked strictly: version,
    ascending in-range column indexes of supported types, null counts within the record count, and
    (with the schema) the two rows decoding exactly to their declared sizes."""
    if begin == end:
        return None
    pos = begin

    def read(unpacker: struct.Struct) -> int:
        nonlocal pos
        if pos + unpacker.size > end:
            raise CorruptRecordError(f"statistics block of {end - begin} bytes is truncated")
        value = unpacker.unpack_from(buf, pos)[0]
        pos += unpacker.size
        return int(value)

    version = read(_U8)
    if version != STATISTICS_VERSION:
        raise CorruptRecordError(f"statistics version {version} (expected {STATISTICS_VERSION})")
    limit = len(arrow_schema) if arrow_schema is not None else 1 << 15
    count = read(_I16)
    if not 0 < count <= limit:
        raise CorruptRecordError(f"statistics for {count} columns")
    columns = tuple(read(_I16) for _ in range(count))
    if any(not 0 <= c < limit for c in columns) or list(columns) != sorted(set(columns)):
        raise CorruptRecordError(f"statistics name columns {list(columns)}, not distinct ascending positions")
    nulls = tuple(read(_I32) for _ in range(count))
    if any(not 0 <= n <= record_count for n in nulls):
        raise CorruptRecordError(f"statistics null counts {list(nulls)} for {record_count} records")
    rows: list[tuple[int, int]] = []
    for bound in ("min", "max"):
        length = read(_I32)
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"statistics {bound} row of {length} bytes does not fit")
        rows.append((pos, pos + length))
        pos += length
    if pos != end:
        raise CorruptRecordError(f"{end - pos} stray bytes after the statistics")
    if arrow_schema is None:
        return BatchStatistics(columns, nulls, (None,) * count, (None,) * count)
    types = [arrow_schema.field(c).type for c in columns]
    for c, t in zip(columns, types, strict=True):
        if not supports_statistics(t):
            raise CorruptRecordError(f"statistics for column {c} of type {t}, which has none")
    bounds = []
    for row_begin, row_end in rows:
        # Fluss writes an empty row (size 0) when it has no bound at all
        bounds.append(
            tuple(decode_aligned_row(buf, row_begin, row_end, types))
            if row_end > row_begin
            else (None,) * count
        )
    return BatchStatistics(columns, nulls, bounds[0], bounds[1])


# -------------------------------------------------------------------------------------- filtering


def _literal_key(value: Any, t: pa.DataType) -> Any:
    """A predicate literal in the comparable form of a column of Arrow type `t`."""
    if pa.types.is_decimal128(t):
        return unscaled_literal(value)
    if pa.types.is_date32(t):
        return conv.date_to_days(value)
    if pa.types.is_time(t):
        return conv.time_to_millis(value)
    if pa.types.is_timestamp(t):
        if not isinstance(value, dt.datetime):
            raise TypeError("not a timestamp")
        millis, nanos = conv.timestamp_to_parts(value)
        return millis * 1_000_000 + nanos
    if pa.types.is_boolean(t):
        return bool(value)
    if pa.types.is_integer(t):
        if not isinstance(value, int):
            raise TypeError("not an int")
        return value
    if pa.types.is_floating(t):
        return float(value)
    if pa.types.is_string(t):
        if not isinstance(value, str):
            raise TypeError("not a str")
        return value
    raise TypeError(f"no comparable form for {t}")


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def statistics_may_match(
    predicate: Predicate,
    stats: BatchStatistics,
    column_of_field: dict[int, int],
    arrow_schema: pa.Schema,
    record_count: int,
) -> bool:
    """False only when the statistics prove that no row of the batch satisfies `predicate`."""
    if isinstance(predicate, Compound):
        results = (
            statistics_may_match(child, stats, column_of_field, arrow_schema, record_count)
            for child in predicate.children
        )
        return all(results) if predicate.function == CompoundFunction.AND else any(results)
    try:
        return _leaf_may_match(predicate, stats, column_of_field, arrow_schema, record_count)
    except (TypeError, ValueError, OverflowError):
        return True  # a literal we cannot compare exactly: unsure, keep the batch


def _leaf_may_match(
    leaf: Leaf,
    stats: BatchStatistics,
    column_of_field: dict[int, int],
    arrow_schema: pa.Schema,
    record_count: int,
) -> bool:
    column = column_of_field.get(leaf.field_id)
    if column is None or column not in stats.columns:
        return True
    i = stats.columns.index(column)
    nulls = stats.null_counts[i]
    f = leaf.function
    if f == LeafFunction.IS_NULL:
        return nulls > 0
    if f == LeafFunction.IS_NOT_NULL:
        return nulls < record_count
    if nulls >= record_count:
        return False  # every value is null: no comparison, IN or string match holds
    low, high = stats.mins[i], stats.maxs[i]
    if low is None or high is None or _nan(low) or _nan(high):
        return True
    t = arrow_schema.field(column).type
    floating = pa.types.is_floating(t)  # NaN values are outside [min, max] and unequal to everything
    if f in (LeafFunction.IN, LeafFunction.NOT_IN):
        keys = [_literal_key(v, t) for v in leaf.literals if v is not None]
        if f == LeafFunction.IN:
            return any(low <= k <= high for k in keys)
        return floating or not (low == high and low in keys)
    if f in (LeafFunction.STARTS_WITH, LeafFunction.CONTAINS, LeafFunction.ENDS_WITH):
        if f == LeafFunction.STARTS_WITH and leaf.literals and isinstance(leaf.literals[0], str):
            prefix = leaf.literals[0]
            # every string starting with `prefix` lies in [prefix, prefix + U+10FFFF...)
            return high >= prefix and (low[: len(prefix)] <= prefix)
        return True
    if not leaf.literals or leaf.literals[0] is None:
        return False  # a comparison with NULL matches no row
    k = _literal_key(leaf.literals[0], t)
    if _nan(k):
        return True
    if f == LeafFunction.EQUAL:
        return bool(low <= k <= high)
    if f == LeafFunction.NOT_EQUAL:
        return floating or not (low == k == high)
    if f == LeafFunction.LESS_THAN:
        return bool(low < k)
    if f == LeafFunction.LESS_OR_EQUAL:
        return bool(low <= k)
    if f == LeafFunction.GREATER_THAN:
        return bool(high > k)
    if f == LeafFunction.GREATER_OR_EQUAL:
        return bool(high >= k)
    return True
