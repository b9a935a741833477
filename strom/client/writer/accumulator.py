"""The record accumulator: per-bucket queues of batches waiting for the sender.

Appends go to the newest batch of their bucket until it reaches ``client.writer.batch-size``; then a
new batch starts. A bucket is ready to send when it holds a full batch, its oldest batch has waited
``client.writer.batch-timeout``, a flush or close is under way, or writers are waiting for buffer
memory. The sender drains ready buckets leader by leader, one batch per bucket per request, starting
at a rotating bucket so no bucket starves, and re-enqueues batches it must retry at the head of
their queue (in sequence order when the writer is idempotent).

Memory: every batch counts its estimated size, rounded up to whole ``client.writer.buffer.page-size``
pages (as Fluss's writer takes memory page by page), against ``client.writer.buffer.memory-size`` until
it is acknowledged or failed. Appends never block (they are plain calls); `wait_for_space` is the
awaitable back-pressure point for producers that outpace the cluster.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strom.client.backoff import Backoff
from strom.client.cluster import Cluster
from strom.client.config import ClientConfig
from strom.client.writer.errors import BufferExhaustedError, WriterClosedError
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.write_batch import BatchFormat, WriteBatch
from strom.common.table_bucket import TableBucket
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.record.log_batch import NO_BATCH_SEQUENCE

__all__ = ["AppendOutcome", "ReadyCheck", "RecordAccumulator"]

log = logging.getLogger(__name__)

# Between attempts of a batch that failed with a retriable error.
RETRY_BACKOFF = Backoff(initial=0.1, maximum=1.0, jitter=0.2)


@dataclass(slots=True)
class AppendOutcome:
    batch: WriteBatch | None  # None: not appended, the caller asked to switch buckets first
    new_batch: bool = False


@dataclass(slots=True)
class ReadyCheck:
    nodes: set[int] = field(default_factory=set)
    # Seconds until a bucket that is not ready yet may become ready; None when nothing waits.
    next_delay: float | None = None
    # Tables and partitions whose bucket leaders (or partition ids) are not known.
    unknown: set[PhysicalTablePath] = field(default_factory=set)


class RecordAccumulator:
    def __init__(self, config: ClientConfig, idempotence: IdempotenceManager) -> None:
        self.batch_size = config.writer_batch_size
        self.linger = config.writer_batch_timeout.total_seconds()
        self.memory_limit = config.writer_buffer_memory_size
        self.page_size = config.writer_buffer_page_size
        self.wait_timeout = (
            None
            if config.writer_buffer_wait_timeout is None
            else config.writer_buffer_wait_timeout.total_seconds()
        )
        self.max_in_flight = config.writer_max_inflight_requests_per_bucket
        self.idempotence = idempotence
        self._queues: dict[PhysicalTablePath, dict[int, deque[WriteBatch]]] = {}
        self._partition_ids: dict[PhysicalTablePath, int] = {}
        self._incomplete: dict[int, WriteBatch] = {}
        self._in_flight: dict[TableBucket, int] = {}
        self._drain_start: dict[int, int] = {}
        self._ids = itertools.count()
        self._buffered = 0
        self._space_waiters = 0
        self._flushes = 0
        self.closed = False
        self._loop = asyncio.get_running_loop()
        # Set whenever the sender may have something new to do.
        self.wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()

    def now(self) -> float:
        return self._loop.time()

    # ------------------------------------------------------------------ appending

    def _queue(self, path: PhysicalTablePath, bucket_id: int) -> deque[WriteBatch]:
        buckets = self._queues.get(path)
        if buckets is None:
            buckets = self._queues[path] = {}
        queue = buckets.get(bucket_id)
        if queue is None:
            queue = buckets[bucket_id] = deque()
        return queue

    def append(
        self,
        path: PhysicalTablePath,
        bucket_id: int,
        fmt: BatchFormat,
        records: pa.RecordBatch,
        *,
        abort_if_batch_full: bool = False,
    ) -> AppendOutcome:
        """Append an Arrow batch to the bucket's open batch, or to a new one."""
        if self.closed:
            raise WriterClosedError("Cannot append: the writer is closed.")
        size = records.nbytes
        return self.append_to_bucket(
            path,
            bucket_id,
            size,
            # writers opened before and after an AlterTable never share a batch: it has one schema id
            fits=lambda batch: (
                batch.format.schema_id == fmt.schema_id
                and batch.format.bucket_count == fmt.bucket_count
                and batch.has_room(size)
            ),
            new_batch=lambda batch_id: WriteBatch(
                batch_id, path, bucket_id, fmt, self.batch_size, self.now()
            ),
            add=lambda batch: batch.add_arrow(records, size),
            abort_if_batch_full=abort_if_batch_full,
        )

    def append_to_bucket(
        self,
        path: PhysicalTablePath,
        bucket_id: int,
        size: int,
        *,
        fits: Callable[[WriteBatch], bool],
        new_batch: Callable[[int], WriteBatch],
        add: Callable[[WriteBatch], None],
        abort_if_batch_full: bool = False,
    ) -> AppendOutcome:
        """Add `size` bytes of records (`add` puts them into a batch) to the bucket's open batch when
        `fits` says it takes them, else to a fresh one from `new_batch(batch_id)`."""
        queue = self._queue(path, bucket_id)
        last = queue[-1] if queue else None
        created = False
        if last is None or not fits(last):
            if last is not None:
                last.close()
                self.wakeup.set()
                if abort_if_batch_full:
                    # The sticky assigner moves to another bucket before a new batch starts.
                    return AppendOutcome(None)
            last = new_batch(next(self._ids))
            queue.append(last)
            self._incomplete[last.batch_id] = last
            created = True
        before = 0 if created else self.footprint(last.size)
        add(last)
        self._reserve(self.footprint(last.size) - before)
        if created or last.is_full:
            self.wakeup.set()
        return AppendOutcome(last, created)

    # ------------------------------------------------------------------ memory

    def footprint(self, size: int) -> int:
        """The buffer memory a batch of `size` bytes holds: whole pages, at least one."""
        page = self.page_size
        return max(1, -(-size // page)) * page

    def _reserve(self, size: int) -> None:
        self._buffered += size
        if self._buffered >= self.memory_limit:
            self._space.clear()

    def _release(self, size: int) -> None:
        self._buffered = max(0, self._buffered - size)
        if self._buffered < self.memory_limit:
            self._space.set()

    @property
    def buffered_bytes(self) -> int:
        return self._buffered

    async def wait_for_space(self) -> None:
        """Wait while the buffered data is at ``client.writer.buffer.memory-size``."""
        if self._space.is_set():
            return
        self._space_waiters += 1
        self.wakeup.set()  # exhausted memory makes every bucket ready
        try:
            await asyncio.wait_for(self._space.wait(), self.wait_timeout)
        except TimeoutError:
            raise BufferExhaustedError(
                f"Waited {self.wait_timeout:.3f}s for writer buffer memory "
                f"({self._buffered} of {self.memory_limit} bytes in use)."
            ) from None
        finally:
            self._space_waiters -= 1

    # ------------------------------------------------------------------ readiness

    def _partition_id(self, path: PhysicalTablePath, cluster: Cluster) -> int | None:
        pid = self._partition_ids.get(path)
        if pid is None:
            pid = cluster.partition_id(path)
            if pid is not None:
                self._partition_ids[path] = pid
        return pid

    def _table_bucket(
        self, path: PhysicalTablePath, bucket_id: int, table_id: int, cluster: Cluster
    ) -> TableBucket | None:
        if path.partition_name is None:
            return TableBucket(table_id, None, bucket_id)
        pid = self._partition_id(path, cluster)
        return None if pid is None else TableBucket(table_id, pid, bucket_id)

    def _heads(
        self, cluster: Cluster
    ) -> Iterator[tuple[PhysicalTablePath, deque[WriteBatch], TableBucket | None]]:
        for path, buckets in self._queues.items():
            for bucket_id, queue in buckets.items():
                if queue:
                    yield path, queue, self._table_bucket(path, bucket_id, queue[0].format.table_id, cluster)

    def ready(self, cluster: Cluster) -> ReadyCheck:
        now = self.now()
        check = ReadyCheck()
        urgent = self.closed or self._flushes > 0 or self._space_waiters > 0
        for path, queue, bucket in self._heads(cluster):
            if bucket is None:
                check.unknown.add(path)
                continue
            leader = cluster.leader_for(bucket)
            if leader is None:
                check.unknown.add(path)
                continue
            if leader.id in check.nodes:
                continue
            first = queue[0]
            if first.attempts and now < first.retry_at:
                check.next_delay = _earliest(check.next_delay, first.retry_at - now)
                continue
            waited = now - first.created_at
            if urgent or len(queue) > 1 or first.closed or waited >= self.linger:
                check.nodes.add(leader.id)
            else:
                check.next_delay = _earliest(check.next_delay, self.linger - waited)
        return check

    # ------------------------------------------------------------------ draining

    def _should_hold(self, first: WriteBatch, bucket: TableBucket) -> bool:
        """Whether the bucket's head batch must wait for batches already in flight."""
        idem = self.idempotence
        if not idem.enabled:
            return self._in_flight.get(bucket, 0) >= self.max_in_flight
        if not idem.has_writer_id:
            return True
        if idem.in_flight_count(bucket) == 0:
            return False
        if first.batch_sequence != NO_BATCH_SEQUENCE:
            # A retry goes out only as the bucket's oldest unacknowledged batch: order is kept.
            return not idem.is_first_in_flight(bucket, first.batch_id)
        return not idem.can_send_more(bucket)

    def drain(
        self, cluster: Cluster, nodes: Iterable[int], max_request_size: int
    ) -> dict[int, list[WriteBatch]]:
        """Take at most one batch per bucket for each ready node, up to `max_request_size` bytes."""
        wanted = set(nodes)
        if not wanted:
            return {}
        now = self.now()
        per_node: dict[int, list[tuple[deque[WriteBatch], TableBucket]]] = {}
        for _, queue, bucket in self._heads(cluster):
            if bucket is None:
                continue
            leader = cluster.leader_for(bucket)
            if leader is not None and leader.id in wanted:
                per_node.setdefault(leader.id, []).append((queue, bucket))
        drained: dict[int, list[WriteBatch]] = {}
        for node_id, candidates in per_node.items():
            start = self._drain_start.get(node_id, 0) % len(candidates)
            self._drain_start[node_id] = start + 1
            taken: list[WriteBatch] = []
            size = 0
            for k in range(len(candidates)):
                queue, bucket = candidates[(start + k) % len(candidates)]
                first = queue[0]
                if first.attempts and now < first.retry_at:
                    continue
                if self._should_hold(first, bucket):
                    continue
                if taken and size + first.payload_size > max_request_size:
                    break
                queue.popleft()
                first.close()
                first.table_bucket = bucket
                if self.idempotence.enabled and first.batch_sequence == NO_BATCH_SEQUENCE:
                    first.writer_id = self.idempotence.writer_id
                    first.batch_sequence = self.idempotence.assign_sequence(bucket, first.batch_id)
                self._in_flight[bucket] = self._in_flight.get(bucket, 0) + 1
                taken.append(first)
                size += first.payload_size
            if taken:
                drained[node_id] = taken
        return drained

    def _left_flight(self, batch: WriteBatch) -> None:
        bucket = batch.table_bucket
        if bucket is None:
            return
        count = self._in_flight.get(bucket, 0) - 1
        if count > 0:
            self._in_flight[bucket] = count
        else:
            self._in_flight.pop(bucket, None)

    def reenqueue(self, batch: WriteBatch) -> None:
        """Put a batch that failed with a retriable error back at the head of its bucket's queue."""
        self._left_flight(batch)
        batch.retry_at = self.now() + RETRY_BACKOFF.delay(batch.attempts - 1)
        if self.idempotence.enabled and batch.table_bucket is not None:
            current = self.idempotence.current_sequence(batch.table_bucket, batch.batch_id)
            if current is not None:
                batch.batch_sequence = current
        queue = self._queue(batch.path, batch.bucket_id)
        if self.idempotence.enabled and batch.batch_sequence != NO_BATCH_SEQUENCE:
            # Before the first queued batch with a higher (or no) sequence.
            position = 0
            for position, queued in enumerate(queue):  # noqa: B007 - the position is the result
                if queued.batch_sequence == NO_BATCH_SEQUENCE or queued.batch_sequence > batch.batch_sequence:
                    break
            else:
                position = len(queue)
            queue.insert(position, batch)
        else:
            queue.appendleft(batch)
        self.wakeup.set()

    def finished(self, batch: WriteBatch) -> None:
        """A batch was acknowledged or failed for good: free its memory and its in-flight slot."""
        if self._incomplete.pop(batch.batch_id, None) is None:
            return
        self._left_flight(batch)
        self._release(self.footprint(batch.size))
        self.wakeup.set()

    # ------------------------------------------------------------------ failing queued batches

    def fail_queued(self, paths: Iterable[PhysicalTablePath], error_for: Any) -> int:
        """Fail every queued (not in-flight) batch of these tables/partitions; returns how many."""
        failed = 0
        for path in list(paths):
            buckets = self._queues.pop(path, {})
            for queue in buckets.values():
                for batch in queue:
                    self._incomplete.pop(batch.batch_id, None)
                    self._release(self.footprint(batch.size))
                    batch.fail(error_for(path))
                    failed += 1
        return failed

    def fail_all_queued(self, error: BaseException) -> int:
        return self.fail_queued(list(self._queues), lambda _: error)

    # ------------------------------------------------------------------ flush and close

    def begin_flush(self) -> None:
        self._flushes += 1
        self.wakeup.set()

    def end_flush(self) -> None:
        self._flushes -= 1

    def incomplete(self) -> list[WriteBatch]:
        return list(self._incomplete.values())

    def has_queued(self) -> bool:
        return any(queue for buckets in self._queues.values() for queue in buckets.values())

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def queued_paths(self) -> list[PhysicalTablePath]:
        return [path for path, buckets in self._queues.items() if any(buckets.values())]

    def queued_table_paths(self) -> list[TablePath]:
        paths = {path.table_path for path, buckets in self._queues.items() if any(buckets.values())}
        return sorted(paths, key=str)

    def forget_partition_id(self, path: PhysicalTablePath) -> None:
        self._partition_ids.pop(path, None)

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()


def _earliest(current: float | None, candidate: float) -> float:
    candidate = max(candidate, 0.0)
    return candidate if current is None else min(current, candidate)
