"""The Delta lake writer: the records of one split (one Fluss bucket) into uncommitted Parquet files.

Rows get the system columns and are buffered; every `FLUSH_BYTES` (and at `complete`) the buffer
becomes one Parquet file in the table directory (under ``<key>=<value>/`` for partitioned tables,
without the partition columns, which Delta keeps in its log). No Delta version references the files
until the committer adds them; a writer closed before it completed deletes them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strom.common.partition import parse_partition_name
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.arrow_values import as_array, as_timestamps
from strom.lake.delta.catalog import DeltaLakeCatalog, delta_schema
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

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def bytes_written(self) -> int:
        return sum(f.size for f in self.files)


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
        self._fs, _ = fsspec.core.url_to_fs(self._root, **catalog.warehouse.storage_options)

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
        # safe=False: nanosecond timestamps are cut to Delta's microseconds.
        return table.select(self._file_schema.names).cast(self._file_schema, safe=False)

    def _store(self, rows: pa.Table, change_types: ChangeTypes | None) -> None:
        self._buffer.append(rows)
        self._buffered += rows.nbytes
        if self._buffered >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        rows = pa.concat_tables(self._buffer)
        self._buffer, self._buffered = [], 0
        directory = "/".join(f"{k}={quote(v, safe='')}" for k, v in self._partition)
        name = f"part-{uuid.uuid4()}.parquet"
        relative = f"{directory}/{name}" if directory else name
        uri = f"{self._root}/{relative}"
        _, path = fsspec.core.url_to_fs(uri, **self._catalog.warehouse.storage_options)
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
        )

    def _discard(self) -> None:
        uris = [f.uri for f in self._files]
        self._files = []
        delete_files(uris, self._catalog.warehouse.storage_options)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._buffer = []
            self._discard()
