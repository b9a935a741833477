"""Row mergers of primary-key tables: how an upsert or a delete combines with the stored row.

Values here are stored values, `int16 LE schema id` + CompactedRow. A merger answers:
* `merge(old, new)`: the value to keep after an upsert of `new` (old is None for a new key). Returning
  the very `old` object means "no change": the tablet writes nothing and emits no changelog.
* `delete(old)`: the value to keep after a delete of an existing key, None to remove the row.
  Called only when the table's delete behavior is ALLOW.

What each `table.merge-engine` does, as in Fluss:
* default: the last row wins; deletes remove the row.
* FIRST_ROW: the first row wins, later upserts are no-ops (so its changelog is insert-only).
* VERSIONED: the row with the higher `table.merge-engine.versioned.ver-column` wins; on a tie the new
  row wins; a null version counts as the type's minimum (INT/BIGINT MIN_VALUE, timestamp of
  Long.MIN_VALUE millis), so a null never beats a stored row but replaces one whose version is null.
* partial update (PutKv `target_columns`, default engine only): the target columns come from the new
  row, the others are kept from the old row (null for a new key). Writing only the primary key onto an
  existing row is a no-op. A delete nulls the non-key target columns and removes the row only when
  every non-target column is null already.
* AGGREGATION: columns aggregate by their functions (aggregate_merger.py); partial updates
  aggregate only the target columns.

`table.delete.behavior`: ALLOW, IGNORE (deletes dropped silently) or DISABLE (DeletionDisabledError).
Unset, it is ALLOW for the default engine and IGNORE for the others; FIRST_ROW and VERSIONED never allow.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.common import config as cfg
from strom.common.config import DeleteBehavior, MergeEngineType
from strom.common.errors import CorruptRecordError, InvalidTableError, InvalidTargetColumnError
from strom.common.schema import Schema
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType, DataTypeRoot
from strom.record.varint import read_varint32, read_varint64

__all__ = [
    "DefaultRowMerger",
    "FirstRowMerger",
    "PartialUpdateMerger",
    "RowFields",
    "RowMerger",
    "VersionedRowMerger",
    "create_row_merger",
    "effective_delete_behavior",
]

_R = DataTypeRoot
_SCHEMA_ID = struct.Struct("<h")
VALUE_PREFIX = 2  # the int16 schema id in front of every stored row

_INT_MIN = -(2**31)
_LONG_MIN = -(2**63)


class RowMerger(Protocol):
    @property
    def delete_behavior(self) -> DeleteBehavior: ...  # read-only: the dataclass mergers are frozen

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        """The value to keep after upserting `new`; `old` itself (identity) for no change."""
        ...

    def delete(self, old: bytes) -> bytes | None:
        """The value to keep after deleting an existing row; None removes it."""
        ...


def effective_delete_behavior(info: TableInfo) -> DeleteBehavior:
    """The table's delete behavior, with Fluss's default for merge engines when it is unset."""
    if info.properties.contains(cfg.TABLE_DELETE_BEHAVIOR):
        return info.delete_behavior
    return DeleteBehavior.ALLOW if info.merge_engine is None else DeleteBehavior.IGNORE


# ---------------------------------------------------------------------------------------------------
# Whole-row mergers


@dataclass(frozen=True, slots=True)
class DefaultRowMerger:
    """The last row wins."""

    delete_behavior: DeleteBehavior = DeleteBehavior.ALLOW

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        return new

    def delete(self, old: bytes) -> bytes | None:
        return None


@dataclass(frozen=True, slots=True)
class FirstRowMerger:
    """The first row wins; later upserts change nothing."""

    delete_behavior: DeleteBehavior = DeleteBehavior.IGNORE

    def __post_init__(self) -> None:
        if self.delete_behavior is DeleteBehavior.ALLOW:
            raise InvalidTableError("DELETE is not supported for the first_row merge engine.")

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        return new if old is None else old

    def delete(self, old: bytes) -> bytes | None:
        raise InvalidTableError("DELETE is not supported for the first_row merge engine.")


class VersionedRowMerger:
    """The row with the higher version wins; the new row wins ties."""

    __slots__ = ("_fields", "_index", "_version", "delete_behavior")

    def __init__(self, schema: Schema, version_column: str, delete_behavior: DeleteBehavior) -> None:
        if delete_behavior is DeleteBehavior.ALLOW:
            raise InvalidTableError("DELETE is not supported for the versioned merge engine.")
        self.delete_behavior: DeleteBehavior = delete_behavior
        index = schema.column_index(version_column) if version_column in schema.column_names else -1
        if index < 0:
            raise InvalidTableError(
                f"The version column '{version_column}' for versioned merge engine doesn't exist in schema."
            )
        t = schema.row_type[index]
        # Every version is (value, nanos of the millisecond), so versions of any type compare alike.
        self._version: Callable[[bytes | None], tuple[int, int]]
        if t.root is _R.INTEGER:
            self._version = _int_version
        elif t.root is _R.BIGINT:
            self._version = _long_version
        elif t.root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
            self._version = timestamp_version if (t.precision or 0) > 3 else compact_timestamp_version
        else:
            raise InvalidTableError(
                f"The version column '{version_column}' for versioned merge engine must be one type of "
                f"[INT, BIGINT, TIMESTAMP, TIMESTAMP_LTZ], but is {t}."
            )
        self._index = index
        # Only the fields up to the version column need walking.
        self._fields = RowFields(schema.row_type[: index + 1], total_fields=len(schema.row_type))

    def version(self, value: bytes) -> tuple[int, int]:
        field = self._fields.field(value, self._index)
        return self._version(field)

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        if old is None:
            return new
        return new if self.version(old) <= self.version(new) else old

    def delete(self, old: bytes) -> bytes | None:
        raise InvalidTableError("DELETE is not supported for the versioned merge engine.")


def _int_version(field: bytes | None) -> tuple[int, int]:
    return (_INT_MIN if field is None else read_varint32(field, 0)[0], 0)


def _long_version(field: bytes | None) -> tuple[int, int]:
    return (_LONG_MIN if field is None else read_varint64(field, 0)[0], 0)


def compact_timestamp_version(field: bytes | None) -> tuple[int, int]:
    return (_LONG_MIN, 0) if field is None else (read_varint64(field, 0)[0], 0)


def timestamp_version(field: bytes | None) -> tuple[int, int]:
    if field is None:
        return (_LONG_MIN, 0)
    millis, pos = read_varint64(field, 0)
    return (millis, read_varint32(field, pos)[0])


# ---------------------------------------------------------------------------------------------------
# Field-level access to CompactedRows (partial updates, version columns)

_FIXED_WIDTH = {
    _R.BOOLEAN: 1,
    _R.TINYINT: 1,
    _R.SMALLINT: 2,
    _R.FLOAT: 4,
    _R.DOUBLE: 8,
}
_ONE_VARINT = 0
_TWO_VARINTS = -1
_LENGTH_PREFIXED = -2


def _field_kind(t: DataType) -> int:
    """A fixed width (> 0), or how the field's bytes are delimited."""
    root = t.root
    width = _FIXED_WIDTH.get(root)
    if width is not None:
        return width
    if root in (_R.INTEGER, _R.BIGINT, _R.DATE, _R.TIME_WITHOUT_TIME_ZONE):
        return _ONE_VARINT
    if root is _R.DECIMAL:
        return _ONE_VARINT if (t.precision or 10) <= 18 else _LENGTH_PREFIXED
    if root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
        return _ONE_VARINT if (t.precision or 0) <= 3 else _TWO_VARINTS
    return _LENGTH_PREFIXED  # strings, binaries, arrays, maps, rows


class RowFields:
    """Splits stored values into the raw bytes of each field and joins fields back.

    Works on the encoded bytes, so merged rows keep every value bit for bit (no decode/encode round
    trip, which would drop, for example, the nanoseconds of a TIMESTAMP(9)).
    """

    __slots__ = ("_header", "_kinds")

    def __init__(self, row_type: Sequence[DataType], total_fields: int | None = None) -> None:
        self._kinds = tuple(_field_kind(t) for t in row_type)
        # The null bitset covers every field of the row even when only a prefix is split.
        self._header = ((len(self._kinds) if total_fields is None else total_fields) + 7) >> 3

    def split(self, value: bytes, count: int | None = None) -> list[bytes | None]:
        """The first `count` fields (default all) of a stored value, None for nulls."""
        kinds = self._kinds if count is None else self._kinds[:count]
        pos = VALUE_PREFIX + self._header
        out: list[bytes | None] = []
        append = out.append
        try:
            for i, kind in enumerate(kinds):
                if value[VALUE_PREFIX + (i >> 3)] >> (i & 7) & 1:
                    append(None)
                    continue
                start = pos
                if kind > 0:
                    pos += kind
                elif kind == _ONE_VARINT:
                    while value[pos] & 0x80:
                        pos += 1
                    pos += 1
                elif kind == _TWO_VARINTS:
                    while value[pos] & 0x80:
                        pos += 1
                    pos += 1
                    while value[pos] & 0x80:
                        pos += 1
                    pos += 1
                else:
                    n = 0
                    shift = 0
                    while True:
                        b = value[pos]
                        pos += 1
                        n |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                    pos += n
                append(value[start:pos])
        except IndexError as e:
            raise CorruptRecordError(f"malformed CompactedRow: truncated at byte {pos}") from e
        if pos > len(value) or (count is None and pos != len(value)):
            raise CorruptRecordError(
                f"malformed CompactedRow: fields end at byte {pos} of a {len(value)}-byte value"
            )
        return out

    def field(self, value: bytes, index: int) -> bytes | None:
        return self.split(value, index + 1)[index]

    def join(self, schema_id_prefix: bytes, fields: Sequence[bytes | None]) -> bytes:
        header = bytearray(self._header)
        for i, f in enumerate(fields):
            if f is None:
                header[i >> 3] |= 1 << (i & 7)
        return b"".join((schema_id_prefix, header, *(f for f in fields if f is not None)))


# ---------------------------------------------------------------------------------------------------
# Partial updates


class PartialUpdateMerger:
    """Writes only the target columns; the others keep their stored values."""

    __slots__ = ("_fields", "_keep_on_delete", "_key_only", "_prefix", "_targets", "delete_behavior")

    def __init__(
        self, schema: Schema, schema_id: int, target_columns: Sequence[int], delete_behavior: DeleteBehavior
    ) -> None:
        n = len(schema.columns)
        targets = frozenset(target_columns)
        pk = frozenset(schema.primary_key_indexes)
        self.delete_behavior = delete_behavior
        self._fields = RowFields(schema.row_type)
        self._prefix = _SCHEMA_ID.pack(schema_id)
        self._targets = tuple(i in targets for i in range(n))
        # On a partial delete the non-key target columns become null; everything else stays.
        self._keep_on_delete = tuple(i in pk or i not in targets for i in range(n))
        self._key_only = targets == pk

    def merge(self, old: bytes | None, new: bytes) -> bytes:
        if old is None:
            fields = [f if t else None for f, t in zip(self._fields.split(new), self._targets, strict=True)]
            return self._fields.join(self._prefix, fields)
        if self._key_only:
            return old
        merged = [
            n if t else o
            for n, o, t in zip(self._fields.split(new), self._fields.split(old), self._targets, strict=True)
        ]
        return self._fields.join(self._prefix, merged)

    def delete(self, old: bytes) -> bytes | None:
        fields = self._fields.split(old)
        if all(f is None for f, t in zip(fields, self._targets, strict=True) if not t):
            return None
        kept = [f if keep else None for f, keep in zip(fields, self._keep_on_delete, strict=True)]
        return self._fields.join(self._prefix, kept)


# ---------------------------------------------------------------------------------------------------
# Choosing a merger


def _base_merger(info: TableInfo) -> RowMerger:
    behavior = effective_delete_behavior(info)
    engine = info.merge_engine
    table = f"'{info.table_path}'"
    if engine is None:
        return DefaultRowMerger(behavior)
    if engine is MergeEngineType.FIRST_ROW:
        return FirstRowMerger(behavior)
    if engine is MergeEngineType.VERSIONED:
        column = info.merge_engine_version_column
        if column is None:
            raise InvalidTableError(
                f"'{cfg.TABLE_MERGE_ENGINE_VERSION_COLUMN.key}' must be set for versioned merge engine "
                f"(table {table})."
            )
        return VersionedRowMerger(info.schema, column, behavior)
    if engine is MergeEngineType.AGGREGATION:
        # Imported here: the aggregate merger builds on this module's RowFields and partial updates.
        from strom.server.tablet.kv.aggregate_merger import AggregateRowMerger

        return AggregateRowMerger(info.schema, info.schema_id, behavior)
    raise InvalidTableError(
        f"Table {table} uses the '{engine.value.lower()}' merge engine, which Strom does not support yet."
    )


def create_row_merger(info: TableInfo, target_columns: Sequence[int] | None = None) -> RowMerger:
    """The merger for a PutKv on `info`, checking its target columns.

    InvalidTargetColumnError (naming the columns) for target columns out of range, without the whole
    primary key, with a NOT NULL non-key column, or on a FIRST_ROW / VERSIONED table.
    InvalidTableError for a merge engine Strom does not support.
    """
    base = _base_merger(info)
    if not target_columns:
        return base
    schema = info.schema
    names = schema.column_names
    n = len(names)
    for c in target_columns:
        if not 0 <= c < n:
            raise InvalidTargetColumnError(
                f"Target column index {c} is out of range: table '{info.table_path}' has {n} columns {names}."
            )
    engine = info.merge_engine
    if engine is not None and engine is not MergeEngineType.AGGREGATION:
        raise InvalidTargetColumnError(
            f"Partial update is not supported for the {engine.value.lower()} merge engine "
            f"(table '{info.table_path}')."
        )
    if len(set(target_columns)) != len(target_columns):
        duplicates = sorted({names[c] for c in target_columns if list(target_columns).count(c) > 1})
        raise InvalidTargetColumnError(f"The target write columns name {duplicates} more than once.")
    targets = set(target_columns)
    if len(targets) == n:
        return base  # every column: a full-row upsert
    pk = schema.primary_key_indexes
    if not targets.issuperset(pk):
        raise InvalidTargetColumnError(
            f"The target write columns {[names[i] for i in sorted(targets)]} must contain the primary key "
            f"columns {[names[i] for i in pk]}."
        )
    pk_set = set(pk)
    for i, column in enumerate(schema.columns):
        if i not in pk_set and not column.data_type.nullable:
            raise InvalidTargetColumnError(
                "Partial Update requires all columns except primary key to be nullable, but column "
                f"{column.name} is NOT NULL."
            )
    if engine is MergeEngineType.AGGREGATION:
        return base.with_targets(sorted(targets))  # type: ignore[attr-defined]
    return PartialUpdateMerger(schema, info.schema_id, sorted(targets), base.delete_behavior)
