"""Batching lookups and prefix lookups into Lookup / PrefixLookup requests, one connection-wide queue
per leader, table and kind, shared by every lookuper and every concurrent caller of the connection.

A queue is sent when it holds ``client.lookup.max-batch-size`` keys, when fewer than two requests of
that queue are in flight (so a lone lookup goes out at once, on the next turn of the event loop,
together with the lookups issued in the same turn), or when its oldest key has waited
``client.lookup.batch-timeout``. While two requests are in flight, new keys gather into the next
batch: under load, batches grow towards the maximum by themselves, and a single caller pays no fixed
delay. At most ``client.lookup.max-inflight-requests`` requests are unanswered at once.

At most ``client.lookup.queue-size`` keys wait to be sent (queued, or waiting for their bucket's
leader to be known). A lookuper that would go past it waits (`acquire`) until sending makes room,
so a caller that issues lookups faster than the cluster answers them is slowed down instead of
growing the queue without end. A batch larger than the whole queue is let in when the queue is empty.
Keys sent again after a retriable error do not wait: they were let in already.

Two in flight, not one, so that client and server work at the same time: a batch of 64 keys or more
that finds nothing in flight goes as two requests, and while the server answers one, this process
decodes the other's answer and its callers issue their next keys. With one request at a time the two
processes took turns (64 concurrent callers: ~85k keys/s on 2 cores; see docs/performance.md).

One request carries the keys of several buckets of one table (grouped per bucket, as the protocol
wants); each bucket's answer holds one value (or value list) per key, in key order. Per-bucket errors
the cluster can recover from (leader moved, bucket not yet there, storage hiccups), failed
connections and timeouts refresh the metadata and send those keys again, with backoff, until
``client.lookup.max-retries`` or ``client.request-timeout`` runs out. Other errors fail the keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.client.backoff import Backoff
from strom.common.errors import (
    FlussError,
    LeaderNotAvailableError,
    NetworkError,
    NotLeaderOrFollowerError,
    RequestTimeoutError,
    UnknownServerError,
    UnknownTableOrBucketError,
    error_for_code,
)
from strom.common.supervision import TaskSet
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["LookupClient"]

log = logging.getLogger(__name__)

RETRY_BACKOFF = Backoff(initial=0.05, maximum=1.0, jitter=0.2)
_STALE_METADATA = (NetworkError, NotLeaderOrFollowerError, UnknownTableOrBucketError, LeaderNotAvailableError)

_PIPELINE_DEPTH = 2  # requests of one queue in flight before new keys wait (module docstring)
_MIN_SPLIT = 32  # a batch is split in two only when each half has at least this many keys

@dataclass(slots=True)
class _Keys:
    """Keys of one bucket and kind (lookup, insert or prefix), queued and sent together: one object per
    bucket for all the keys a turn of the event loop brings, not one per key, which cost a lookup more
    than its own bytes."""

    path: TablePath
    bucket: TableBucket
    prefix: bool
    insert: bool
    keys: list[bytes]
    futures: list[asyncio.Future[Any]]
    deadline: float
    attempts: int = 0
    enqueued: float = 0.0
    counted: int = 0  # keys of these that hold places in the bounded queue (`LookupClient.acquire`)

    def take(self, n: int) -> _Keys:
        """The first `n` keys, as keys of their own; these keep the rest."""
        counted = min(n, self.counted)
        head = _Keys(
            self.path, self.bucket, self.prefix, self.insert, self.keys[:n], self.futures[:n], self.deadline,
            self.attempts, self.enqueued, counted,
        )
        self.counted -= counted
        del self.keys[:n], self.futures[:n]
        return head

    def prune(self) -> bool:
        """Leave out the keys whose callers gave up (their futures are done); False when none is left."""
        futures = self.futures
        if len(futures) == 1:
            return not futures[0].done()
        done = [f.done() for f in futures]
        if any(done):
            self.keys = [k for k, d in zip(self.keys, done, strict=True) if not d]
            self.futures = [f for f, d in zip(futures, done, strict=True) if not d]
        return bool(self.futures)

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)


@dataclass(slots=True)
class _Queue:
    node_id: int
    table_id: int
    prefix: bool
    insert: bool = False
    waiting: deque[_Keys] = field(default_factory=deque)
    size: int = 0  # keys in `waiting`
    in_flight: int = 0


class LookupClient:
    def __init__(self, connection: Connection) -> None:
        config = connection.config
        self.metadata = connection.metadata
        self.pool = connection.pool
        self.max_batch = max(1, config.lookup_max_batch_size)
        self.linger = config.lookup_batch_timeout.total_seconds()
        self.max_in_flight = max(1, config.lookup_max_inflight_requests)
        self.max_retries = config.lookup_max_retries
        self.queue_size = max(1, config.lookup_queue_size)
        self.timeout = config.request_timeout.total_seconds()
        self.loop = asyncio.get_running_loop()
        self._queues: dict[tuple[int, int, bool, bool], _Queue] = {}
        self._in_flight = 0
        self._dispatch_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        # Keys waiting for the leader of their bucket to be known, per table.
        self._unrouted: dict[TablePath, list[_Keys]] = {}
        self._tasks = TaskSet("lookup client")
        # Places taken in the bounded queue, and callers waiting for places (FIFO).
        self.queued = 0
        self._room_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self.closed = False

    # ------------------------------------------------------------------ the bounded queue

    def try_acquire(self, n: int) -> bool:
        """Take `n` places in the queue if they are free now and nobody waits before us."""
        if self._room_waiters or not self._fits(n):
            return False
        self.queued += n
        return True

    async def acquire(self, n: int) -> None:
        """Take `n` places in the queue, waiting until sending frees them; pass them on with
        ``counted=n`` to a submit, or give them back with `release` if nothing is submitted."""
        self._check_open()
        if self.try_acquire(n):
            return
        future: asyncio.Future[None] = self.loop.create_future()
        self._room_waiters.append((n, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(n)  # the places were granted just before the cancellation
            else:
                self._room_waiters = deque(w for w in self._room_waiters if w[1] is not future)
                self._wake()  # whoever waited behind us may fit now
            raise

    def release(self, n: int) -> None:
        """Give back `n` places: their keys were sent, or dropped before being sent."""
        if n:
            self.queued -= n
            self._wake()

    def _fits(self, n: int) -> bool:
        return self.queued == 0 or self.queued + n <= self.queue_size

    def _wake(self) -> None:
        if self.closed:
            return  # `close` fails the waiters
        waiters = self._room_waiters
        while waiters and self._fits(waiters[0][0]):
            n, future = waiters.popleft()
            if not future.done():
                self.queued += n
                future.set_result(None)

    def _uncount(self, group: _Keys) -> None:
        if group.counted:
            counted, group.counted = group.counted, 0
            self.release(counted)

    # ------------------------------------------------------------------ entry points

    def lookup(
        self, path: TablePath, bucket: TableBucket, key: bytes, *, insert: bool = False
    ) -> asyncio.Future[bytes | None]:
        """The stored value (schema id + row) of `key` in `bucket`, or None when there is none; with
        `insert` a missing key is inserted (auto-increment column filled) and its new row returned."""
        return self._submit_one(path, bucket, key, prefix=False, insert=insert)

    def prefix_lookup(
        self, path: TablePath, bucket: TableBucket, prefix: bytes, *, counted: int = 0
    ) -> asyncio.Future[list[bytes]]:
        """The stored values of every key of `bucket` that starts with `prefix`."""
        return self._submit_one(path, bucket, prefix, prefix=True, insert=False, counted=counted)

    def lookup_many(
        self,
        path: TablePath,
        keys: Sequence[tuple[TableBucket, bytes]],
        *,
        prefix: bool = False,
        insert: bool = False,
        counted: int = 0,
    ) -> list[asyncio.Future[Any]]:
        """`lookup` (or `prefix_lookup`) of many keys at once: one future per (bucket, key).
        `counted`: places the caller took with `acquire` for these keys."""
        self._check_open()
        loop = self.loop
        deadline = loop.time() + self.timeout
        futures = [loop.create_future() for _ in keys]
        by_bucket: dict[TableBucket, _Keys] = {}
        for (bucket, key), future in zip(keys, futures, strict=True):
            group = by_bucket.get(bucket)
            if group is None:
                by_bucket[bucket] = _Keys(path, bucket, prefix, insert, [key], [future], deadline)
            else:
                group.keys.append(key)
                group.futures.append(future)
        for group in by_bucket.values():
            group.counted = min(counted, len(group.keys))
            counted -= group.counted
            self._submit(group)
        self.release(counted)  # places taken for more keys than were given
        return futures

    def lookup_bucket(
        self,
        path: TablePath,
        bucket: TableBucket,
        keys: list[bytes],
        futures: list[asyncio.Future[Any]],
        *,
        insert: bool = False,
        counted: int = 0,
    ) -> None:
        """`lookup` of many keys of one bucket, answered through the caller's `futures` (the lists
        become the client's); `counted` as in `lookup_many`."""
        self._check_open()
        if keys:
            group = _Keys(path, bucket, False, insert, keys, futures, self.loop.time() + self.timeout)
            group.counted = min(counted, len(keys))
            counted -= group.counted
            self._submit(group)
        self.release(counted)

    def _check_open(self) -> None:
        if self.closed:
            raise FlussError("The connection is closed.")

    def _submit_one(
        self, path: TablePath, bucket: TableBucket, key: bytes, prefix: bool, insert: bool, counted: int = 0
    ) -> asyncio.Future[Any]:
        self._check_open()
        future: asyncio.Future[Any] = self.loop.create_future()
        group = _Keys(path, bucket, prefix, insert, [key], [future], self.loop.time() + self.timeout)
        group.counted = min(counted, 1)
        self._submit(group)
        self.release(counted - group.counted)
        return future

    # ------------------------------------------------------------------ queueing

    def _submit(self, group: _Keys) -> None:
        """Queue keys for the leader of their bucket (or wait for it to be known)."""
        leader = self.metadata.leader_for(group.bucket)
        if leader is None:
            self._wait_for_leader(group)
            return
        key = (leader.id, group.bucket.table_id, group.prefix, group.insert)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(leader.id, group.bucket.table_id, group.prefix, group.insert)
        group.enqueued = self.loop.time()
        queue.waiting.append(group)
        queue.size += len(group.keys)
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            self.loop.call_soon(self._dispatch)

    def _wait_for_leader(self, group: _Keys) -> None:
        path = group.path
        waiting = self._unrouted.get(path)
        if waiting is None:
            self._unrouted[path] = [group]
            self._spawn(self._route_later(path))
        else:
            waiting.append(group)

    async def _route_later(self, path: TablePath) -> None:
        """Refresh the leaders of a table whose keys have no known leader, then queue them again."""
        error: FlussError | None = None
        try:
            partition_ids = {g.bucket.partition_id for g in self._unrouted.get(path, [])}
            ids = [p for p in partition_ids if p is not None]
            await self.metadata.update(table_paths=[path], partition_ids=ids)
        except FlussError as e:
            error = e
        except OSError as e:
            error = NetworkError(f"Cannot refresh the leaders of {path}: {e}")
        except Exception as e:  # the waiting keys must still be answered, and later ones routed
            log.exception("refreshing the leaders of %s failed unexpectedly", path)
            error = UnknownServerError(f"Refreshing the leaders of {path} failed unexpectedly: {e!r}")
        groups = self._unrouted.pop(path, [])
        now = self.loop.time()
        retry: list[_Keys] = []
        for group in groups:
            if not group.prune():
                self._uncount(group)
                continue
            if self.metadata.leader_for(group.bucket) is not None:
                self._submit(group)
                continue
            group.attempts += 1
            if error is not None and not error.retriable:
                self._uncount(group)
                group.fail(error)
            elif now >= group.deadline or group.attempts > self.max_retries:
                self._uncount(group)
                group.fail(error or LeaderNotAvailableError(f"No leader is known for {group.bucket}."))
            else:
                retry.append(group)
        if retry:
            await self._resubmit(retry)

    def _schedule_dispatch(self) -> None:
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            self.loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        """Send every queue that is due, within the in-flight limit."""
        self._dispatch_scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self.loop.time()
        next_due: float | None = None
        for key, queue in list(self._queues.items()):
            waiting = queue.waiting
            while waiting and self._in_flight < self.max_in_flight:
                due = waiting[0].enqueued + self.linger
                if queue.size < self.max_batch and queue.in_flight >= _PIPELINE_DEPTH and now < due:
                    next_due = due if next_due is None else min(next_due, due)
                    break
                size = min(self.max_batch, queue.size)
                if not queue.in_flight and size >= 2 * _MIN_SPLIT:
                    size = (size + 1) // 2
                batch: list[_Keys] = []
                taken = 0
                while taken < size:
                    group = waiting[0]
                    n = len(group.keys)
                    if taken + n <= size:
                        batch.append(waiting.popleft())
                        taken += n
                    else:
                        batch.append(group.take(size - taken))
                        taken = size
                for group in batch:
                    self._uncount(group)  # sent: the places go to the next callers
                queue.size -= taken
                queue.in_flight += 1
                self._in_flight += 1
                self._spawn(self._send(queue, batch))
            if not waiting and not queue.in_flight:
                del self._queues[key]
        if next_due is not None and not self.closed:
            self._timer = self.loop.call_at(next_due, self._schedule_dispatch)

    def _spawn(self, work: Any) -> None:
        self._tasks.spawn(work, name="lookup-send")

    # ------------------------------------------------------------------ sending

    async def _send(self, queue: _Queue, batch: list[_Keys]) -> None:
        try:
            await self._send_batch(queue, batch)
        except asyncio.CancelledError:
            for group in batch:
                group.fail(FlussError("The connection closed before the lookup was answered."))
            raise
        except Exception as e:  # a bug must not leave callers waiting forever
            log.exception("lookup request failed unexpectedly")
            for group in batch:
                group.fail(UnknownServerError(f"The lookup failed unexpectedly: {e!r}"))
        finally:
            queue.in_flight -= 1
            self._in_flight -= 1
            if queue.waiting or not queue.in_flight:
                self._schedule_dispatch()

    async def _send_batch(self, queue: _Queue, batch: list[_Keys]) -> None:
        by_bucket: dict[TableBucket, list[_Keys]] = {}
        for group in batch:
            group.attempts += 1
            if group.prune():
                groups = by_bucket.get(group.bucket)
                if groups is None:
                    by_bucket[group.bucket] = [group]
                else:
                    groups.append(group)
        if not by_bucket:
            return
        request: pb.LookupRequest | pb.PrefixLookupRequest
        if queue.prefix:
            request = pb.PrefixLookupRequest(table_id=queue.table_id)
            api = ApiKey.PREFIX_LOOKUP
        else:
            request = pb.LookupRequest(table_id=queue.table_id)
            if queue.insert:
                # as Fluss's client: the inserts are acknowledged by all in-sync replicas
                request.insert_if_not_exists = True
                request.acks = -1
                request.timeout_ms = int(self.timeout * 1000)
            api = ApiKey.LOOKUP
        for bucket, groups in by_bucket.items():
            entry = request.buckets_req.add(bucket_id=bucket.bucket)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
            for group in groups:
                entry.keys.extend(group.keys)
        node = self.metadata.tablet_server(queue.node_id)
        try:
            if node is None:
                raise LeaderNotAvailableError(f"Tablet server {queue.node_id} is no longer known.")
            response = await self.pool.request(node.host, node.port, api, request, timeout=self.timeout)
        except FlussError as e:
            if isinstance(e, NetworkError | RequestTimeoutError):
                self.metadata.invalidate(server_id=queue.node_id)
            self._retry_or_fail([g for groups in by_bucket.values() for g in groups], e)
            return
        except OSError as e:
            self.metadata.invalidate(server_id=queue.node_id)
            lost = NetworkError(f"Lookup to tablet server {queue.node_id} failed: {e}")
            self._retry_or_fail([g for groups in by_bucket.values() for g in groups], lost)
            return
        for answer in response.buckets_resp:
            partition_id = answer.partition_id if answer.HasField("partition_id") else None
            bucket = TableBucket(queue.table_id, partition_id, answer.bucket_id)
            groups = by_bucket.pop(bucket, None)
            if groups is None:
                continue  # not asked for, or answered twice
            if answer.HasField("error_code") and answer.error_code != 0:
                self._retry_or_fail(groups, error_for_code(answer.error_code, answer.error_message or None))
                continue
            futures = groups[0].futures if len(groups) == 1 else [f for g in groups for f in g.futures]
            results = answer.value_lists if queue.prefix else answer.values
            if len(results) != len(futures):
                error = UnknownServerError(
                    f"The answer for {bucket} has {len(results)} values for {len(futures)} keys."
                )
                for group in groups:
                    group.fail(error)
                continue
            for future, result in zip(futures, results, strict=True):
                if future.done():
                    continue
                if queue.prefix:
                    future.set_result(list(result.values))
                else:
                    value = result.values  # stored values are never empty: HasField only for b""
                    future.set_result(value if value or result.HasField("values") else None)
        for bucket, groups in by_bucket.items():
            self._retry_or_fail(groups, UnknownServerError(f"No answer for {bucket}."))

    def _retry_or_fail(self, groups: list[_Keys], error: FlussError) -> None:
        now = self.loop.time()
        retry: list[_Keys] = []
        for group in groups:
            if (
                error.retriable
                and group.attempts <= self.max_retries
                and now < group.deadline
                and group.prune()
            ):
                retry.append(group)
            else:
                group.fail(error)
        if not retry:
            return
        if isinstance(error, _STALE_METADATA):
            for path in {g.path for g in retry}:
                self.metadata.invalidate(table_paths=[path])
        keys = sum(len(g.keys) for g in retry)
        log.info("retrying %d lookup(s) after %s: %s", keys, type(error).__name__, error)
        self._spawn(self._resubmit(retry))

    async def _resubmit(self, groups: list[_Keys]) -> None:
        try:
            await RETRY_BACKOFF.sleep(min(g.attempts for g in groups) - 1)
        except asyncio.CancelledError:
            for group in groups:
                self._uncount(group)
                group.fail(FlussError("The connection closed before the lookup was answered."))
            raise
        for group in groups:
            if group.prune():
                self._submit(group)
            else:
                self._uncount(group)

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        error = FlussError("The connection closed before the lookup was answered.")
        waiters, self._room_waiters = self._room_waiters, deque()
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)
        self._fail_queued(error)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        self._fail_queued(error)  # what the cancelled tasks queued again
        self._queues.clear()
        self.queued = 0

    def _fail_queued(self, error: FlussError) -> None:
        for queue in self._queues.values():
            for group in queue.waiting:
                group.fail(error)
        for groups in self._unrouted.values():
            for group in groups:
                group.fail(error)
