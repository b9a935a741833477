"""What a write sends: Spark's Arrow batches checked and cast to the table's columns.

The `SinkPlan` is built on the driver when Spark asks for a writer, so a DataFrame that does not
fit the table fails before any task runs, with a message naming the columns. Executors then only
reorder and cast columns (and, for primary-key tables, split batches by change kind).

Primary-key tables: every row is an upsert, unless the DataFrame has a ``_change_type`` column:
``+I``/``+U`` rows are upserts, ``-D`` rows delete their key (or are dropped with
``sink.ignore-delete``), ``-U`` rows are dropped because the ``+U`` that follows carries the new
row. Such a batch goes to the client's upsert writer whole, as a changelog, so changes to one key
keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pyarrow as pa
import pyarrow.compute as pc

from strom.common.table_descriptor import TableInfo
from strom.record.change_type import ChangeType
from strom.spark.changelog import change_types_from_labels
from strom.spark.options import CHANGE_TYPE_COLUMN, PARTIAL_UPDATE_COLUMNS, WriteOptions


class SchemaMismatchError(ValueError):
    """The data written does not fit the table's columns."""


class UnsupportedWriteError(ValueError):
    """A kind of write Fluss tables do not support (such as overwrite)."""


class WriteKind(Enum):
    APPEND = "append"  # log tables
    UPSERT = "upsert"  # primary-key tables, every row
    CHANGELOG = "changelog"  # primary-key tables, the kind of each row in CHANGE_TYPE_COLUMN (int8)


@dataclass(frozen=True)
class SinkPlan:
    table: TableInfo
    # Table columns the input provides, in table order (all of them unless a partial update).
    columns: tuple[str, ...]
    # Arrow schema the client expects for those columns.
    arrow_schema: pa.Schema
    has_change_type: bool
    partial_update: tuple[str, ...] | None
    ignore_delete: bool

    @classmethod
    def build(cls, table: TableInfo, input_schema: pa.Schema, options: WriteOptions) -> SinkPlan:
        schema = table.schema
        names = schema.column_names
        given = list(input_schema.names)
        has_change_type = CHANGE_TYPE_COLUMN in given and CHANGE_TYPE_COLUMN not in names
        if has_change_type and not table.has_primary_key:
            raise SchemaMismatchError(
                f"Column '{CHANGE_TYPE_COLUMN}' carries change kinds, which only primary-key tables take; "
                f"'{table.table_path}' is a log table."
            )
        data_columns = [c for c in given if not (has_change_type and c == CHANGE_TYPE_COLUMN)]
        unknown = [c for c in data_columns if c not in names]
        if unknown:
            raise SchemaMismatchError(
                f"Columns {unknown} do not exist in table '{table.table_path}', whose columns are {names}."
            )
        partial = options.partial_update_columns
        if partial is not None:
            if not table.has_primary_key:
                raise SchemaMismatchError(
                    f"'{PARTIAL_UPDATE_COLUMNS}' applies to primary-key tables only; "
                    f"'{table.table_path}' is a log table."
                )
            bad = [c for c in partial if c not in names]
            if bad:
                raise SchemaMismatchError(f"'{PARTIAL_UPDATE_COLUMNS}' names unknown columns {bad}.")
            missing_key = [k for k in table.primary_key if k not in partial]
            if missing_key:
                raise SchemaMismatchError(
                    f"'{PARTIAL_UPDATE_COLUMNS}' must include the primary key; missing {missing_key}."
                )
            absent = [c for c in partial if c not in data_columns]
            if absent:
                raise SchemaMismatchError(f"The data has no columns {absent}, which the partial update sets.")
            columns = [c for c in names if c in partial]
        else:
            missing = [c for c in names if c not in data_columns]
            if table.has_primary_key and missing:
                raise SchemaMismatchError(
                    f"The data lacks columns {missing} of primary-key table '{table.table_path}'. Provide "
                    f"every column, or update some with option '{PARTIAL_UPDATE_COLUMNS}'."
                )
            required = [c for c in missing if not schema.get_column(c).data_type.nullable]
            if required:
                raise SchemaMismatchError(
                    f"The data lacks NOT NULL columns {required} of table '{table.table_path}'."
                )
            columns = names
        target = pa.schema([schema.get_column(c).data_type.to_arrow_field(c) for c in columns])
        for field in target:
            if field.name not in given:
                continue
            source = input_schema.field(field.name).type
            try:
                pa.array([], source).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"Column '{field.name}' is {source} in the data but {field.type} in table "
                    f"'{table.table_path}', and one cannot be cast to the other: {e}"
                ) from None
        return cls(table, tuple(columns), target, has_change_type, partial, options.ignore_delete)

    # ------------------------------------------------------------------ executors

    def _cast(self, batch: pa.RecordBatch, complete: pa.Array | None = None) -> pa.RecordBatch:
        """The plan's columns of `batch` in the table's types. NOT NULL columns must hold values in
        every row, or in the rows `complete` marks (deletes need their key only)."""
        arrays = []
        for field in self.arrow_schema:
            if field.name in batch.schema.names:
                column = batch.column(field.name)
                if not column.type.equals(field.type):
                    try:
                        column = column.cast(field.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        raise SchemaMismatchError(
                            f"Column '{field.name}' has a value that does not fit {field.type}: {e}"
                        ) from None
            else:
                column = pa.nulls(batch.num_rows, field.type)
            if not field.nullable and column.null_count:
                missing = pc.is_null(column)
                if complete is not None and field.name not in self.table.primary_key:
                    missing = pc.and_(missing, complete)
                count = pc.sum(missing.cast(pa.int64())).as_py() or 0
                if count:
                    raise SchemaMismatchError(
                        f"Column '{field.name}' of table '{self.table.table_path}' is NOT NULL, but "
                        f"{count} rows have no value."
                    )
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def prepare(self, batch: pa.RecordBatch) -> tuple[WriteKind, pa.RecordBatch] | None:
        """What to hand the client for one Spark batch (None when nothing is left to write)."""
        if not self.table.has_primary_key:
            return (WriteKind.APPEND, self._cast(batch)) if batch.num_rows else None
        if not self.has_change_type:
            return (WriteKind.UPSERT, self._cast(batch)) if batch.num_rows else None
        kinds = change_types_from_labels(batch.column(CHANGE_TYPE_COLUMN))
        # -U rows are skipped anyway (the +U after them carries the row); ignored deletes too.
        dropped = [int(ChangeType.UPDATE_BEFORE)] + ([int(ChangeType.DELETE)] if self.ignore_delete else [])
        keep = pc.invert(pc.is_in(kinds, value_set=pa.array(dropped, pa.int8())))
        if not pc.all(keep).as_py():
            batch, kinds = batch.filter(keep), kinds.filter(keep)
        if batch.num_rows == 0:
            return None
        rows = self._cast(batch, complete=pc.not_equal(kinds, int(ChangeType.DELETE)))
        return WriteKind.CHANGELOG, rows.append_column(CHANGE_TYPE_COLUMN, kinds)
