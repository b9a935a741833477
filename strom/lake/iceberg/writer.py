"""The Iceberg lake writer: the records of one split (one Fluss bucket) into Iceberg files.

* Log tables: every row is appended, streamed into Parquet files of the bucket's partition.
* Primary-key tables (merge-on-read): the split's changes are folded per key (the last change of a
  key wins), the surviving +I/+U rows are appended as data, and every key the split touched that
  already has a live row in the lake gets that row removed by a position delete. The live rows are
  found by reading the key columns of the partition's live data files as of the snapshot the
  writer started from; the committer refuses the results if those files changed meanwhile.

Rows are checked to belong to the bucket: for tables with a bucket key, Iceberg's bucket transform
of the key must give the Fluss bucket (Fluss buckets Iceberg-format tables with Iceberg's
function), otherwise the files would sit in the wrong Iceberg partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg_core import transform as core_transform

from strom.common.partition import parse_partition_name
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.iceberg.files import DataFileWriter, IcebergFile, delete_quietly, write_position_deletes
from strom.lake.iceberg.live_files import FILE_COLUMN, POS_COLUMN, load_partition_files
from strom.lake.interface import ChangeTypes, RowValues, WriteResult
from strom.lake.system_columns import BUCKET_COLUMN, SYSTEM_COLUMN_NAMES, system_columns, user_columns
from strom.lake.writer_base import SplitWriter
from strom.record.change_type import ChangeType

__all__ = ["IcebergLakeWriter", "IcebergWriteResult"]

_UPSERT_KINDS = np.array([ChangeType.APPEND_ONLY, ChangeType.INSERT, ChangeType.UPDATE_AFTER], dtype=np.int8)
_ROW_COLUMN = "__row"


@dataclass(frozen=True)
class IcebergWriteResult(WriteResult):
    data_files: tuple[IcebergFile, ...] = ()
    delete_files: tuple[IcebergFile, ...] = ()
    # The snapshot whose live rows the position deletes were computed against.
    base_snapshot_id: int | None = None

    @property
    def files(self) -> tuple[IcebergFile, ...]:
        return self.data_files + self.delete_files

    @property
    def bytes_written(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


def partition_values(
    table: Table, table_info: TableInfo, bucket: int, partition_name: str | None
) -> tuple[Any, ...]:
    """The Iceberg partition tuple of a Fluss bucket (and partition)."""
    spec_values = parse_partition_name(table_info.partition_keys, partition_name) if partition_name else {}
    schema = table.schema()
    values: list[Any] = []
    for field in table.spec().fields:
        source = schema.find_column_name(field.source_id)
        if isinstance(field.transform, BucketTransform) or source == BUCKET_COLUMN:
            values.append(bucket)
        elif isinstance(field.transform, IdentityTransform) and source is not None and source in spec_values:
            values.append(spec_values[source])
        else:
            raise ValueError(
                f"Iceberg table {table.name()} has partition field {field} that Strom does not write; "
                "was it changed outside Fluss?"
            )
    return tuple(values)


def _as_int64(values: RowValues, n: int, what: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    array = values if isinstance(values, pa.Array) else pa.array(np.asarray(values, dtype=np.int64))
    if len(array) != n:
        raise ValueError(f"{what} has {len(array)} values for {n} rows")
    return array.cast(pa.int64())


def _as_timestamps(values: RowValues, n: int) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array) and pa.types.is_timestamp(values.type):
        if len(values) != n:
            raise ValueError(f"timestamps has {len(values)} values for {n} rows")
        return values.cast(pa.timestamp("us", tz="UTC"))
    millis = _as_int64(values, n, "timestamps")
    return pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))


def _as_change_types(values: ChangeTypes, n: int) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    array = values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array) else np.asarray(values)
    if len(array) != n:
        raise ValueError(f"change_types has {len(array)} values for {n} rows")
    return array.astype(np.int8, copy=False)


class IcebergLakeWriter(SplitWriter):
    def __init__(
        self, table: Table, table_info: TableInfo, table_bucket: TableBucket, partition_name: str | None
    ) -> None:
        super().__init__()
        self._table = table
        self._info = table_info
        self._bucket = table_bucket
        self._partition_name = partition_name
        self._partition = partition_values(table, table_info, table_bucket.bucket, partition_name)
        self._prefix = f"{uuid.uuid4().hex[:12]}-b{table_bucket.bucket}"
        self._files = DataFileWriter(table, self._partition, self._prefix)
        self._schema = self._files.schema
        self._user_columns = table_info.schema.column_names
        self._primary_key = table_info.primary_key
        self._bucket_key = table_info.bucket_keys[0] if table_info.bucket_keys else None
        # Primary-key tables fold the whole split, so their rows are kept until complete().
        self._pending: list[pa.Table] = []
        self._pending_kinds: list[np.ndarray] = []
        self._extra_paths: list[str] = []

    # -- writing -------------------------------------------------------------------------------

    def _store(self, rows: pa.Table, change_types: ChangeTypes | None) -> None:
        n = rows.num_rows
        if self._primary_key:
            kinds = (
                np.full(n, ChangeType.INSERT, dtype=np.int8)
                if change_types is None
                else _as_change_types(change_types, n)
            )
            self._pending.append(rows)
            self._pending_kinds.append(kinds)
        else:
            # Log tables only append (+A); change types carry nothing for them.
            self._files.write(rows)

    def _lake_rows(
        self,
        batch: pa.RecordBatch | pa.Table,
        change_types: ChangeTypes | None,
        offsets: RowValues,
        timestamps: RowValues,
    ) -> pa.Table:
        n = batch.num_rows
        columns = user_columns(batch, self._user_columns, self._info.table_path)
        offset_values = _as_int64(offsets, n, "offsets")
        columns += system_columns(n, self._bucket.bucket, offset_values, _as_timestamps(timestamps, n))
        names = [*self._user_columns, *SYSTEM_COLUMN_NAMES]
        # safe=False: timestamps with nanoseconds are cut to Iceberg's microseconds.
        rows = pa.Table.from_arrays(columns, names=names).cast(self._schema, safe=False)
        self._check_bucket(rows)
        return rows

    def _check_bucket(self, rows: pa.Table) -> None:
        if self._bucket_key is None:
            return
        n = self._info.bucket_count
        keys = rows.column(self._bucket_key)
        buckets = pa.chunked_array([core_transform.bucket(chunk, n) for chunk in keys.chunks])
        wrong = pc.sum(pc.not_equal(buckets, self._bucket.bucket)).as_py() or 0
        if wrong:
            raise ValueError(
                f"{wrong} rows of {self._info.table_path} bucket {self._bucket.bucket} hash to another "
                f"Iceberg bucket of {self._bucket_key}; the table is not bucketed with Iceberg's "
                "bucket function."
            )

    # -- completing -----------------------------------------------------------------------------

    def complete(self) -> IcebergWriteResult:
        self._finish()
        delete_files: tuple[IcebergFile, ...] = ()
        base_snapshot = None
        try:
            if self._pending:
                delete_files, base_snapshot = self._complete_upserts()
            data_files = tuple(self._files.close())
        except BaseException:
            self._discard()
            raise
        return IcebergWriteResult(
            table_bucket=self._bucket,
            partition_name=self._partition_name,
            record_count=self._written.records,
            end_offset=self._written.end_offset,
            start_offset=self._written.start_offset,
            data_files=data_files,
            delete_files=delete_files,
            base_snapshot_id=base_snapshot,
        )

    def _complete_upserts(self) -> tuple[tuple[IcebergFile, ...], int | None]:
        rows = pa.concat_tables(self._pending)
        kinds = np.concatenate(self._pending_kinds)
        self._pending, self._pending_kinds = [], []
        pk = self._primary_key
        # The last change of each key wins; everything before it in the split is superseded.
        index = rows.select(pk).append_column(_ROW_COLUMN, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        last = index.group_by(pk, use_threads=False).aggregate([(_ROW_COLUMN, "max")])
        last_rows = np.sort(last.column(f"{_ROW_COLUMN}_max").to_numpy())
        upserts = last_rows[np.isin(kinds[last_rows], _UPSERT_KINDS)]
        self._files.write(rows.take(pa.array(upserts)))
        touched = rows.select(pk).take(pa.array(last_rows))
        return self._delete_old_versions(touched)

    def _delete_old_versions(self, touched: pa.Table) -> tuple[tuple[IcebergFile, ...], int | None]:
        """Position deletes for the live lake rows of the touched keys."""
        current = self._table.current_snapshot()
        if current is None:
            return (), None
        files = load_partition_files(self._table, self._partition, current)
        if not files.data_files:
            return (), current.snapshot_id
        pk = self._primary_key
        live = files.read(self._table, columns=pk)
        keys = live.select(pk).cast(touched.schema)
        live = pa.Table.from_arrays(
            [*keys.columns, live.column(FILE_COLUMN), live.column(POS_COLUMN)],
            names=[*pk, FILE_COLUMN, POS_COLUMN],
        )
        hits = live.join(touched, keys=pk, join_type="left semi", use_threads=False)
        if hits.num_rows == 0:
            return (), current.snapshot_id
        deletes = pa.table({"file_path": hits.column(FILE_COLUMN), "pos": hits.column(POS_COLUMN)})
        delete_file = write_position_deletes(self._table, self._partition, deletes, self._prefix)
        self._extra_paths.append(delete_file.path)
        return (delete_file,), current.snapshot_id

    # -- cleanup --------------------------------------------------------------------------------

    def _discard(self) -> None:
        self._files.discard()
        for path in self._extra_paths:
            delete_quietly(self._table, path)
        self._extra_paths.clear()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._discard()
        self._pending, self._pending_kinds = [], []


def result_paths(results: Sequence[WriteResult]) -> list[str]:
    """Every file path named by Iceberg write results."""
    return [f.path for r in results if isinstance(r, IcebergWriteResult) for f in r.files]
