"""The Delta lake writer: the records of one split (one Fluss bucket) into uncommitted Parquet files.

Rows get the system columns and are buffered; every `FLUSH_BYTES` (and at `complete`) the buffer
becomes one Parquet file in the table directory (under ``<key>=<value>/`` for partitioned tables,
without the partition columns, which Delta keeps in its log). No Delta version references the files
until the committer adds them; a writer closed before it completed deletes them.

Primary-key tables: the split's changes are folded per key (the last change wins) and staged as one
Parquet file under ``_strom_staging/`` (a directory Delta readers and VACUUM leave alone), with
``__strom_delete`` true where the key's last change removes it (-U, -D). The committer merges the
round's staged changes into the table by the key.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strom.common.file_io import load_file_io
from strom.common.partition import parse_partition_name
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.arrow_values import as_array, as_timestamps
from strom.lake.delta.catalog import STAGED_DELETE_COLUMN, DeltaLakeCatalog, delta_schema
from strom.lake.interface import ChangeTypes, RowValues, WriteResult
from strom.lake.system_columns import (
    BUCKET_COLUMN,
    OFFSET_COLUMN,
    SYSTEM_COLUMN_NAMES,
    system_columns,
    user_columns,
)
from strom.lake.warehouse import delete_files
from strom.lake.writer_base import SplitWriter
from strom.record.change_type import ChangeType

__all__ = ["DeltaFile", "DeltaLakeWriter", "DeltaWriteResult"]

# Buffered rows are written as a Parquet file once they hold this many bytes (Arrow, in memory).
FLUSH_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class DeltaFile:
    """One data file as a Delta ``add`` action describes it."""

    # Relative to the table root, URI-encoded as the Delta log stores it.
    path: str
    # Where it is, for deleting it.
    uri: str
    size: int
    partition_values: tuple[tuple[str, str], ...]
    modification_time: int
    stats: str


@dataclass(frozen=True)
class DeltaWriteResult(WriteResult):
    files: tuple[DeltaFile, ...] = ()
    # Primary-key tables: the split's changes folded per key, to be merged by the committer.
    staged: DeltaFile | None = None

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(f.path for f in (*self.files, *([self.staged] if self.staged else [])))

    @property
    def bytes_written(self) -> int:
        return sum(f.size for f in self.files) + (self.staged.size if self.staged else 0)


class DeltaLakeWriter(SplitWriter):
    def __init__(
        self,
        catalog: DeltaLakeCatalog,
        table_info: TableInfo,
        table_bucket: TableBucket,
        partition_name: str | None,
    ) -> None:
        super().__init__()
        self._catalog = catalog
        self._info = table_info
        self._bucket = table_bucket
        self._partition_name = partition_name
        self._root = catalog.uri(table_info.table_path)
        table = catalog.open(table_info.table_path)
        # The table's own column order: columns AlterTable added sit after the system columns there.
        have = pa.schema(table.schema().to_arrow())
        expected = delta_schema(table_info)
        self._schema = pa.schema(
            [expected.field(n) if n in expected.names else have.field(n) for n in have.names]
        )
        keys = list(table_info.partition_keys)
        if keys and partition_name is None:
            raise ValueError(f"table {table_info.table_path} is partitioned: a partition name is needed")
        spec = parse_partition_name(keys, partition_name) if keys and partition_name else None
        self._partition = tuple((k, spec[k]) for k in keys) if spec is not None else ()
        self._file_schema = pa.schema([f for f in self._schema if f.name not in keys])
        self._user_columns = table_info.schema.column_names
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._files: list[DeltaFile] = []
        self._primary_key = list(table_info.primary_key) if table_info.has_primary_key else []
        self._deletes: list[pa.Array] = []
        self._staged: DeltaFile | None = None
        self._fs, _ = load_file_io(self._root, catalog.warehouse.storage_options).parts()

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
        stamps = as_timestamps(timestamps, n, unit="us")
        columns += system_columns(n, self._bucket.bucket, offset_values, stamps)
        table = pa.Table.from_arrays(columns, names=[*self._user_columns, *SYSTEM_COLUMN_NAMES])
        for key, value in self._partition:
            if (
                table.column(key).null_count
                or pc.any(pc.not_equal(table.column(key).cast(pa.string()), value)).as_py()
            ):
                raise ValueError(
                    f"rows of {self._info.table_path} do not belong to partition {self._partition_name!r}"
                )
        # safe=False: nanosecond timestamps are cut to Delta's microseconds. Staged changes of
        # primary-key tables keep the partition columns: the MERGE matches on the whole key.
        schema = self._schema if self._primary_key else self._file_schema
        return table.select(schema.names).cast(schema, safe=False)

    def _store(self, rows: pa.Table, change_types: ChangeTypes | None) -> None:
        self._buffer.append(rows)
        if self._primary_key:
            # Held until `complete`: folding needs the whole split (bound splits accordingly).
            kinds = np.zeros(rows.num_rows, np.int8) if change_types is None else change_types
            kinds = as_array(kinds, rows.num_rows, "change_types").cast(pa.int8())
            removes = pc.is_in(kinds, pa.array([ChangeType.UPDATE_BEFORE, ChangeType.DELETE], pa.int8()))
            self._deletes.append(removes)
            return
        self._buffered += rows.nbytes
        if self._buffered >= FLUSH_BYTES:
            self._flush()

    def _stage(self) -> None:
        """Fold the split's changes per key (the last one wins) into one staged Parquet file."""
        if not self._buffer:
            return
        rows = pa.concat_tables(self._buffer)
        rows = rows.append_column(STAGED_DELETE_COLUMN, pa.chunked_array(self._deletes, pa.bool_()))
        self._buffer, self._deletes = [], []
        position = "__strom_position"
        rows = rows.append_column(position, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        last = rows.group_by(self._primary_key).aggregate([(position, "max")])
        rows = rows.take(last.column(f"{position}_max")).drop_columns([position])
        name = f"_strom_staging/part-{uuid.uuid4()}.parquet"
        uri = f"{self._root}/{name}"
        _, path = load_file_io(uri, self._catalog.warehouse.storage_options).parts()
        self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        pq.write_table(rows, path, filesystem=self._fs)
        self._staged = DeltaFile(
            name, uri, int(self._fs.size(path)), self._partition, int(time.time() * 1000), ""
        )

    def _flush(self) -> None:
        if not self._buffer:
            return
        rows = pa.concat_tables(self._buffer)
        self._buffer, self._buffered = [], 0
        directory = "/".join(f"{k}={quote(v, safe='')}" for k, v in self._partition)
        name = f"part-{uuid.uuid4()}.parquet"
        relative = f"{directory}/{name}" if directory else name
        uri = f"{self._root}/{relative}"
        _, path = load_file_io(uri, self._catalog.warehouse.storage_options).parts()
        self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        pq.write_table(rows, path, filesystem=self._fs)
        stats = {
            "numRecords": rows.num_rows,
            "minValues": {
                BUCKET_COLUMN: self._bucket.bucket,
                OFFSET_COLUMN: pc.min(rows[OFFSET_COLUMN]).as_py(),
            },
            "maxValues": {
                BUCKET_COLUMN: self._bucket.bucket,
                OFFSET_COLUMN: pc.max(rows[OFFSET_COLUMN]).as_py(),
            },
            "nullCount": {BUCKET_COLUMN: 0, OFFSET_COLUMN: 0},
        }
        self._files.append(
            DeltaFile(
                path=quote(relative, safe="/="),
                uri=uri,
                size=int(self._fs.size(path)),
                partition_values=self._partition,
                modification_time=int(time.time() * 1000),
                stats=json.dumps(stats),
            )
        )

    def complete(self) -> DeltaWriteResult:
        self._finish()
        try:
            if self._primary_key:
                self._stage()
            else:
                self._flush()
        except BaseException:
            self._discard()
            raise
        return DeltaWriteResult(
            table_bucket=self._bucket,
            partition_name=self._partition_name,
            record_count=self._written.records,
            end_offset=self._written.end_offset,
            start_offset=self._written.start_offset,
            files=tuple(self._files),
            staged=self._staged,
        )

    def _discard(self) -> None:
        uris = [f.uri for f in self._files] + ([self._staged.uri] if self._staged else [])
        self._files, self._staged = [], None
        delete_files(uris, self._catalog.warehouse.storage_options)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._buffer = []
            self._discard()
