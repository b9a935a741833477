"""The KV snapshots a ``full`` scan still has to hand out before the changelog of their buckets.

A bucket with a snapshot is subscribed to its changelog at the snapshot's log offset right away (so
its first fetch runs in the background), but held: the scanner returns none of its changelog until
the feed handed out every snapshot row of that bucket. Snapshots are read one at a time, a chunk per
poll, downloaded in the background while earlier ones are consumed; a bucket is released as soon as
its snapshot is exhausted.

A snapshot can be gone by the time it is read (retention keeps only the newest few): the bucket then
starts over from its latest snapshot, or from the start of its changelog when it has none, and the
scanner is told the new position (`reposition`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

import pyarrow as pa

from strom.client.scanner.log_fetcher import EARLIEST_OFFSET
from strom.client.scanner.scan_records import ScanBatch
from strom.client.scanner.snapshot_reader import BucketSnapshot, SnapshotReader, snapshot_scan_batch
from strom.common.errors import KvSnapshotNotExistError
from strom.common.supervision import spawn
from strom.common.table_bucket import TableBucket

__all__ = ["SnapshotFeed"]


class SnapshotFeed:
    def __init__(
        self,
        reader: SnapshotReader,
        shape: Callable[[pa.RecordBatch], pa.RecordBatch],
        reposition: Callable[[TableBucket, int], None],
    ) -> None:
        self.reader = reader
        self.shape = shape  # snapshot rows -> the scan's projected columns
        self.reposition = reposition  # where a bucket's changelog starts when its snapshot changed
        self._pending: deque[tuple[TableBucket, int, int]] = deque()
        self._opening: tuple[TableBucket, asyncio.Task[BucketSnapshot | None]] | None = None
        self._current: BucketSnapshot | None = None
        self._rows: AsyncIterator[pa.RecordBatch] | None = None
        self._leftover: ScanBatch | None = None
        self.held: set[TableBucket] = set()

    def add(self, bucket: TableBucket, snapshot_id: int, log_offset: int) -> None:
        self._pending.append((bucket, snapshot_id, log_offset))
        self.held.add(bucket)

    def discard(self, bucket: TableBucket) -> None:
        """Forget a bucket (unsubscribed or subscribed again elsewhere)."""
        self.held.discard(bucket)
        self._pending = deque(p for p in self._pending if p[0] != bucket)
        if self._opening is not None and self._opening[0] == bucket:
            self._cancel_opening()
        if self._current is not None and self._current.bucket == bucket:
            self._close_current()
            self._leftover = None

    @property
    def active(self) -> bool:
        return bool(self.held)

    def _start_opening(self) -> None:
        if self._opening is None and self._current is None and self._pending:
            bucket, snapshot_id, log_offset = self._pending.popleft()
            # quiet: the poller gets its error from task.result()
            task = spawn(self._open(bucket, snapshot_id, log_offset), name="kv-snapshot-open", quiet=True)
            self._opening = (bucket, task)

    async def _open(self, bucket: TableBucket, snapshot_id: int, log_offset: int) -> BucketSnapshot | None:
        try:
            snapshot = await self.reader.open(bucket, snapshot_id)
        except KvSnapshotNotExistError:
            snapshot = None
        if snapshot is None:
            # Gone meanwhile: the newest snapshot now, or the whole changelog.
            snapshot = await self.reader.open(bucket, None)
        start = EARLIEST_OFFSET if snapshot is None else snapshot.log_offset
        if start != log_offset:
            self.reposition(bucket, start)
        return snapshot

    async def next_batches(self, timeout: float, max_rows: int | None) -> list[ScanBatch]:
        """Snapshot rows of the current bucket (at most `max_rows`), waiting up to `timeout` seconds for
        the snapshot to be downloaded; empty when nothing is ready yet."""
        if self._leftover is not None:
            return [self._cut(self._leftover, max_rows)]
        if self._current is None:
            self._start_opening()
            if self._opening is None:
                return []
            bucket, task = self._opening
            done, _ = await asyncio.wait({task}, timeout=max(timeout, 0))
            if not done or self._opening is None or self._opening[1] is not task:
                return []
            self._opening = None
            snapshot = task.result()  # a download failure is raised to the poller
            if snapshot is None:  # no snapshot any more: the changelog from its start follows
                self.held.discard(bucket)
                return []
            self._current = snapshot
            self._rows = snapshot.batches().__aiter__()
        assert self._current is not None and self._rows is not None
        try:
            batch = await self._rows.__anext__()
        except StopAsyncIteration:
            self.held.discard(self._current.bucket)
            self._close_current()
            self._start_opening()  # download the next one while the caller consumes
            return []
        return [self._cut(snapshot_scan_batch(self._current.bucket, self.shape(batch)), max_rows)]

    def _cut(self, batch: ScanBatch, max_rows: int | None) -> ScanBatch:
        if max_rows is None or batch.num_rows <= max_rows:
            self._leftover = None
            return batch
        assert batch.change_types is not None
        self._leftover = ScanBatch(
            batch.bucket, batch.batch.slice(max_rows), -1, -1, batch.change_types[max_rows:]
        )
        return ScanBatch(batch.bucket, batch.batch.slice(0, max_rows), -1, -1, batch.change_types[:max_rows])

    def _close_current(self) -> None:
        current, self._current, self._rows = self._current, None, None
        if current is not None:
            current.close()

    def _cancel_opening(self) -> None:
        opening, self._opening = self._opening, None
        if opening is None:
            return
        task = opening[1]
        if not task.done():
            task.cancel()

        def cleanup(t: asyncio.Task[BucketSnapshot | None]) -> None:
            if not t.cancelled() and t.exception() is None:
                snapshot = t.result()
                if snapshot is not None:
                    snapshot.close()

        task.add_done_callback(cleanup)

    async def close(self) -> None:
        self._pending.clear()
        self.held.clear()
        opening = self._opening
        self._cancel_opening()
        if opening is not None:
            with contextlib.suppress(BaseException):
                await opening[1]
        self._close_current()
