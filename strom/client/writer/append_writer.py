"""Appending to log tables: ``table.new_append().create_writer()``.

    writer = table.new_append().create_writer()
    writer.append({"id": 1, "name": "a"})           # a row: dict, tuple or list
    writer.write_arrow(arrow_table)                 # or write_arrow_batch / write_pandas
    await writer.flush()                            # everything above acknowledged

Every write call queues its rows and returns a `WriteResult` at once; await it for that call's
acknowledgement, or ``flush()`` for everything.

Arrow input is checked against the table schema, split by partition (each row goes to the partition
its partition columns name; the partition must exist) and by bucket (bucket-key hash, column-wise),
then cut into pieces of at most ``client.writer.batch-size`` that are queued as zero-copy slices.

Rows are checked one by one and collected per column in a staging buffer, which becomes one Arrow
batch and takes the Arrow path when it holds a batch's worth of data, after `STAGING_LINGER`, or when
the writer flushes or writes Arrow (so rows and Arrow keep their order). The only Python work per row
is the check and the append to the column lists; partitions and bucket hashes are computed column-wise.

Producers that outpace the cluster can ``await writer.wait_for_capacity()`` between writes to stay
within ``client.writer.buffer.memory-size``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from strom.client.writer.arrow_input import conform_batch, conform_table, table_from_pandas
from strom.client.writer.bucket_assigner import HashBucketAssigner
from strom.client.writer.partitioner import Partitioner
from strom.client.writer.queued_writer import QueuedWriter
from strom.client.writer.row_buffer import RowBuffer, RowLayout
from strom.client.writer.write_batch import BatchFormat
from strom.client.writer.write_result import WriteResult
from strom.client.writer.writer_client import WriterClient
from strom.common.errors import NonPrimaryKeyTableError
from strom.common.table_path import PhysicalTablePath

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["AppendWriter", "TableAppend"]

# Longest rows wait in the staging buffer before they are routed (they then linger in their batch).
STAGING_LINGER = 0.005
# Most rows staged at once, whatever their size.
STAGING_MAX_ROWS = 50_000
_NO_ROWS = np.zeros(0, dtype=np.int64)


class TableAppend:
    """``table.new_append()``: the entry point for append writers of a log table."""

    def __init__(self, table: Table) -> None:
        if table.has_primary_key:
            raise NonPrimaryKeyTableError(
                f"Table '{table.path}' has a primary key; append writers are for log tables "
                "(use an upsert writer)."
            )
        self.table = table

    def create_writer(self) -> AppendWriter:
        return AppendWriter(self.table)


class _Staged:
    """Rows appended since the last routing. Once routed, `futures` holds the futures of the batches
    they went into and `row_batch` the index into `futures` of every row."""

    __slots__ = ("futures", "routed", "row_batch", "rows", "timer")

    def __init__(self, timer: asyncio.TimerHandle) -> None:
        self.rows = RowBuffer()
        self.routed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.routed.add_done_callback(_retrieve)
        self.futures: list[asyncio.Future[int]] = []
        self.row_batch: np.ndarray | None = None
        self.timer = timer


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # failures are reported by flush() and by awaiting; never as "never retrieved"


class _StagedRowResult(WriteResult):
    """The result of one appended row: the batch it lands in is only known once its rows are routed."""

    __slots__ = ("_index", "_staged")

    def __init__(self, staged: _Staged, index: int) -> None:
        super().__init__(())
        self._staged = staged
        self._index = index

    def _batch_future(self) -> asyncio.Future[int] | None:
        staged = self._staged
        if staged.row_batch is None:
            return None
        return staged.futures[int(staged.row_batch[self._index])]

    def done(self) -> bool:
        routed = self._staged.routed
        if not routed.done():
            return False
        future = self._batch_future()
        return future is None or future.done()

    def exception(self) -> BaseException | None:
        routed = self._staged.routed
        if routed.done() and routed.exception() is not None:
            return routed.exception()
        future = self._batch_future()
        if future is not None and future.done() and not future.cancelled():
            return future.exception()
        return None

    async def wait(self) -> None:
        await asyncio.shield(self._staged.routed)
        future = self._batch_future()
        if future is not None:
            await asyncio.shield(future)

    def __repr__(self) -> str:
        return f"WriteResult(row {self._index} of a staged group, {'done' if self.done() else 'pending'})"


class AppendWriter(QueuedWriter):
    def __init__(self, table: Table) -> None:
        super().__init__()
        info = table.info
        self.table = table
        self.format = BatchFormat.of(info)
        self.arrow_schema = self.format.arrow_schema
        self._layout = RowLayout(info.schema, self.arrow_schema)
        self._num_buckets = info.bucket_count
        self._path = PhysicalTablePath(info.table_path)
        self._partitioner = (
            Partitioner(info.schema.column_names, info.schema.row_type, info.partition_keys)
            if info.is_partitioned
            else None
        )
        self._partition_indexes = self._partitioner.indexes if self._partitioner is not None else ()
        self._hash = HashBucketAssigner(info, self.arrow_schema) if info.has_bucket_key else None
        self._client: WriterClient = table.connection.writer_client
        self._client.register(self)
        self._batch_size = table.connection.config.writer_batch_size
        self._paths: dict[str, PhysicalTablePath] = {}
        self._staged: _Staged | None = None
        self._stage_rows = max(1, min(STAGING_MAX_ROWS, self._batch_size // self._layout.estimated_row_size))

    # ------------------------------------------------------------------ rows

    def append(self, row: Mapping[str, Any] | Sequence[Any]) -> WriteResult:
        """Queue one row (a dict by column name, or a tuple/list in column order)."""
        values = self._layout.values(row)
        for i in self._partition_indexes:
            if values[i] is None:
                key = self._layout.names[i]
                raise ValueError(f"Partition value shouldn't be null (partition key '{key}').")
        staged = self._staged
        if staged is None:
            timer = asyncio.get_running_loop().call_later(STAGING_LINGER, self.route_staged)
            staged = self._staged = _Staged(timer)
        rows = staged.rows.rows
        result = _StagedRowResult(staged, len(rows))
        rows.append(values)
        if len(rows) >= self._stage_rows:
            self.route_staged()
        return result

    def route_staged(self) -> None:
        """Turn the staged rows into one Arrow batch and queue it like Arrow input."""
        staged, self._staged = self._staged, None
        if staged is None:
            return
        staged.timer.cancel()
        try:
            batch = staged.rows.to_record_batch(self.arrow_schema)
            staged.rows = RowBuffer()  # results may outlive the routing; the Python rows need not
            # Stage about a batch's worth of rows next time, judged by the rows seen so far.
            row_size = max(1, batch.nbytes // max(1, batch.num_rows))
            self._stage_rows = max(1, min(STAGING_MAX_ROWS, self._batch_size // row_size))
            row_batch = np.zeros(batch.num_rows, dtype=np.int32)
            staged.futures = self._write(batch, rows_round_robin=True, row_batch=row_batch)
            staged.row_batch = row_batch
        except Exception as e:  # values the per-row checks let through, a closed writer...
            self._errors.append(e)
            staged.routed.set_exception(e)
            return
        staged.routed.set_result(None)

    # ------------------------------------------------------------------ Arrow and pandas

    def write_arrow_batch(self, batch: pa.RecordBatch) -> WriteResult:
        """Queue an Arrow RecordBatch (columns matched by name, cast to the table's types)."""
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"write_arrow_batch takes a pyarrow.RecordBatch, not {type(batch).__name__}")
        conformed = conform_batch(batch, self.arrow_schema)
        self.route_staged()  # earlier rows go first
        return WriteResult(self._write(conformed))

    def write_arrow(self, table: pa.Table) -> WriteResult:
        """Queue an Arrow Table (columns matched by name, cast to the table's types)."""
        if isinstance(table, pa.RecordBatch):
            return self.write_arrow_batch(table)
        if not isinstance(table, pa.Table):
            raise TypeError(f"write_arrow takes a pyarrow.Table, not {type(table).__name__}")
        conformed = conform_table(table, self.arrow_schema)
        self.route_staged()
        return WriteResult([f for b in conformed.to_batches() if b.num_rows for f in self._write(b)])

    def write_pandas(self, df: Any) -> WriteResult:
        """Queue a pandas DataFrame (its index is not written)."""
        conformed = table_from_pandas(df, self.arrow_schema)
        self.route_staged()
        return WriteResult([f for b in conformed.to_batches() if b.num_rows for f in self._write(b)])

    # ------------------------------------------------------------------ routing

    def _write(
        self, batch: pa.RecordBatch, rows_round_robin: bool = False, row_batch: np.ndarray | None = None
    ) -> list[asyncio.Future[int]]:
        """Route and queue a batch; returns the futures of the batches it went into. With
        `row_batch`, fills in for every row the index of its batch's future."""
        futures: list[asyncio.Future[int]] = []
        for path, bucket, piece, rows in self._route(batch, rows_round_robin, row_batch is not None):
            start = 0
            for chunk in self._chunks(piece):
                written = self._client.append(path, self.format, chunk, bucket, self._num_buckets)
                future = self._track(written)
                if not futures or futures[-1] is not future:
                    futures.append(future)
                if row_batch is not None:
                    row_batch[rows[start : start + chunk.num_rows]] = len(futures) - 1
                start += chunk.num_rows
        return futures

    def _route(
        self, batch: pa.RecordBatch, rows_round_robin: bool, track_rows: bool
    ) -> Iterator[tuple[PhysicalTablePath, int | None, pa.RecordBatch, np.ndarray]]:
        """Split a batch by partition, then by bucket, keeping the row order within each part.

        The bucket is None when the no-key assigner picks it per chunk (sticky; round robin for
        Arrow input). Staged rows under round robin get a bucket each, as rows appended one by one.
        With `track_rows`, each part comes with the positions its rows had in `batch`.
        """
        if batch.num_rows == 0:
            return
        everything = np.arange(batch.num_rows) if track_rows else _NO_ROWS
        if self._partitioner is None:
            parts = [(self._path, batch, everything)]
        else:
            codes, names = self._partitioner.codes_of(batch)
            parts = [
                (self._path_of(names[code]), part, rows)
                for code, part, rows in _split(batch, codes, everything)
            ]
        for path, part, part_rows in parts:
            buckets: np.ndarray | None = None
            if self._hash is not None:
                buckets = self._hash.buckets_of_batch(part)
            elif rows_round_robin:
                buckets = self._client.round_robin_buckets(path, self._num_buckets, part.num_rows)
            if buckets is None:
                yield path, None, part, part_rows
            else:
                for bucket, piece, rows in _split(part, buckets, part_rows):
                    yield path, bucket, piece, rows

    def _chunks(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Zero-copy slices of about client.writer.batch-size bytes each."""
        size = batch.nbytes
        if size <= self._batch_size or batch.num_rows <= 1:
            yield batch
            return
        rows = max(1, int(batch.num_rows * self._batch_size / size))
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)

    def _path_of(self, partition_name: str) -> PhysicalTablePath:
        path = self._paths.get(partition_name)
        if path is None:
            path = self._paths[partition_name] = PhysicalTablePath(self.table.path, partition_name)
        return path

    def __repr__(self) -> str:
        return f"AppendWriter({self.table.path})"


def _split(
    batch: pa.RecordBatch, groups: np.ndarray, rows: np.ndarray
) -> Iterator[tuple[int, pa.RecordBatch, np.ndarray]]:
    """The batch's rows grouped by `groups` (one int per row), each group in its original order,
    with the matching entries of `rows` (untouched when empty)."""
    lo, hi = int(groups.min()), int(groups.max())
    if lo == hi:
        yield lo, batch, rows
        return
    # One stable sort and one take, then contiguous runs: O(n log n) whatever the number of groups.
    order = np.argsort(groups, kind="stable")
    ordered = batch.take(pa.array(order))
    ordered_rows = rows[order] if len(rows) else rows
    sorted_groups = groups[order]
    bounds = np.flatnonzero(np.diff(sorted_groups)) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), len(sorted_groups)]
    for start, end in zip(starts, ends, strict=True):
        part_rows = ordered_rows[start:end] if len(rows) else rows
        yield int(sorted_groups[start]), ordered.slice(start, end - start), part_rows
