"""Fluss's virtual tables in Spark: ``load("db.t$changelog")`` and ``load("db.t$binlog")``.

As in Fluss (website docs, "Virtual Tables"; the Flink connector's changelog and binlog sources):
* ``$changelog`` (log and primary-key tables): every change of the log with ``_change_type``
  (``insert``, ``update_before``, ``update_after``, ``delete``; log tables only ``insert``),
  ``_log_offset`` and ``_commit_timestamp`` first, then the table's columns.
* ``$binlog`` (primary-key tables): one row per change with the same three columns and ``before`` /
  ``after`` structs of the table's columns; an ``update`` joins an update-before with the
  update-after that follows it (the update-after's offset), inserts have no ``before``, deletes no
  ``after``. A WAL-image table logs no update-before, so its updates have no ``before``.
* They read the Fluss log only (no KV snapshot, no lake): startup mode ``full`` (the default) and
  ``earliest`` start at the earliest offset Fluss still has; ``latest`` and ``timestamp`` as for
  tables. Batch reads stop at the offsets that were latest when the read was planned.

The connector reads the underlying table with its change-type and metadata columns, and each batch is
turned into the virtual table's rows here (column-wise with pyarrow).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from strom.common.table_descriptor import TableInfo
from strom.spark.options import (
    CHANGE_TYPE_COLUMN,
    INCLUDE_CHANGE_TYPE,
    INCLUDE_METADATA,
    OFFSET_COLUMN,
    PATH,
    STARTUP_MODE,
    TABLE,
    TIMESTAMP_COLUMN,
    UNION_READ,
    SparkOptionError,
    StartupMode,
)
from strom.spark.types import arrow_schema_for, conform, spark_schema

LOG_OFFSET_COLUMN = "_log_offset"
COMMIT_TIMESTAMP_COLUMN = "_commit_timestamp"
BEFORE = "before"
AFTER = "after"

# The connector's change labels (ChangeType.short_string) as Fluss's virtual tables name them.
_CHANGELOG_NAMES = {
    "+A": "insert",
    "+I": "insert",
    "-U": "update_before",
    "+U": "update_after",
    "-D": "delete",
}


class VirtualTable(enum.StrEnum):
    CHANGELOG = "changelog"
    BINLOG = "binlog"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> tuple[VirtualTable | None, Mapping[str, str]]:
        """The virtual table a `table`/`path` option names (``db.t$changelog``), and the options that
        read its base table: the name without the suffix, change types and metadata on, and
        ``full`` startup read from the earliest log offset."""
        base = CaseInsensitiveDict(options)  # Spark's option names are case-insensitive
        key = TABLE if options.get(TABLE) else PATH
        name = str(options.get(key) or "")
        if "$" not in name:
            return None, base
        table, _, suffix = name.rpartition("$")
        try:
            kind = cls(suffix.lower())
        except ValueError:
            names = ", ".join(f"'${k.value}'" for k in cls)
            raise SparkOptionError(
                f"'{name}' names no virtual table: Fluss has {names} (e.g. 'db.orders$changelog')."
            ) from None
        base[key] = table
        base[INCLUDE_CHANGE_TYPE] = "true"
        base[INCLUDE_METADATA] = "true"
        base.pop(UNION_READ, None)  # virtual tables read the Fluss log only
        mode = str(options.get(STARTUP_MODE) or StartupMode.FULL.value).strip().lower()
        if mode == StartupMode.FULL.value:
            base[STARTUP_MODE] = StartupMode.EARLIEST.value
        return kind, base

    def check(self, table: TableInfo) -> None:
        if self is VirtualTable.BINLOG and not table.has_primary_key:
            raise SparkOptionError(
                f"'{table.table_path}$binlog' is only available for primary-key tables; "
                f"'{table.table_path}' is a log table (read '{table.table_path}$changelog')."
            )

    def schema(self, table: TableInfo) -> StructType:
        meta = [
            StructField(CHANGE_TYPE_COLUMN, StringType(), False),
            StructField(LOG_OFFSET_COLUMN, LongType(), False),
            StructField(COMMIT_TIMESTAMP_COLUMN, TimestampType(), False),
        ]
        columns = spark_schema(table.schema)
        if self is VirtualTable.CHANGELOG:
            return StructType([*meta, *columns.fields])
        return StructType([*meta, StructField(BEFORE, columns, True), StructField(AFTER, columns, True)])

    def convert(self, batch: pa.RecordBatch, columns: Sequence[str], target: pa.Schema) -> pa.RecordBatch:
        """One batch of the base table's changes (one log batch of one bucket) as virtual rows."""
        labels = batch.column(CHANGE_TYPE_COLUMN)
        offsets = batch.column(OFFSET_COLUMN)
        timestamps = batch.column(TIMESTAMP_COLUMN)
        if self is VirtualTable.CHANGELOG:
            names = pa.array([_CHANGELOG_NAMES[v] for v in labels.to_pylist()], pa.string())
            out = {CHANGE_TYPE_COLUMN: names, LOG_OFFSET_COLUMN: offsets, COMMIT_TIMESTAMP_COLUMN: timestamps}
            out.update({name: batch.column(name) for name in columns})
            return _batch(out, target)
        return _binlog(batch, labels.to_pylist(), columns, target)


def _batch(columns: dict[str, pa.Array], target: pa.Schema) -> pa.RecordBatch:
    names = [f.name for f in target]
    return conform(pa.RecordBatch.from_arrays([columns[n] for n in names], names=names), target)


def _binlog(
    batch: pa.RecordBatch, labels: list[str], columns: Sequence[str], target: pa.Schema
) -> pa.RecordBatch:
    """Pairs an update-before with the update-after right after it (one PutKv writes both into the
    same log batch); every other change is a row of its own."""
    kinds: list[str] = []
    befores: list[int | None] = []
    afters: list[int | None] = []
    i = 0
    while i < len(labels):
        label = labels[i]
        if label == "-U" and i + 1 < len(labels) and labels[i + 1] == "+U":
            kinds.append("update")
            befores.append(i)
            afters.append(i + 1)
            i += 2
            continue
        if label in ("+I", "+A"):
            kinds.append("insert")
            befores.append(None)
            afters.append(i)
        elif label == "+U":  # no update-before: a WAL-image changelog
            kinds.append("update")
            befores.append(None)
            afters.append(i)
        elif label == "-D":
            kinds.append("delete")
            befores.append(i)
            afters.append(None)
        else:  # a lone update-before: its update-after is not in this read
            kinds.append("update")
            befores.append(i)
            afters.append(None)
        i += 1
    rows = pa.StructArray.from_arrays([batch.column(n) for n in columns], names=list(columns))
    at = pa.array([a if a is not None else b for a, b in zip(afters, befores, strict=True)], pa.int64())
    struct_types = {f.name: f.type for f in target}
    out = {
        CHANGE_TYPE_COLUMN: pa.array(kinds, pa.string()),
        LOG_OFFSET_COLUMN: batch.column(OFFSET_COLUMN).take(at),
        COMMIT_TIMESTAMP_COLUMN: batch.column(TIMESTAMP_COLUMN).take(at),
        BEFORE: _structs(rows, befores, struct_types[BEFORE]),
        AFTER: _structs(rows, afters, struct_types[AFTER]),
    }
    return _batch(out, target)


def _structs(rows: pa.StructArray, picks: list[int | None], target: pa.DataType) -> pa.Array:
    taken = rows.take(pa.array(picks, pa.int64()))  # a null index gives a null struct
    fields = [taken.field(i).cast(target.field(i).type) for i in range(target.num_fields)]
    mask = pc.is_null(pa.array(picks, pa.int64()))
    return pa.StructArray.from_arrays(fields, fields=list(target), mask=mask)


class VirtualBatchReader(DataSourceReader):
    """A batch reader of the base table whose batches come out as the virtual table's rows."""

    def __init__(self, base: Any, kind: VirtualTable, columns: Sequence[str], schema: StructType) -> None:
        self.base = base
        self.kind = kind
        self.columns = tuple(columns)
        self.schema_json = schema.json()

    def partitions(self) -> Sequence[InputPartition]:
        return self.base.partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _converted(self.base.read(partition), self.kind, self.columns, self.schema_json)


class VirtualStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream of the base table's changes, as the virtual table's rows."""

    def __init__(self, base: Any, kind: VirtualTable, columns: Sequence[str], schema: StructType) -> None:
        self.base = base
        self.kind = kind
        self.columns = tuple(columns)
        self.schema_json = schema.json()

    def initialOffset(self) -> dict[str, Any]:
        return self.base.initialOffset()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return self.base.latestOffset(start, limit)

    def getDefaultReadLimit(self) -> Any:
        return self.base.getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self.base.prepareForTriggerAvailableNow()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self.base.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _converted(self.base.read(partition), self.kind, self.columns, self.schema_json)

    def commit(self, end: dict[str, Any]) -> None:
        self.base.commit(end)


def _converted(
    batches: Iterator[pa.RecordBatch], kind: VirtualTable, columns: Sequence[str], schema_json: str
) -> Iterator[pa.RecordBatch]:
    import json

    target = arrow_schema_for(StructType.fromJson(json.loads(schema_json)))
    for batch in batches:
        if batch.num_rows:
            yield kind.convert(batch, columns, target)
