"""The connector's only door to the Strom client: connections, planning calls, scans and writers.

Spark calls the data source from plain threads, in driver-side planner processes and in executor
workers; the client is asyncio. Each process keeps one `SyncConnection` (the client's synchronous
facade: an event loop on a daemon thread) per cluster, so the many short calls of a Python worker
reuse metadata and network connections (Spark reuses worker processes between tasks). Client
objects are only touched from coroutines run on that loop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa

from strom.client.admin import Admin
from strom.client.scanner.filter import Filter, col
from strom.client.scanner.log_scanner import LogScanner
from strom.client.scanner.scan_records import ScanBatch
from strom.client.sync import SyncConnection
from strom.client.table import Table
from strom.common.errors import FlussError
from strom.common.predicate import Compound, CompoundFunction, Leaf, LeafFunction, Predicate
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.record.change_type import ChangeType
from strom.spark.options import CHANGE_TYPE_COLUMN, ConnectionOptions
from strom.spark.read_splits import BucketRange, ReadSpec
from strom.spark.sink import SinkPlan, WriteKind

T = TypeVar("T")

# How long one poll waits for fetched data before asking again.
POLL_TIMEOUT_MS = 1000

_lock = threading.Lock()
_pid = os.getpid()
_connections: dict[tuple[str, tuple[tuple[str, str], ...]], SyncConnection] = {}


def connection(options: ConnectionOptions) -> SyncConnection:
    """This process's connection to the cluster `options` name (opened on first use)."""
    global _pid
    key = (options.bootstrap_servers, options.client)
    with _lock:
        if _pid != os.getpid():
            # A forked process inherits the dict but not the loop threads behind it.
            _connections.clear()
            _pid = os.getpid()
        found = _connections.get(key)
        if found is None:
            found = _connections[key] = SyncConnection(options.client_config())
        return found


async def _await(work: Awaitable[T]) -> T:
    return await work


# ---------------------------------------------------------------------------------- metadata


def table_info(options: ConnectionOptions) -> TableInfo:
    """The table's current TableInfo; a missing table raises the cluster's error."""
    return connection(options).get_table(options.table_path, refresh=True).info


def run_admin(options: ConnectionOptions, fn: Callable[[Admin], Awaitable[T]]) -> T:
    sync = connection(options)
    return sync.run(_await(fn(sync.connection.get_admin())))


def supports_filter() -> bool:
    return True


def supports_snapshots() -> bool:
    """Whether this client can read KV snapshots (primary-key tables then need no full changelog)."""
    return True


# ---------------------------------------------------------------------------------- reads

_COMPARE: dict[LeafFunction, Callable[[Any, Any], Filter]] = {
    LeafFunction.EQUAL: lambda c, v: c == v,
    LeafFunction.NOT_EQUAL: lambda c, v: c != v,
    LeafFunction.LESS_THAN: lambda c, v: c < v,
    LeafFunction.LESS_OR_EQUAL: lambda c, v: c <= v,
    LeafFunction.GREATER_THAN: lambda c, v: c > v,
    LeafFunction.GREATER_OR_EQUAL: lambda c, v: c >= v,
    LeafFunction.STARTS_WITH: lambda c, v: c.starts_with(v),
    LeafFunction.ENDS_WITH: lambda c, v: c.ends_with(v),
    LeafFunction.CONTAINS: lambda c, v: c.contains(v),
}


def client_filter(predicate: Predicate, schema: Schema) -> Filter:
    """The client's filter expression for a predicate over column ids."""
    if isinstance(predicate, Compound):
        parts = [client_filter(c, schema) for c in predicate.children]
        out = parts[0]
        for part in parts[1:]:
            out = out & part if predicate.function == CompoundFunction.AND else out | part
        return out
    assert isinstance(predicate, Leaf)
    name = next(c.name for c in schema.columns if c.column_id == predicate.field_id)
    column = col(name)
    f = predicate.function
    if f == LeafFunction.IS_NULL:
        return column.is_null()
    if f == LeafFunction.IS_NOT_NULL:
        return column.is_not_null()
    if f == LeafFunction.IN:
        return column.is_in(predicate.literals)
    if f == LeafFunction.NOT_IN:
        return column.not_in(predicate.literals)
    return _COMPARE[f](column, predicate.literals[0])


def scan(spec: ReadSpec, ranges: Sequence[BucketRange]) -> Iterator[ScanBatch]:
    """The log records of `ranges` (each ``[start, end)``), fetched together, batch by batch.

    Batches of different buckets interleave; each bucket's come in offset order.
    """
    ranges = [r for r in ranges if r.end > r.start]
    if not ranges:
        return
    sync = connection(ConnectionOptions(spec.bootstrap_servers, spec.table.table_path, spec.client_options))
    # The planned TableInfo, not a fresh one: every task of a read sees the same schema.
    table = Table(sync.connection, spec.table)

    async def open_scanner() -> LogScanner:
        builder = table.new_scan().project_by_name(list(spec.columns))
        if spec.predicate is not None:
            builder = builder.filter(client_filter(spec.predicate, spec.table.schema))
        scanner = builder.create_log_scanner()
        for r in ranges:
            if r.partition_id is None:
                scanner.subscribe(r.bucket, r.start, r.end)
            else:
                scanner.subscribe_partition(r.partition_id, r.bucket, r.start, r.end)
        return scanner

    scanner = sync.run(open_scanner())
    try:
        while not scanner.finished:
            yield from sync.run(scanner.poll_batches(POLL_TIMEOUT_MS))
    finally:
        sync.run(scanner.close())


def read_snapshot(spec: ReadSpec, r: BucketRange) -> Iterator[ScanBatch]:
    """The rows of the KV snapshot planned for `r`, as inserts; the changelog from `r.start` follows."""
    sync = connection(ConnectionOptions(spec.bootstrap_servers, spec.table.table_path, spec.client_options))
    offset, batches = sync.read_bucket_snapshot(
        spec.table.table_path, r.bucket, r.partition_id, r.snapshot_id, projection=list(spec.columns)
    )
    if offset != r.start:
        batches.close()
        raise FlussError(
            f"KV snapshot {r.snapshot_id} of bucket {r.bucket} of '{spec.table.table_path}' is gone "
            "(snapshot retention moved on since the read was planned); load the table again"
        )
    bucket = TableBucket(spec.table.table_id, r.partition_id, r.bucket)
    for batch in batches:
        yield ScanBatch(bucket, batch, -1, -1, bytes([ChangeType.INSERT]) * batch.num_rows)


# ---------------------------------------------------------------------------------- writes


class TableWriter:
    """One task's writer: the client's append writer (log tables) or upsert writer (primary-key
    tables; a partial one when the plan updates some columns)."""

    def __init__(self, sync: SyncConnection, table: Table, plan: SinkPlan) -> None:
        self.sync = sync
        self.table = table
        self.plan = plan
        self.rows = 0
        self._writer: Any = None

    def write(self, kind: WriteKind, rows: pa.RecordBatch) -> None:
        self.sync.run(self._write(kind, rows))
        self.rows += rows.num_rows

    def _create(self) -> Any:
        if not self.table.has_primary_key:
            return self.table.new_append().create_writer()
        upsert = self.table.new_upsert()
        if self.plan.partial_update is not None:
            upsert = upsert.partial_update_by_name(list(self.plan.columns))
        return upsert.create_writer()

    async def _write(self, kind: WriteKind, rows: pa.RecordBatch) -> None:
        if self._writer is None:
            self._writer = self._create()
        if kind is WriteKind.CHANGELOG:
            self._writer.write_arrow_batch(rows, change_type_column=CHANGE_TYPE_COLUMN)
        else:
            self._writer.write_arrow_batch(rows)
        # Stay within the client's buffer memory rather than queueing the whole partition.
        await self._writer.wait_for_capacity()

    def flush(self) -> None:
        if self._writer is not None:
            self.sync.run(self._writer.flush())


@contextmanager
def table_writer(options: ConnectionOptions, plan: SinkPlan) -> Iterator[TableWriter]:
    sync = connection(options)
    writer = TableWriter(sync, Table(sync.connection, plan.table), plan)
    yield writer
    writer.flush()
