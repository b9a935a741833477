"""The sender: a background task that moves ready batches from the accumulator to bucket leaders.

Each round it (1) obtains a writer id first when the writer is idempotent, (2) asks the accumulator
which leaders have ready buckets, (3) drains them into one ProduceLog request per leader and table
(one batch per bucket), builds the batch bytes in drain order and sends them without waiting for
the answers, and (4) goes round again at once when it sent something (a bucket's next batches may
go out too, up to client.writer.max-inflight-requests-per-bucket unanswered), else sleeps until
something changes: an append, an answer, a refresh, or the next linger or retry deadline.

Answers are handled per bucket, as Fluss's writer does:

* success, DUPLICATE_SEQUENCE, and OUT_OF_ORDER_SEQUENCE for a sequence already acknowledged
  complete the batch;
* the errors Fluss retries (network, leadership, storage, timeouts...) and sequence errors that
  are fallout of an earlier failure put the batch back at the head of its bucket with backoff,
  keeping its writer id and sequence so the leader can drop a copy it already appended;
* anything else fails the batch (and may reset the writer id, see `idempotence`).

NETWORK, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TABLE_OR_BUCKET and LEADER_NOT_AVAILABLE also refresh the
metadata of the affected tables; buckets without a known leader are refreshed as well, at most once
per `REFRESH_INTERVAL`. A partition that turns out not to exist is created through the admin API
when client.writer.dynamic-create-partition.enabled is on (its batches wait until the metadata
shows it, for up to client.request-timeout); with the option off its queued batches fail with an
error naming it and the option.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from google.protobuf.message import Message

from strom.client.backoff import Backoff
from strom.client.config import ClientConfig
from strom.client.metadata import MetadataCache
from strom.client.writer.accumulator import RecordAccumulator
from strom.client.writer.errors import INVALID_METADATA_ERRORS, is_retriable_write_error
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.write_batch import WriteBatch
from strom.common.config import CLIENT_WRITER_DYNAMIC_CREATE_PARTITION_ENABLED
from strom.common.errors import (
    DuplicateSequenceError,
    FlussError,
    LeaderNotAvailableError,
    NetworkError,
    OutOfOrderSequenceError,
    PartitionNotExistError,
    TableNotExistError,
    UnknownServerError,
    UnknownTableOrBucketError,
    UnknownWriterIdError,
    error_for_code,
)
from strom.common.partition import parse_partition_name
from strom.common.supervision import TaskSet, supervise
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.record.log_batch import NO_BATCH_SEQUENCE, NO_WRITER_ID
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb

__all__ = ["Sender", "add_bucket_requests"]

log = logging.getLogger(__name__)

# Creates a partition of a table from its spec (partition key -> value); a no-op when it exists.
PartitionCreator = Callable[[TablePath, dict[str, str]], Awaitable[None]]

REFRESH_INTERVAL = 0.1  # least time between two refreshes for buckets without a leader
INIT_WRITER_BACKOFF = Backoff(initial=0.1, maximum=1.0, jitter=0.2)
# Batches bigger than this are built (serialized and compressed) off the event loop.
BUILD_IN_THREAD_BYTES = 256 << 10


class Sender:
    # The request that carries batches to their leaders, and its name in error messages.
    api_key = ApiKey.PRODUCE_LOG
    api_name = "ProduceLog"

    def __init__(
        self,
        metadata: MetadataCache,
        pool: ConnectionPool,
        config: ClientConfig,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager,
        create_partition: PartitionCreator | None = None,
    ) -> None:
        """`create_partition` creates a partition that a write names and the cluster does not know
        (client.writer.dynamic-create-partition.enabled); None fails such writes."""
        self.metadata = metadata
        self.create_partition = create_partition
        self.pool = pool
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.acks = config.acks
        self.retries = config.writer_retries
        self.max_request_size = config.writer_request_max_size
        self.request_timeout = config.request_timeout.total_seconds()
        self._sends = TaskSet("writer sends")
        self._side_tasks = TaskSet("writer")
        self._init_task: asyncio.Task[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._stale: set[PhysicalTablePath] = set()
        # Partitions this sender created for writes, and when (until the metadata shows them).
        self._created_partitions: dict[PhysicalTablePath, float] = {}
        self._next_refresh = 0.0
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None:
            self._task = supervise(self._run, name="strom-writer-sender")

    async def stop(self) -> None:
        """Stop after every queued and in-flight batch finished (callers flush first)."""
        self._stopping = True
        self.accumulator.wakeup.set()
        if self._task is not None:
            await self._task
        side = list(self._side_tasks)  # a metadata refresh nobody waits for any more
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)

    async def abort(self) -> None:
        """Stop at once; whatever is still queued or in flight fails."""
        self._stopping = True
        for task in [self._task, *self._sends, *self._side_tasks]:
            if task is not None:
                task.cancel()
        tasks = [t for t in [self._task, *self._sends, *self._side_tasks] if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        acc = self.accumulator
        loop = asyncio.get_running_loop()
        while True:
            acc.wakeup.clear()
            if self._stopping and not acc.has_incomplete() and not self._sends:
                return
            delay: float | None = None
            try:
                delay = await self._run_once(loop.time())
            except Exception:  # never let the loop die: batches would hang forever
                log.exception("unexpected error in the writer's sender")
                delay = 0.1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acc.wakeup.wait(), delay)

    async def _run_once(self, now: float) -> float | None:
        acc = self.accumulator
        idem = self.idempotence
        if idem.enabled and not idem.has_writer_id:
            if acc.has_queued() and self._init_task is None:
                self._init_task = self._spawn_side(self._init_writer_id())
            return None
        cluster = self.metadata.cluster
        check = acc.ready(cluster)
        delay = check.next_delay
        if check.unknown:
            self._stale |= check.unknown
            if self._refresh_task is None:
                wait = self._next_refresh - now
                if wait <= 0:
                    self._start_refresh()
                else:
                    delay = wait if delay is None else min(delay, wait)
        if not check.nodes:
            return delay
        drained = acc.drain(cluster, check.nodes, self.max_request_size)
        for node_id, batches in drained.items():
            by_table: dict[int, list[WriteBatch]] = {}
            for batch in batches:
                by_table.setdefault(batch.format.table_id, []).append(batch)
            for table_id, table_batches in by_table.items():
                built = await self._build(table_batches)
                if built:
                    task = self._sends.spawn(self._send_guarded(node_id, table_id, built), name="writer-send")
                    task.add_done_callback(self._send_done)
        if drained:
            # A drain takes one batch per bucket: the next ones of a bucket may go out at once too,
            # up to client.writer.max-inflight-requests-per-bucket, without waiting for an answer.
            return 0.0
        return delay

    def _send_done(self, task: asyncio.Task[None]) -> None:
        self.accumulator.wakeup.set()  # the TaskSet logs a failure

    def _spawn_side(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._side_tasks.spawn(work, name="writer-side-task")
        task.add_done_callback(self._send_done)
        return task

    # ------------------------------------------------------------------ writer id

    async def _init_writer_id(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        attempt = 0
        try:
            while True:
                paths = self.accumulator.queued_table_paths()
                if not paths:
                    return
                request = pb.InitWriterRequest()
                for path in paths:
                    request.table_path.add(database_name=path.database_name, table_name=path.table_name)
                try:
                    node = self.metadata.cluster.random_tablet_server()
                    if node is None:
                        await self.metadata.bootstrap()
                        node = self.metadata.cluster.random_tablet_server()
                    if node is None:
                        raise LeaderNotAvailableError(
                            "No tablet server is available to allocate a writer id."
                        )
                    response = await self.pool.request(
                        node.host, node.port, ApiKey.INIT_WRITER, request, timeout=self.request_timeout
                    )
                    self.idempotence.set_writer_id(response.writer_id)
                    log.debug("writer id %d allocated", response.writer_id)
                    return
                except FlussError as e:
                    if not e.retriable or loop.time() >= deadline:
                        log.error("cannot allocate a writer id: %s", e)
                        self.accumulator.fail_all_queued(
                            type(e)(f"Cannot allocate a writer id for idempotent writes: {e}")
                        )
                        return
                    log.info("writer id allocation failed (%s); retrying", e)
                await INIT_WRITER_BACKOFF.sleep(attempt)
                attempt += 1
        finally:
            self._init_task = None

    # ------------------------------------------------------------------ sending

    async def _build(self, batches: list[WriteBatch]) -> list[tuple[WriteBatch, bytes | bytearray]]:
        """The bytes of each batch, in order; a batch that cannot be built fails on its own."""

        def build_all() -> list[tuple[WriteBatch, bytes | bytearray | BaseException]]:
            out: list[tuple[WriteBatch, bytes | bytearray | BaseException]] = []
            for batch in batches:
                try:
                    out.append((batch, batch.payload()))
                except Exception as e:  # bad row values surface here
                    out.append((batch, e))
            return out

        if sum(b.payload_size for b in batches if b.attempts == 0) >= BUILD_IN_THREAD_BYTES:
            # Serializing and compressing releases the GIL: keep the event loop responsive.
            results = await asyncio.to_thread(build_all)
        else:
            results = build_all()
        built: list[tuple[WriteBatch, bytes | bytearray]] = []
        for batch, result in results:
            if isinstance(result, BaseException):
                error = result if isinstance(result, FlussError) else ValueError(str(result))
                self._fail(batch, error, adjust_sequences=True)
            else:
                built.append((batch, result))
        return built

    async def _send_guarded(
        self, node_id: int, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]
    ) -> None:
        try:
            await self.send_batches(node_id, table_id, built)
        except Exception as e:  # a bug must not leave batches in flight forever
            log.exception("sending to tablet server %d failed unexpectedly", node_id)
            error = UnknownServerError(f"Sending the batch failed unexpectedly: {e!r}")
            for batch, _ in built:
                if not batch.done:
                    self._fail(batch, error, adjust_sequences=False)

    async def send_batches(
        self, node_id: int, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]
    ) -> None:
        """Send one leader's built batches of one table and settle each with the leader's answer."""
        await self.send_request(node_id, self.build_request(table_id, built), built)

    def build_request(self, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]) -> Message:
        """The request carrying `built` (one batch per bucket) to their leader."""
        request = pb.ProduceLogRequest(
            acks=self.acks, table_id=table_id, timeout_ms=int(self.request_timeout * 1000)
        )
        add_bucket_requests(request, built)
        return request

    def answer_offset(self, answer: Any) -> int:
        """The offset a bucket's successful answer reports for its batch (-1 when it has none)."""
        return answer.base_offset if answer.HasField("base_offset") else -1

    async def send_request(
        self, node_id: int, request: Message, built: list[tuple[WriteBatch, bytes | bytearray]]
    ) -> None:
        """Send a request built by `build_request` and settle its batches with the answer."""
        batches = [b for b, _ in built]
        node = self.metadata.tablet_server(node_id)
        if node is None:
            self._handle_errors(
                batches, LeaderNotAvailableError(f"Tablet server {node_id} is no longer known.")
            )
            return
        try:
            response: Any = await self.pool.request(
                node.host, node.port, self.api_key, request, timeout=self.request_timeout + 5
            )
        except FlussError as e:
            if isinstance(e, NetworkError):
                self.metadata.invalidate(server_id=node_id)
            self._handle_errors(batches, e)
            return
        except OSError as e:
            self.metadata.invalidate(server_id=node_id)
            self._handle_errors(batches, NetworkError(f"{self.api_name} to {node} failed: {e}"))
            return
        by_bucket = {(b.table_bucket.partition_id, b.bucket_id): b for b in batches if b.table_bucket}
        stale: set[PhysicalTablePath] = set()
        for answer in response.buckets_resp:
            key = (answer.partition_id if answer.HasField("partition_id") else None, answer.bucket_id)
            batch = by_bucket.pop(key, None)
            if batch is None:
                continue
            if answer.HasField("error_code") and answer.error_code != 0:
                error = error_for_code(answer.error_code, answer.error_message or None)
                if self._handle_error(batch, error):
                    stale.add(batch.path)
            else:
                self._complete(batch, self.answer_offset(answer))
        for batch in by_bucket.values():
            if self._handle_error(batch, UnknownServerError(f"No answer for bucket {batch.table_bucket}.")):
                stale.add(batch.path)
        self._refresh_soon(stale)

    # ------------------------------------------------------------------ outcomes

    def _handle_errors(self, batches: Iterable[WriteBatch], error: FlussError) -> None:
        stale = {b.path for b in batches if self._handle_error(b, error)}
        self._refresh_soon(stale)

    def _handle_error(self, batch: WriteBatch, error: FlussError) -> bool:
        """Retry, complete or fail one batch; True when its metadata should be refreshed."""
        idem = self.idempotence
        bucket = batch.table_bucket
        assert bucket is not None
        if isinstance(error, DuplicateSequenceError):
            self._complete(batch, -1)
            return False
        if (
            isinstance(error, OutOfOrderSequenceError)
            and idem.enabled
            and idem.is_already_committed(bucket, batch.batch_sequence)
        ):
            # The batch was written; only the answer to an earlier attempt was lost.
            self._complete(batch, -1)
            return False
        stale = isinstance(error, INVALID_METADATA_ERRORS)
        rescaled = self._rescaled(batch, error)
        if rescaled is not None:
            # routed by a bucket count the table no longer has: sending it again cannot succeed
            self._fail(batch, rescaled, adjust_sequences=True)
            return False
        if self._can_retry(batch, error):
            if idem.enabled and batch.writer_id != NO_WRITER_ID and idem.writer_id != batch.writer_id:
                self._fail(
                    batch,
                    UnknownWriterIdError(
                        f"The writer id changed from {batch.writer_id} to {idem.writer_id} since this batch "
                        f"was first sent, so it cannot be retried safely: {error}"
                    ),
                    adjust_sequences=False,
                )
                return stale
            log.info("retrying %s after %s: %s", batch, type(error).__name__, error)
            self.accumulator.reenqueue(batch)
            return stale
        self._fail(batch, error, adjust_sequences=batch.attempts <= self.retries)
        return stale

    def _rescaled(self, batch: WriteBatch, error: FlussError) -> FlussError | None:
        """The error for a batch refused because its table was rescaled since it was routed (a Strom
        cluster refuses such keys with UNKNOWN_TABLE_OR_BUCKET), once the metadata shows the new
        count; None otherwise (the first refusal is retried after the metadata refresh it asks for)."""
        routed = getattr(batch.format, "bucket_count", None)
        if not isinstance(error, UnknownTableOrBucketError) or routed is None:
            return None
        current = self.metadata.table_info(batch.format.table_path)
        if current is None or current.bucket_count == routed:
            return None
        return UnknownTableOrBucketError(
            f"Table '{batch.format.table_path}' now has {current.bucket_count} buckets, and this batch was "
            f"routed by {routed}: get the table again (Connection.get_table) and write the rows again. "
            f"The server said: {error.message}"
        )

    def _can_retry(self, batch: WriteBatch, error: FlussError) -> bool:
        if batch.attempts > self.retries or batch.done:  # attempts counts the first send too
            return False
        if is_retriable_write_error(error):
            return True
        if self.idempotence.enabled and batch.batch_sequence != NO_BATCH_SEQUENCE and batch.table_bucket:
            return self.idempotence.can_retry_for_error(
                batch.table_bucket, batch.batch_sequence, batch.batch_id, error
            )
        return False

    def _complete(self, batch: WriteBatch, base_offset: int) -> None:
        if self.idempotence.enabled and batch.batch_sequence != NO_BATCH_SEQUENCE and batch.table_bucket:
            self.idempotence.completed(batch.table_bucket, batch.batch_id, batch.writer_id)
        self.accumulator.finished(batch)
        batch.complete(base_offset)

    def _fail(self, batch: WriteBatch, error: BaseException, adjust_sequences: bool) -> None:
        if self.idempotence.enabled and batch.batch_sequence != NO_BATCH_SEQUENCE and batch.table_bucket:
            self.idempotence.failed(
                batch.table_bucket, batch.batch_id, batch.writer_id, error, adjust_sequences
            )
        self.accumulator.finished(batch)
        if batch.fail(error):
            log.warning("write of %s failed: %s", batch, error)

    # ------------------------------------------------------------------ metadata

    def _refresh_soon(self, paths: set[PhysicalTablePath]) -> None:
        if not paths:
            return
        self._stale |= paths
        for path in paths:
            self.accumulator.forget_partition_id(path)
        if self._refresh_task is None:
            self._start_refresh()

    def _start_refresh(self) -> None:
        self._refresh_task = self._spawn_side(self._refresh())

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._stale:
                paths, self._stale = self._stale, set()
                tables = {p.table_path for p in paths}
                partitions = [p for p in paths if p.partition_name is not None]
                await self._refresh_tables(tables)
                for path in partitions:
                    await self._refresh_partition(path)
        finally:
            self._next_refresh = loop.time() + REFRESH_INTERVAL
            self._refresh_task = None

    async def _refresh_tables(self, tables: set[TablePath]) -> None:
        for table in tables:
            try:
                await self.metadata.update(table_paths=[table])
            except TableNotExistError as e:
                self.accumulator.fail_queued(
                    [p for p in self.accumulator.queued_paths() if p.table_path == table],
                    lambda _p, e=e, t=table: TableNotExistError(f"Table '{t}' does not exist: {e}"),
                )
            except FlussError as e:
                log.info("metadata refresh of %s failed: %s", table, e)

    async def _refresh_partition(self, path: PhysicalTablePath) -> None:
        try:
            visible = await self._partition_visible(path)
        except FlussError as e:
            if e.retriable:
                log.info("metadata refresh of %s failed: %s", path, e)
            else:  # e.g. a partition value the cluster refuses: the writes that name it fail
                self._created_partitions.pop(path, None)
                self.accumulator.fail_queued([path], lambda _p, e=e: e)
            return
        if visible:
            self._created_partitions.pop(path, None)
            return
        created = self._created_partitions.get(path)
        if created is not None and asyncio.get_running_loop().time() - created < self.request_timeout:
            # Created, but the server asked has not learnt of it yet: the batches stay queued and
            # the next refresh (REFRESH_INTERVAL later) asks again.
            return
        self._created_partitions.pop(path, None)
        hint = (
            f"it was created but did not become visible within {self.request_timeout:.0f}s"
            if created is not None
            else f"create it first, or set {CLIENT_WRITER_DYNAMIC_CREATE_PARTITION_ENABLED.key}"
        )
        self.accumulator.fail_queued(
            [path],
            lambda p: PartitionNotExistError(
                f"Table partition '{p.partition_name}' of table '{p.table_path}' does not exist; {hint}."
            ),
        )

    async def _partition_visible(self, path: PhysicalTablePath) -> bool:
        """Refresh the partition's metadata, creating the partition first (once) when the cluster
        does not know it and dynamic creation is on; False while it is not visible."""
        try:
            await self.metadata.update(table_paths=[path.table_path], partition_paths=[path])
            return True
        except PartitionNotExistError:
            if self.create_partition is None or path in self._created_partitions:
                return False
        await self._create_partition(path)
        self._created_partitions[path] = asyncio.get_running_loop().time()
        try:
            await self.metadata.update(table_paths=[path.table_path], partition_paths=[path])
            return True
        except PartitionNotExistError:
            return False

    async def _create_partition(self, path: PhysicalTablePath) -> None:
        """Create the partition a write names, as Fluss's client does: the spec comes from the
        partition name and the table's partition keys; a concurrent creator is no error."""
        assert self.create_partition is not None and path.partition_name is not None
        info = self.metadata.table_info(path.table_path)
        if info is None:
            raise TableNotExistError(f"Table '{path.table_path}' does not exist.")
        spec = parse_partition_name(info.partition_keys, path.partition_name)
        log.info("creating partition %s of %s for a write", path.partition_name, path.table_path)
        await self.create_partition(path.table_path, dict(spec.items()))


def add_bucket_requests(request: Any, built: list[tuple[WriteBatch, bytes | bytearray]]) -> None:
    """One ``buckets_req`` entry per built batch (ProduceLog and PutKv share the shape); counts the
    attempt."""
    for batch, payload in built:
        assert batch.table_bucket is not None
        entry = request.buckets_req.add(bucket_id=batch.bucket_id, records=bytes(payload))
        if batch.table_bucket.partition_id is not None:
            entry.partition_id = batch.table_bucket.partition_id
        batch.attempts += 1
