"""Writing Parquet data and position-delete files for an Iceberg table, and describing them.

A file is described by `IcebergFile`: plain values only, so write results pickle cheaply from
executors to the driver, which turns them into pyiceberg `DataFile`s when it commits. Data files
carry the table's field ids (from ``schema_to_pyarrow``) and column metrics computed the way
pyiceberg computes them; position-delete files use the reserved ``file_path``/``pos`` field ids and
are sorted by path, then position, as the spec asks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema as IcebergSchema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

__all__ = [
    "POSITION_DELETE_ARROW_SCHEMA",
    "DataFileWriter",
    "IcebergFile",
    "file_schema",
    "write_position_deletes",
]

# Reserved field ids of position-delete files (Iceberg spec).
DELETE_FILE_PATH_ID = 2147483546
DELETE_POS_ID = 2147483545
_POSITION_DELETE_SCHEMA = IcebergSchema(
    NestedField(DELETE_FILE_PATH_ID, "file_path", StringType(), required=True),
    NestedField(DELETE_POS_ID, "pos", LongType(), required=True),
)
POSITION_DELETE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {"PARQUET:field_id": str(DELETE_FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), False, {"PARQUET:field_id": str(DELETE_POS_ID)}),
    ]
)
DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024  # write.target-file-size-bytes default
DEFAULT_ROW_GROUP_ROWS = 1_048_576  # write.parquet.row-group-limit default
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024  # write.parquet.row-group-size-bytes default


@dataclass(frozen=True)
class IcebergFile:
    """A data or position-delete file written for a table but not yet committed."""

    content: int  # DataFileContent value
    path: str
    partition: tuple[Any, ...]
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    sort_order_id: int | None
    # Serialized column metrics (DataFileStatistics.to_serialized_dict()).
    metrics: dict[str, Any] = field(default_factory=dict)
    # For position deletes: the data files they delete from.
    referenced_data_files: tuple[str, ...] = ()

    @property
    def is_data(self) -> bool:
        return self.content == DataFileContent.DATA

    def to_data_file(self) -> DataFile:
        return DataFile.from_args(
            content=DataFileContent(self.content),
            file_path=self.path,
            file_format=FileFormat.PARQUET,
            partition=Record(*self.partition),
            record_count=self.record_count,
            file_size_in_bytes=self.file_size_in_bytes,
            sort_order_id=self.sort_order_id,
            spec_id=self.spec_id,
            equality_ids=None,
            key_metadata=None,
            **self.metrics,
        )


def file_schema(table: Table) -> pa.Schema:
    """The Arrow schema of the table's data files, with Parquet field ids."""
    return schema_to_pyarrow(table.schema(), include_field_ids=True)


def _writer_options(properties: dict[str, str]) -> dict[str, Any]:
    codec = properties.get("write.parquet.compression-codec", "zstd")
    level = properties.get("write.parquet.compression-level")
    options: dict[str, Any] = {"compression": "none" if codec == "uncompressed" else codec}
    if level is not None:
        options["compression_level"] = int(level)
    return options


def data_location(table: Table, spec: PartitionSpec, partition: tuple[Any, ...], file_name: str) -> str:
    """Where a new data file of `partition` goes (``write.data.path`` or ``<table>/data``)."""
    base = table.properties.get("write.data.path", f"{table.location().rstrip('/')}/data")
    partition_path = spec.partition_to_path(Record(*partition), table.schema()) if spec.fields else ""
    return f"{base}/{partition_path}/{file_name}" if partition_path else f"{base}/{file_name}"


class DataFileWriter:
    """Streams Arrow batches (already in the file schema) into Parquet data files of one partition,
    starting a new file past the target size. Batches are gathered into row groups of the table's
    row-group limits before they are written: one row group per fetched batch made files of many tiny
    row groups and cost most of a tiering round (see docs/performance.md)."""

    def __init__(self, table: Table, partition: tuple[Any, ...], name_prefix: str) -> None:
        self._table = table
        self._spec = table.spec()
        self._schema = file_schema(table)
        self._partition = partition
        self._prefix = name_prefix
        self._target = int(table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
        self._options = _writer_options(table.properties)
        self._stats_plan = compute_statistics_plan(table.schema(), table.properties)
        self._id_mapping = parquet_path_to_id_mapping(table.schema())
        self._count = 0
        self._path: str | None = None
        self._stream: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._rows = 0
        self._bytes = 0
        properties = table.properties
        self._group_rows = int(properties.get("write.parquet.row-group-limit", DEFAULT_ROW_GROUP_ROWS))
        self._group_bytes = int(properties.get("write.parquet.row-group-size-bytes", DEFAULT_ROW_GROUP_BYTES))
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self.files: list[IcebergFile] = []
        self.written_paths: list[str] = []

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        self._rows += table.num_rows
        # Arrow bytes overestimate the compressed file: files end up smaller than the target.
        self._bytes += table.nbytes
        if self._pending_rows >= self._group_rows or self._pending_bytes >= self._group_bytes:
            self._write_pending()
        if self._bytes >= self._target:
            self._finish_file()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            self._open()
        assert self._writer is not None
        group = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._writer.write_table(group, row_group_size=self._group_rows)
        self._pending = []
        self._pending_rows = 0
        self._pending_bytes = 0

    def _open(self) -> None:
        name = f"{self._prefix}-{self._count:05d}-{uuid.uuid4()}.parquet"
        self._count += 1
        self._path = data_location(self._table, self._spec, self._partition, name)
        self.written_paths.append(self._path)
        self._stream = self._table.io.new_output(self._path).create(overwrite=False)
        self._writer = pq.ParquetWriter(
            self._stream, schema=self._schema, store_decimal_as_integer=True, **self._options
        )

    def _finish_file(self) -> None:
        self._write_pending()
        assert self._writer is not None and self._path is not None
        self._writer.close()
        metadata = self._writer.writer.metadata
        self._stream.close()
        size = len(self._table.io.new_input(self._path))
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=metadata,
            stats_columns=self._stats_plan,
            parquet_column_mapping=self._id_mapping,
        )
        metrics = stats.to_serialized_dict()
        self.files.append(
            IcebergFile(
                content=DataFileContent.DATA.value,
                path=self._path,
                partition=self._partition,
                record_count=int(metrics.pop("record_count")),
                file_size_in_bytes=size,
                spec_id=self._spec.spec_id,
                sort_order_id=self._table.sort_order().order_id,
                metrics=metrics,
            )
        )
        self._writer = None
        self._stream = None
        self._path = None
        self._rows = 0
        self._bytes = 0

    def close(self) -> list[IcebergFile]:
        """Finish the open file; the files written."""
        if self._writer is not None or self._pending:
            self._finish_file()
        return list(self.files)

    def discard(self) -> None:
        """Close and delete everything written (a writer that never completed)."""
        self._pending = []
        if self._writer is not None:
            try:
                self._writer.close()
                self._stream.close()
            except Exception:  # best effort: the file is deleted next
                pass
            self._writer = None
        for path in self.written_paths:
            delete_quietly(self._table, path)
        self.written_paths.clear()
        self.files.clear()


def write_position_deletes(
    table: Table, partition: tuple[Any, ...], deletes: pa.Table, name_prefix: str
) -> IcebergFile:
    """One position-delete file from a table of (file_path, pos) rows."""
    rows = deletes.select(["file_path", "pos"]).cast(POSITION_DELETE_ARROW_SCHEMA)
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    spec = table.spec()
    path = data_location(table, spec, partition, f"{name_prefix}-deletes-{uuid.uuid4()}.parquet")
    with table.io.new_output(path).create(overwrite=False) as stream:
        options = _writer_options(table.properties)
        writer = pq.ParquetWriter(stream, schema=POSITION_DELETE_ARROW_SCHEMA, **options)
        writer.write_table(rows)
        writer.close()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=writer.writer.metadata,
        # Full (untruncated) bounds: a delete file aimed at one data file names it exactly.
        stats_columns=compute_statistics_plan(
            _POSITION_DELETE_SCHEMA, {"write.metadata.metrics.default": "full"}
        ),
        parquet_column_mapping=parquet_path_to_id_mapping(_POSITION_DELETE_SCHEMA),
    )
    metrics = stats.to_serialized_dict()
    referenced = tuple(sorted(set(rows.column("file_path").to_pylist())))
    return IcebergFile(
        content=DataFileContent.POSITION_DELETES.value,
        path=path,
        partition=partition,
        record_count=int(metrics.pop("record_count")),
        file_size_in_bytes=len(table.io.new_input(path)),
        spec_id=spec.spec_id,
        sort_order_id=None,
        metrics=metrics,
        referenced_data_files=referenced,
    )


def delete_quietly(table: Table, path: str) -> bool:
    """Delete a file; False when it could not be deleted (e.g. already gone)."""
    try:
        table.io.delete(path)
        return True
    except (FileNotFoundError, OSError):
        return False
