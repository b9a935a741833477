"""Batch and streaming writes through the client's writers, one writer per Spark task.

Each task opens its own (idempotent) writer, sends its Arrow batches, flushes, and reports what
it wrote. Nothing is staged: rows are visible once a task's flush returns, so `commit` has nothing
left to do and `abort` cannot take rows back. A retried task or micro-batch may append its rows
again to a log table; upserts and deletes of primary-key tables are idempotent by key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from strom.common.table_descriptor import TableInfo
from strom.spark import bridge
from strom.spark.options import ConnectionOptions, WriteOptions
from strom.spark.sink import SinkPlan, UnsupportedWriteError


@dataclass
class WriteReport(WriterCommitMessage):
    rows: int


def _plan(table: TableInfo, options: WriteOptions, schema: StructType, overwrite: bool) -> SinkPlan:
    if overwrite:
        raise UnsupportedWriteError(
            f"Fluss tables cannot be overwritten (table '{table.table_path}'); write with mode 'append'. "
            "Primary-key tables take upserts and deletes (column '_change_type') instead."
        )
    return SinkPlan.build(table, to_arrow_schema(schema, timezone="UTC"), options)


def write_task(
    connection: ConnectionOptions, plan: SinkPlan, batches: Iterator[pa.RecordBatch]
) -> WriteReport:
    with bridge.table_writer(connection, plan) as writer:
        for batch in batches:
            prepared = plan.prepare(batch)
            if prepared is not None:
                writer.write(*prepared)
        return WriteReport(writer.rows)


class FlussArrowWriter(DataSourceArrowWriter):
    def __init__(
        self,
        connection: ConnectionOptions,
        table: TableInfo,
        options: WriteOptions,
        schema: StructType,
        overwrite: bool,
    ) -> None:
        self.connection = connection
        self.plan = _plan(table, options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_task(self.connection, self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task flushed before reporting: nothing is left to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows already flushed stay; Fluss has no transactions to roll back."""


class FlussStreamArrowWriter(DataSourceStreamArrowWriter):
    def __init__(
        self,
        connection: ConnectionOptions,
        table: TableInfo,
        options: WriteOptions,
        schema: StructType,
        overwrite: bool,
    ) -> None:
        self.connection = connection
        self.plan = _plan(table, options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_task(self.connection, self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows were flushed by the tasks; Spark's commit log records the batch as done."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Flushed rows stay; the batch's retry rewrites them (idempotent for primary-key tables)."""
