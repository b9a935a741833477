"""The Lance lake writer: the records of one split (one Fluss bucket) into uncommitted fragments.

Rows get the system columns and are buffered; every `FLUSH_BYTES` (and at `complete`) the buffer
becomes Lance fragments with ``lance.fragment.write_fragments``: data files under the dataset's
``data/`` that no version references until the committer appends them. A writer closed before it
completed deletes the files it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.arrow_values import as_array, as_timestamps
from strom.lake.interface import ChangeTypes, RowValues, WriteResult
from strom.lake.lance.catalog import LanceLakeCatalog, delete_data_files
from strom.lake.system_columns import SYSTEM_COLUMN_NAMES, system_columns, user_columns
from strom.lake.writer_base import SplitWriter

__all__ = ["LanceLakeWriter", "LanceWriteResult", "fragment_file_names"]

# Buffered rows are written as fragments once they hold this many bytes (Arrow, in memory).
FLUSH_BYTES = 64 * 1024 * 1024


def fragment_file_names(fragments: tuple[FragmentMetadata, ...]) -> tuple[str, ...]:
    return tuple(f.path for fragment in fragments for f in fragment.files)


@dataclass(frozen=True)
class LanceWriteResult(WriteResult):
    # Lance's fragment descriptions (picklable), not yet in any dataset version.
    fragments: tuple[FragmentMetadata, ...] = ()

    @property
    def file_names(self) -> tuple[str, ...]:
        return fragment_file_names(self.fragments)

    @property
    def bytes_written(self) -> int:
        return sum(f.file_size_bytes or 0 for fragment in self.fragments for f in fragment.files)


class LanceLakeWriter(SplitWriter):
    def __init__(
        self,
        catalog: LanceLakeCatalog,
        table_info: TableInfo,
        table_bucket: TableBucket,
        partition_name: str | None,
    ) -> None:
        super().__init__()
        self._catalog = catalog
        self._info = table_info
        self._bucket = table_bucket
        self._partition_name = partition_name
        self._uri = catalog.uri(table_info.table_path)
        # The dataset's own schema: columns AlterTable added sit after the system columns there.
        self._schema = catalog.open(table_info.table_path).schema
        self._user_columns = table_info.schema.column_names
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._fragments: list[FragmentMetadata] = []

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
        table = pa.Table.from_arrays(columns, names=[*self._user_columns, *SYSTEM_COLUMN_NAMES])
        # safe=False: finer timestamps are cut to the column's unit.
        return table.select(self._schema.names).cast(self._schema, safe=False)

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
        self._fragments += write_fragments(
            rows,
            self._uri,
            schema=self._schema,
            storage_options=self._catalog.warehouse.storage_options or None,
        )

    def complete(self) -> LanceWriteResult:
        self._finish()
        try:
            self._flush()
        except BaseException:
            self._discard()
            raise
        return LanceWriteResult(
            table_bucket=self._bucket,
            partition_name=self._partition_name,
            record_count=self._written.records,
            end_offset=self._written.end_offset,
            start_offset=self._written.start_offset,
            fragments=tuple(self._fragments),
        )

    def _discard(self) -> None:
        names = list(fragment_file_names(tuple(self._fragments)))
        self._fragments = []
        delete_data_files(self._catalog, self._info.table_path, names)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._buffer = []
            self._discard()
