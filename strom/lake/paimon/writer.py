"""The Paimon lake writer: the records of one split (one Fluss bucket) into Paimon data files.

Rows get the system columns (``__bucket``, ``__offset``, ``__timestamp``) and go to pypaimon's
table write, which routes them to their partition and bucket:

* Log tables are append tables; every row is appended. Bucket-unaware ones (no bucket key) write
  to Paimon bucket 0 as Fluss does, keeping the Fluss bucket in ``__bucket``.
* Primary-key tables also get ``__row_kind`` (+I, -U, +U, -D from the change type), so pypaimon
  writes each change with its row kind and sequence number; reading merges them by key (the last
  change wins, retracts remove the key). The retract counts of the new files are then fixed
  (see `strom.lake.paimon.retracts`).

When the split completes, every file must sit in the Fluss bucket's Paimon bucket (and partition):
Fluss buckets Paimon-format tables with Paimon's bucket function, so anything else means the table
was not bucketed for Paimon, and the files are deleted instead of committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pypaimon.schema.data_types import PyarrowFieldParser
from pypaimon.table.bucket_mode import BucketMode
from pypaimon.table.file_store_table import FileStoreTable
from pypaimon.write.commit_message import CommitMessage
from pypaimon.write.file_store_commit import FileStoreCommit
from pypaimon.write.table_write import BatchTableWrite

from strom.common.partition import parse_partition_name
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.arrow_values import as_array, as_timestamps
from strom.lake.interface import ChangeTypes, RowValues, WriteResult
from strom.lake.offsets import FLUSS_LAKE_TIERING_COMMIT_USER
from strom.lake.paimon.retracts import record_retract_counts
from strom.lake.paimon.schema import ROW_KIND_COLUMN
from strom.lake.system_columns import SYSTEM_COLUMN_NAMES, system_columns, user_columns
from strom.lake.writer_base import SplitWriter
from strom.record.change_type import ChangeType

__all__ = ["PaimonLakeWriter", "PaimonWriteResult", "discard_messages", "message_file_names"]

# Paimon row kind text per Fluss change type (indexed by ChangeType value).
_ROW_KINDS = np.array(["+I", "+I", "-U", "+U", "-D"], dtype=object)
assert len(_ROW_KINDS) == len(ChangeType)


@dataclass(frozen=True)
class PaimonWriteResult(WriteResult):
    # pypaimon's commit messages (picklable dataclasses naming the new files).
    messages: tuple[CommitMessage, ...] = ()
    # The latest snapshot when the writer started; its sequence numbers continue from there.
    base_snapshot_id: int | None = None

    @property
    def file_names(self) -> tuple[str, ...]:
        return message_file_names(self.messages)

    @property
    def bytes_written(self) -> int:
        return sum(f.file_size for m in self.messages for f in [*m.new_files, *m.changelog_files])


def message_file_names(messages: Sequence[CommitMessage]) -> tuple[str, ...]:
    return tuple(f.file_name for m in messages for f in [*m.new_files, *m.changelog_files])


def discard_messages(table: FileStoreTable, messages: Sequence[CommitMessage]) -> None:
    """Delete the files of commit messages that were never committed."""
    if not messages:
        return
    commit = FileStoreCommit(table.new_snapshot_commit(), table, FLUSS_LAKE_TIERING_COMMIT_USER)
    try:
        commit.abort(list(messages))
    finally:
        commit.close()


def _row_kinds(change_types: ChangeTypes | None, n: int) -> pa.Array:
    if change_types is None:
        return pa.array(np.full(n, "+I", dtype=object), type=pa.string())
    kinds = as_array(change_types, n, "change_types").to_numpy(zero_copy_only=False).astype(np.int64)
    if n and (kinds.min() < 0 or kinds.max() >= len(_ROW_KINDS)):
        raise ValueError(f"unknown change types in {sorted(set(kinds.tolist()))}")
    return pa.array(_ROW_KINDS[kinds], type=pa.string())


def _partition_text(value: Any) -> str:
    """A Paimon partition value as Fluss spells it in partition names."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


class PaimonLakeWriter(SplitWriter):
    def __init__(
        self,
        table: FileStoreTable,
        table_info: TableInfo,
        table_bucket: TableBucket,
        partition_name: str | None,
    ) -> None:
        super().__init__()
        self._table = table
        self._info = table_info
        self._bucket = table_bucket
        self._partition_name = partition_name
        latest = table.snapshot_manager().get_latest_snapshot()
        self._base_snapshot_id = latest.id if latest is not None else None
        self._schema = PyarrowFieldParser.from_paimon_schema(table.table_schema.fields)
        self._user_columns = table_info.schema.column_names
        self._primary_key = table_info.has_primary_key
        self._unaware = table.bucket_mode() == BucketMode.BUCKET_UNAWARE
        self._expected_partition = self._partition_values(partition_name)
        self._write = BatchTableWrite(table, FLUSS_LAKE_TIERING_COMMIT_USER)

    def _partition_values(self, partition_name: str | None) -> tuple[str, ...]:
        keys = self._info.partition_keys
        if not keys:
            return ()
        if partition_name is None:
            raise ValueError(f"table {self._info.table_path} is partitioned: a partition name is needed")
        spec = parse_partition_name(keys, partition_name)
        return tuple(spec[k] for k in keys)

    # -- writing -------------------------------------------------------------------------------

    def _store(self, rows: pa.Table, change_types: ChangeTypes | None) -> None:
        self._write.write_arrow(rows)

    def _lake_rows(
        self,
        batch: pa.RecordBatch | pa.Table,
        change_types: ChangeTypes | None,
        offsets: RowValues,
        timestamps: RowValues,
    ) -> pa.Table:
        n = batch.num_rows
        columns = user_columns(batch, self._user_columns, self._info.table_path)
        offset_values = as_array(offsets, n, "offsets").cast(pa.int64())
        columns += system_columns(n, self._bucket.bucket, offset_values, as_timestamps(timestamps, n))
        names = [*self._user_columns, *SYSTEM_COLUMN_NAMES]
        if self._primary_key:
            # Log tables only append; change types carry nothing for them.
            columns.append(_row_kinds(change_types, n))
            names.append(ROW_KIND_COLUMN)
        # safe=False: finer timestamps and times are cut to the Paimon column's precision.
        return pa.Table.from_arrays(columns, names=names).cast(self._schema, safe=False)

    # -- completing -----------------------------------------------------------------------------

    def complete(self) -> PaimonWriteResult:
        self._finish()
        messages: list[CommitMessage] = []
        try:
            messages = [m for m in self._write.prepare_commit() if not m.is_empty()]
            self._write.close()
            self._check_placement(messages)
            if self._primary_key:
                record_retract_counts(self._table, messages)
        except BaseException:
            self._write.abort()
            discard_messages(self._table, messages)
            raise
        return PaimonWriteResult(
            table_bucket=self._bucket,
            partition_name=self._partition_name,
            record_count=self._written.records,
            end_offset=self._written.end_offset,
            start_offset=self._written.start_offset,
            messages=tuple(messages),
            base_snapshot_id=self._base_snapshot_id,
        )

    def _check_placement(self, messages: Sequence[CommitMessage]) -> None:
        wanted_bucket = 0 if self._unaware else self._bucket.bucket
        for message in messages:
            partition = tuple(_partition_text(v) for v in message.partition)
            if partition != self._expected_partition:
                raise ValueError(
                    f"rows of {self._info.table_path} partition {self._partition_name!r} bucket "
                    f"{self._bucket.bucket} belong to Paimon partition {partition}"
                )
            if message.bucket != wanted_bucket:
                raise ValueError(
                    f"rows of {self._info.table_path} bucket {self._bucket.bucket} hash to Paimon bucket "
                    f"{message.bucket} of {self._info.bucket_keys}; the table is not bucketed with "
                    "Paimon's bucket function."
                )

    # -- cleanup --------------------------------------------------------------------------------

    def close(self) -> None:
        if not self._done:
            # Deletes what was written; closing would flush the buffer into new files instead.
            self._done = True
            self._write.abort()
