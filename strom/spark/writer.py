"""Batch and streaming writes through the client's writers, one writer per Spark task.

Each task opens its own (idempotent) writer, sends its Arrow batches, flushes, and reports what
it wrote. Nothing is staged: rows are visible once a task's flush returns, so `commit` has nothing
left to do and `abort` cannot take rows back. A retried batch write may append its rows again to a
log table; upserts and deletes of primary-key tables are idempotent by key.

Streaming appends to log tables are the exception: tasks stage their rows and the driver writes
each micro-batch exactly once (strom.spark.exactly_once).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from strom.common.table_descriptor import TableInfo
from strom.spark import bridge, exactly_once
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
        raw_options: Mapping[str, str],
    ) -> None:
        self.connection = connection
        self.plan = _plan(table, options, schema, overwrite)
        # Log tables: exactly once, staged in tasks and written by the driver's commit. Primary-key
        # tables: tasks upsert directly, which a retry repeats harmlessly.
        once = not table.has_primary_key and exactly_once.enabled(raw_options)
        self.producer = exactly_once.producer_id(raw_options) if once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        report: WriterCommitMessage
        if self.producer is not None:
            report = exactly_once.stage(self.plan, iterator)
        else:
            report = write_task(self.connection, self.plan, iterator)
        exactly_once.task_crash_point()  # tests: the task dies before it reports
        return report

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log tables: write the staged batch once. Primary-key tables: the tasks flushed already."""
        if self.producer is not None:
            exactly_once.commit_batch(self.connection, self.plan, self.producer, batchId, messages)
        else:
            exactly_once.crash_point(batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log tables: staged rows are dropped, nothing was written. Primary-key tables: flushed
        upserts stay; the batch's retry rewrites them (idempotent by key)."""
