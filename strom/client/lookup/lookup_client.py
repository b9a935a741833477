"""Batching lookups and prefix lookups into Lookup / PrefixLookup requests, one connection-wide queue
per leader, table and kind, shared by every lookuper and every concurrent caller of the connection.

A queue is sent when it holds ``client.lookup.max-batch-size`` keys, when fewer than two requests of
that queue are in flight (so a lone lookup goes out at once, on the next turn of the event loop,
together with the lookups issued in the same turn), or when its oldest key has waited
``client.lookup.batch-timeout``. While two requests are in flight, new keys gather into the next
batch: under load, batches grow towards the maximum by themselves, and a single caller pays no fixed
delay. At most ``client.lookup.max-inflight-requests`` requests are unanswered at once.

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
from strom.client.per_connection import PerConnection
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
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["LookupClient", "lookup_client_for"]

log = logging.getLogger(__name__)

RETRY_BACKOFF = Backoff(initial=0.05, maximum=1.0, jitter=0.2)
_STALE_METADATA = (NetworkError, NotLeaderOrFollowerError, UnknownTableOrBucketError, LeaderNotAvailableError)

_PIPELINE_DEPTH = 2  # requests of one queue in flight before new keys wait (module docstring)
_MIN_SPLIT = 32  # a batch is split in two only when each half has at least this many keys

_CLIENTS: PerConnection[LookupClient] = PerConnection(lambda connection: LookupClient(connection))


def lookup_client_for(connection: Connection) -> LookupClient:
    """The connection's lookup batching, started on first use and closed with the connection."""
    return _CLIENTS.get(connection)


@dataclass(slots=True)
class _Query:
    path: TablePath
    bucket: TableBucket
    key: bytes
    prefix: bool
    future: asyncio.Future[Any]
    deadline: float
    attempts: int = 0
    enqueued: float = 0.0
    insert: bool = False  # Lookup's insert_if_not_exists


@dataclass(slots=True)
class _Queue:
    node_id: int
    table_id: int
    prefix: bool
    insert: bool = False
    queries: deque[_Query] = field(default_factory=deque)
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
        self.timeout = config.request_timeout.total_seconds()
        self.loop = asyncio.get_running_loop()
        self._queues: dict[tuple[int, int, bool, bool], _Queue] = {}
        self._in_flight = 0
        self._dispatch_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        # Queries waiting for the leader of their bucket to be known, per table.
        self._unrouted: dict[TablePath, list[_Query]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    # ------------------------------------------------------------------ entry points

    def lookup(
        self, path: TablePath, bucket: TableBucket, key: bytes, *, insert: bool = False
    ) -> asyncio.Future[bytes | None]:
        """The stored value (schema id + row) of `key` in `bucket`, or None when there is none; with
        `insert` a missing key is inserted (auto-increment column filled) and its new row returned."""
        return self._submit_new(path, bucket, key, prefix=False, insert=insert)

    def prefix_lookup(
        self, path: TablePath, bucket: TableBucket, prefix: bytes
    ) -> asyncio.Future[list[bytes]]:
        """The stored values of every key of `bucket` that starts with `prefix`."""
        return self._submit_new(path, bucket, prefix, prefix=True)

    def lookup_many(
        self,
        path: TablePath,
        keys: Sequence[tuple[TableBucket, bytes]],
        *,
        prefix: bool = False,
        insert: bool = False,
        futures: Sequence[asyncio.Future[Any]] | None = None,
    ) -> list[asyncio.Future[Any]]:
        """`lookup` (or `prefix_lookup`) of many keys at once: one future per (bucket, key), the
        caller's own `futures` when given."""
        if self.closed:
            raise FlussError("The connection is closed.")
        deadline = self.loop.time() + self.timeout
        if futures is None:
            futures = [self.loop.create_future() for _ in keys]
        queries = [
            _Query(path, b, k, prefix, f, deadline, insert=insert)
            for (b, k), f in zip(keys, futures, strict=True)
        ]
        by_bucket: dict[TableBucket, list[_Query]] = {}
        for query in queries:
            group = by_bucket.get(query.bucket)
            if group is None:
                by_bucket[query.bucket] = [query]
            else:
                group.append(query)
        for group in by_bucket.values():
            self._submit_group(group)
        return [q.future for q in queries]

    def lookup_bucket(
        self,
        path: TablePath,
        bucket: TableBucket,
        keys: Sequence[bytes],
        futures: Sequence[asyncio.Future[Any]],
        *,
        insert: bool = False,
    ) -> None:
        """`lookup` of many keys of one bucket, answered through the caller's `futures`."""
        if self.closed:
            raise FlussError("The connection is closed.")
        deadline = self.loop.time() + self.timeout
        self._submit_group(
            [
                _Query(path, bucket, k, False, f, deadline, insert=insert)
                for k, f in zip(keys, futures, strict=True)
            ]
        )

    def _submit_new(
        self, path: TablePath, bucket: TableBucket, key: bytes, prefix: bool, insert: bool = False
    ) -> asyncio.Future[Any]:
        if self.closed:
            raise FlussError("The connection is closed.")
        future: asyncio.Future[Any] = self.loop.create_future()
        deadline = self.loop.time() + self.timeout
        self._submit(_Query(path, bucket, key, prefix, future, deadline, insert=insert))
        return future

    # ------------------------------------------------------------------ queueing

    def _submit(self, query: _Query) -> None:
        """Queue one query (the path of every single-key lookup: no lists)."""
        if query.future.done():
            return  # the caller gave up
        queue = self._queue_for(query)
        if queue is None:
            self._wait_for_leader([query])
            return
        query.enqueued = self.loop.time()
        queue.queries.append(query)
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            self.loop.call_soon(self._dispatch)

    def _submit_group(self, queries: list[_Query]) -> None:
        """Queue queries of one bucket (and kind) for the bucket's leader."""
        queries = [q for q in queries if not q.future.done()]  # callers that gave up
        if not queries:
            return
        queue = self._queue_for(queries[0])
        if queue is None:
            self._wait_for_leader(queries)
            return
        now = self.loop.time()
        for query in queries:
            query.enqueued = now
        queue.queries.extend(queries)
        self._schedule_dispatch()

    def _queue_for(self, query: _Query) -> _Queue | None:
        """The queue of the query's bucket leader, table and kind; None when no leader is known."""
        leader = self.metadata.leader_for(query.bucket)
        if leader is None:
            return None
        key = (leader.id, query.bucket.table_id, query.prefix, query.insert)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(leader.id, query.bucket.table_id, query.prefix, query.insert)
        return queue

    def _wait_for_leader(self, queries: list[_Query]) -> None:
        path = queries[0].path
        waiting = self._unrouted.get(path)
        if waiting is None:
            self._unrouted[path] = list(queries)
            self._spawn(self._route_later(path))
        else:
            waiting.extend(queries)

    async def _route_later(self, path: TablePath) -> None:
        """Refresh the leaders of a table whose queries have no known leader, then queue them again."""
        error: FlussError | None = None
        try:
            partition_ids = {q.bucket.partition_id for q in self._unrouted.get(path, [])}
            ids = [p for p in partition_ids if p is not None]
            await self.metadata.update(table_paths=[path], partition_ids=ids)
        except FlussError as e:
            error = e
        queries = self._unrouted.pop(path, [])
        now = self.loop.time()
        retry: list[_Query] = []
        for query in queries:
            if self.metadata.leader_for(query.bucket) is not None:
                self._submit(query)
                continue
            query.attempts += 1
            if error is not None and not error.retriable:
                _fail(query, error)
            elif now >= query.deadline or query.attempts > self.max_retries:
                _fail(query, error or LeaderNotAvailableError(f"No leader is known for {query.bucket}."))
            else:
                retry.append(query)
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
            queries = queue.queries
            while queries and queries[0].future.done():
                queries.popleft()  # callers that gave up
            while queries and self._in_flight < self.max_in_flight:
                due = queries[0].enqueued + self.linger
                if len(queries) < self.max_batch and queue.in_flight >= _PIPELINE_DEPTH and now < due:
                    next_due = due if next_due is None else min(next_due, due)
                    break
                size = min(self.max_batch, len(queries))
                if not queue.in_flight and size >= 2 * _MIN_SPLIT:
                    size = (size + 1) // 2
                batch = [queries.popleft() for _ in range(size)]
                batch = [q for q in batch if not q.future.done()]
                if batch:
                    queue.in_flight += 1
                    self._in_flight += 1
                    self._spawn(self._send(queue, batch))
            if not queries and not queue.in_flight:
                del self._queues[key]
        if next_due is not None and not self.closed:
            self._timer = self.loop.call_at(next_due, self._schedule_dispatch)

    def _spawn(self, work: Any) -> None:
        task = self.loop.create_task(work)
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("lookup task failed", exc_info=t.exception())

        task.add_done_callback(done)

    # ------------------------------------------------------------------ sending

    async def _send(self, queue: _Queue, batch: list[_Query]) -> None:
        try:
            await self._send_batch(queue, batch)
        except asyncio.CancelledError:
            for query in batch:
                _fail(query, FlussError("The connection closed before the lookup was answered."))
            raise
        except Exception as e:  # a bug must not leave callers waiting forever
            log.exception("lookup request failed unexpectedly")
            for query in batch:
                _fail(query, UnknownServerError(f"The lookup failed unexpectedly: {e!r}"))
        finally:
            queue.in_flight -= 1
            self._in_flight -= 1
            if queue.queries or not queue.in_flight:
                self._schedule_dispatch()

    async def _send_batch(self, queue: _Queue, batch: list[_Query]) -> None:
        by_bucket: dict[TableBucket, list[_Query]] = {}
        last: TableBucket | None = None
        group: list[_Query] = []
        for query in batch:
            query.attempts += 1
            # queues hold runs of one bucket: hash a bucket only where a run starts
            if query.bucket is not last:
                last = query.bucket
                group = by_bucket.setdefault(last, [])
            group.append(query)
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
        for bucket, queries in by_bucket.items():
            entry = request.buckets_req.add(bucket_id=bucket.bucket)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
            entry.keys.extend(q.key for q in queries)
        node = self.metadata.tablet_server(queue.node_id)
        try:
            if node is None:
                raise LeaderNotAvailableError(f"Tablet server {queue.node_id} is no longer known.")
            response = await self.pool.request(node.host, node.port, api, request, timeout=self.timeout)
        except FlussError as e:
            if isinstance(e, NetworkError | RequestTimeoutError):
                self.metadata.invalidate(server_id=queue.node_id)
            self._retry_or_fail(batch, e)
            return
        except OSError as e:
            self.metadata.invalidate(server_id=queue.node_id)
            self._retry_or_fail(batch, NetworkError(f"Lookup to tablet server {queue.node_id} failed: {e}"))
            return
        answered: set[TableBucket] = set()
        for answer in response.buckets_resp:
            partition_id = answer.partition_id if answer.HasField("partition_id") else None
            bucket = TableBucket(queue.table_id, partition_id, answer.bucket_id)
            queries = by_bucket.get(bucket)
            if queries is None or bucket in answered:
                continue
            answered.add(bucket)
            if answer.HasField("error_code") and answer.error_code != 0:
                self._retry_or_fail(queries, error_for_code(answer.error_code, answer.error_message or None))
                continue
            results = answer.value_lists if queue.prefix else answer.values
            if len(results) != len(queries):
                error = UnknownServerError(
                    f"The answer for {bucket} has {len(results)} values for {len(queries)} keys."
                )
                for query in queries:
                    _fail(query, error)
                continue
            for query, result in zip(queries, results, strict=True):
                future = query.future
                if future.done():
                    continue
                if queue.prefix:
                    future.set_result(list(result.values))
                else:
                    value = result.values  # stored values are never empty: HasField only for b""
                    future.set_result(value if value or result.HasField("values") else None)
        for bucket, queries in by_bucket.items():
            if bucket not in answered:
                self._retry_or_fail(queries, UnknownServerError(f"No answer for {bucket}."))

    def _retry_or_fail(self, queries: list[_Query], error: FlussError) -> None:
        now = self.loop.time()
        retry = [
            q
            for q in queries
            if error.retriable and q.attempts <= self.max_retries and now < q.deadline and not q.future.done()
        ]
        for query in queries:
            if query not in retry:
                _fail(query, error)
        if not retry:
            return
        if isinstance(error, _STALE_METADATA):
            for query in retry:
                self.metadata.invalidate(table_paths=[query.path])
        log.info("retrying %d lookup(s) after %s: %s", len(retry), type(error).__name__, error)
        self._spawn(self._resubmit(retry))

    async def _resubmit(self, queries: list[_Query]) -> None:
        try:
            await RETRY_BACKOFF.sleep(min(q.attempts for q in queries) - 1)
        except asyncio.CancelledError:
            for query in queries:
                _fail(query, FlussError("The connection closed before the lookup was answered."))
            raise
        for query in queries:
            self._submit(query)

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        error = FlussError("The connection closed before the lookup was answered.")
        for queue in self._queues.values():
            for query in queue.queries:
                _fail(query, error)
        for queries in self._unrouted.values():
            for query in queries:
                _fail(query, error)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        for queue in self._queues.values():
            for query in queue.queries:
                _fail(query, error)
        self._queues.clear()


def _fail(query: _Query, error: BaseException) -> None:
    if not query.future.done():
        query.future.set_exception(error)
