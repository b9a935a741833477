"""Fetching a scanner's buckets from their leaders, and turning the answers into Arrow.

One FetchLog request per leader at a time, carrying every subscribed bucket that leader serves and
that has no fetched data waiting to be consumed (``client.scanner.log.fetch.*`` set the byte limits
and the long-poll wait). Requests keep running between polls, so the next answer is usually ready
when the caller polls again.

An answer is decoded right away: every log batch is checked (CRC), decoded with the projected schema,
trimmed to the rows at or after the requested offset (a fetch may start with the batch that contains
it) and before the bucket's stop offset, and reordered to the projection the caller asked for. The
bucket's next position is the end of the last batch, or ``filtered_end_offset`` when the server
skipped batches that the filter ruled out.

An answer that names tiered (remote) segments instead of records is read through the scanner's
`RemoteLogReader`, which downloads those segments ahead into ``client.scanner.io.tmpdir`` off the
event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.client.backoff import Backoff
from strom.client.config import ClientConfig
from strom.client.metadata import MetadataCache
from strom.client.scanner.remote_log_reader import RemoteLogReader
from strom.client.scanner.scan_records import ScanBatch
from strom.client.scanner.table_scan import ReadPlan
from strom.common.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    FlussError,
    LeaderNotAvailableError,
    NetworkError,
    error_for_code,
)
from strom.common.supervision import TaskSet, spawn
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.log_batch import crc_is_valid, iter_batches
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb

__all__ = ["EARLIEST_OFFSET", "BucketPosition", "CompletedFetch", "LogFetcher"]

log = logging.getLogger(__name__)

EARLIEST_OFFSET = -2  # FetchLog's "from the start of the log" (pyfluss's fluss.EARLIEST_OFFSET)
CLIENT_FOLLOWER_ID = -1
REFRESH_INTERVAL = 0.1
# Between fetches to a tablet server whose previous fetch failed as a whole.
FETCH_BACKOFF = Backoff(initial=0.05, maximum=1.0, jitter=0.2)


@dataclass(slots=True)
class BucketPosition:
    """Where a subscribed bucket is: the next offset to read, and where to stop (exclusive)."""

    bucket: TableBucket
    offset: int
    stop: int | None = None
    high_watermark: int = -1

    @property
    def finished(self) -> bool:
        if self.stop is None:
            return False
        if self.stop <= 0:
            return True
        return self.offset >= 0 and self.offset >= self.stop


@dataclass(slots=True)
class CompletedFetch:
    """One bucket's part of a fetch answer, waiting to be consumed by a poll."""

    bucket: TableBucket
    fetch_offset: int  # the position it was fetched for; stale if the position moved since
    batches: deque[ScanBatch] = field(default_factory=deque)
    next_offset: int | None = None  # the position once everything here is consumed
    high_watermark: int = -1
    error: FlussError | None = None
    log_start_offset: int = -1


class LogFetcher:
    def __init__(
        self,
        table_path: TablePath,
        table_id: int,
        plan: ReadPlan,
        positions: dict[TableBucket, BucketPosition],
        metadata: MetadataCache,
        pool: ConnectionPool,
        config: ClientConfig,
    ) -> None:
        self.table_path = table_path
        self.table_id = table_id
        self.plan = plan
        self.positions = positions
        self.metadata = metadata
        self.pool = pool
        self.max_bytes = config.scanner_log_fetch_max_bytes
        self.max_bytes_for_bucket = config.scanner_log_fetch_max_bytes_for_bucket
        self.min_bytes = config.scanner_log_fetch_min_bytes
        self.max_wait_ms = int(config.scanner_log_fetch_wait_max_time.total_seconds() * 1000)
        # Projected batches are rebuilt by the server; Fluss's own client skips their CRC check too.
        self.check_crc = config.scanner_log_check_crc and plan.fetch_columns is None
        self.request_timeout = config.request_timeout.total_seconds() + self.max_wait_ms / 1000
        self.completed: deque[CompletedFetch] = deque()
        self.data_ready = asyncio.Event()
        self._pending_nodes: set[int] = set()
        # Nodes whose last fetch failed, and until when they are left alone.
        self._node_backoff: dict[int, float] = {}
        self._node_failures: dict[int, int] = {}
        self._in_flight: set[TableBucket] = set()
        self._tasks = TaskSet("log fetcher")
        self._refresh: asyncio.Task[None] | None = None
        self._next_refresh = 0.0
        self._decode_schema = plan.decode_schema
        # Tiered segments: downloaded ahead (client.scanner.remote-log.prefetch-num) and read locally.
        self.remote = RemoteLogReader(
            config.scanner_io_tmpdir,
            config.scanner_remote_log_prefetch_num,
            config.remote_file_download_thread_num,
        )
        self._closed = False

    # ------------------------------------------------------------------ requests

    def _fetchable(self) -> list[BucketPosition]:
        buffered = {c.bucket for c in self.completed}
        return [
            p
            for p in self.positions.values()
            if not p.finished and p.bucket not in buffered and p.bucket not in self._in_flight
        ]

    def send_fetches(self) -> None:
        """Send a fetch to every leader that has fetchable buckets and no fetch under way."""
        if self._closed:
            return
        by_leader: dict[int, list[BucketPosition]] = {}
        leaderless = False
        cluster = self.metadata.cluster
        now = asyncio.get_running_loop().time()
        for position in self._fetchable():
            leader = cluster.leader_for(position.bucket)
            if leader is None:
                leaderless = True
            elif leader.id not in self._pending_nodes and self._node_backoff.get(leader.id, 0.0) <= now:
                by_leader.setdefault(leader.id, []).append(position)
        if leaderless:
            self.refresh_metadata()
        for node_id, positions in by_leader.items():
            request = self._request(positions)
            self._pending_nodes.add(node_id)
            offsets = {p.bucket: p.offset for p in positions}
            self._in_flight.update(offsets)
            self._tasks.spawn(self._fetch(node_id, request, offsets), name="log-fetch")

    def _request(self, positions: list[BucketPosition]) -> pb.FetchLogRequest:
        request = pb.FetchLogRequest(
            follower_server_id=CLIENT_FOLLOWER_ID,
            max_bytes=self.max_bytes,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
        )
        table = request.tables_req.add(table_id=self.table_id)
        plan = self.plan
        # Every column of the schema this scanner was opened with: a column added by AlterTable while
        # it runs does not change what it decodes (the server projects only when the table changed).
        table.projection_pushdown_enabled = True
        table.projected_fields.extend(
            plan.fetch_columns if plan.fetch_columns is not None else range(len(plan.table_schema))
        )
        if plan.predicate_pb is not None:
            table.filter_predicate.CopyFrom(plan.predicate_pb)
        for position in positions:
            entry = table.buckets_req.add(
                bucket_id=position.bucket.bucket,
                fetch_offset=position.offset,
                max_fetch_bytes=self.max_bytes_for_bucket,
            )
            if position.bucket.partition_id is not None:
                entry.partition_id = position.bucket.partition_id
        return request

    async def _fetch(
        self, node_id: int, request: pb.FetchLogRequest, offsets: dict[TableBucket, int]
    ) -> None:
        try:
            node = self.metadata.tablet_server(node_id)
            if node is None:
                raise LeaderNotAvailableError(f"tablet server {node_id} is no longer known")
            response: pb.FetchLogResponse = await self.pool.request(
                node.host, node.port, ApiKey.FETCH_LOG, request, timeout=self.request_timeout
            )
            for table in response.tables_resp:
                if table.table_id != self.table_id:
                    continue
                for answer in table.buckets_resp:
                    bucket = TableBucket(
                        self.table_id,
                        answer.partition_id if answer.HasField("partition_id") else None,
                        answer.bucket_id,
                    )
                    fetch_offset = offsets.get(bucket)
                    if fetch_offset is None:
                        continue
                    remote: bytes | OSError | None = None
                    if answer.HasField("remote_log_fetch_info") and not answer.error_code:
                        try:
                            remote = await self.remote.read(answer.remote_log_fetch_info, fetch_offset)
                        except OSError as e:
                            remote = e
                    completed = self._complete(bucket, fetch_offset, answer, remote)
                    if completed is not None:
                        self.completed.append(completed)
            self._node_failures.pop(node_id, None)
            self._node_backoff.pop(node_id, None)
        except FlussError as e:
            log.info("fetch from tablet server %d failed: %s", node_id, e)
            self._back_off(node_id)
            if isinstance(e, NetworkError):
                self.metadata.invalidate(server_id=node_id)
            if e.invalid_metadata or e.retriable:
                self.refresh_metadata()
            else:
                for bucket, offset in offsets.items():
                    self.completed.append(CompletedFetch(bucket, offset, error=e))
        except Exception:  # an unreadable answer: try again later rather than lose the task silently
            log.exception("fetch from tablet server %d failed", node_id)
            self._back_off(node_id)
        finally:
            self._pending_nodes.discard(node_id)
            self._in_flight.difference_update(offsets)
            self.data_ready.set()

    def _back_off(self, node_id: int) -> None:
        failures = self._node_failures.get(node_id, 0)
        self._node_failures[node_id] = failures + 1
        delay = FETCH_BACKOFF.delay(failures)
        loop = asyncio.get_running_loop()
        self._node_backoff[node_id] = loop.time() + delay
        loop.call_later(delay, self.data_ready.set)  # wake a waiting poll to try again

    # ------------------------------------------------------------------ answers

    def _complete(
        self,
        bucket: TableBucket,
        fetch_offset: int,
        answer: pb.PbFetchLogRespForBucket,
        remote: bytes | OSError | None = None,
    ) -> CompletedFetch | None:
        """The answer for one bucket as a CompletedFetch; `remote` holds what was read from the
        remote segments the answer named (or why that failed)."""
        hwm = answer.high_watermark if answer.HasField("high_watermark") else -1
        log_start = answer.log_start_offset if answer.HasField("log_start_offset") else -1
        if answer.HasField("error_code") and answer.error_code != 0:
            error = error_for_code(answer.error_code, answer.error_message or None)
            # Leadership moved or storage hiccuped (Fluss's client also refreshes on a fenced epoch).
            if error.invalid_metadata or error.retriable or isinstance(error, FencedLeaderEpochError):
                log.info("fetch of %s failed (%s); refreshing metadata", bucket, error)
                self.refresh_metadata()
                return None
            return CompletedFetch(
                bucket, fetch_offset, error=error, high_watermark=hwm, log_start_offset=log_start
            )
        position = self.positions.get(bucket)
        stop = position.stop if position is not None else None
        completed = CompletedFetch(bucket, fetch_offset, high_watermark=hwm, log_start_offset=log_start)
        records = answer.records if answer.HasField("records") else b""
        if isinstance(remote, bytes):
            records = remote
        elif remote is not None:
            return CompletedFetch(
                bucket,
                fetch_offset,
                error=FlussError(
                    f"Bucket {bucket} of '{self.table_path}' at offset {fetch_offset}: cannot read its "
                    f"remote (tiered) log segment: {remote}"
                ),
                high_watermark=hwm,
                log_start_offset=log_start,
            )
        if records:
            try:
                self._decode(completed, records, stop)
            except FlussError as e:
                return CompletedFetch(
                    bucket, fetch_offset, error=e, high_watermark=hwm, log_start_offset=log_start
                )
        filtered_end = answer.filtered_end_offset if answer.HasField("filtered_end_offset") else -1
        if filtered_end >= 0 and (completed.next_offset is None or filtered_end > completed.next_offset):
            completed.next_offset = filtered_end
        if completed.next_offset is None and fetch_offset == EARLIEST_OFFSET and log_start >= 0:
            # Nothing to read from the start yet: the position is the log start itself.
            completed.next_offset = log_start
        if not completed.batches and completed.next_offset is None and hwm == -1:
            return None
        return completed

    def _decode(self, completed: CompletedFetch, records: bytes, stop: int | None) -> None:
        fetch_offset = completed.fetch_offset
        plan = self.plan
        for pos, header in iter_batches(records):
            if fetch_offset >= 0 and header.next_offset <= fetch_offset:
                continue  # wholly before the requested offset
            if self.check_crc and not crc_is_valid(records, pos, header):
                raise CorruptRecordError(
                    f"Fetched a log batch of bucket {completed.bucket} (offset {header.base_offset}) "
                    "whose CRC does not match its contents."
                )
            first = max(0, fetch_offset - header.base_offset) if fetch_offset >= 0 else 0
            end = header.record_count if stop is None else min(header.record_count, stop - header.base_offset)
            if end > first:
                batch, change_types = decode_arrow_batch(
                    records, pos, header, self._decode_schema, align=True
                )
                if first or end < header.record_count:
                    batch = batch.slice(first, end - first)
                    if change_types is not None:
                        change_types = change_types[first:end]
                completed.batches.append(
                    ScanBatch(
                        completed.bucket,
                        plan.shape(batch),
                        header.base_offset + first,
                        header.commit_timestamp,
                        change_types,
                    )
                )
            completed.next_offset = header.next_offset if stop is None else min(header.next_offset, stop)
            if stop is not None and completed.next_offset >= stop:
                break

    # ------------------------------------------------------------------ metadata

    def refresh_metadata(self) -> None:
        if self._refresh is not None or self._closed:
            return
        self._refresh = spawn(self._refresh_metadata(), name="scanner-metadata-refresh")

    async def _refresh_metadata(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            wait = self._next_refresh - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            partitions = {
                p.bucket.partition_id for p in self.positions.values() if p.bucket.partition_id is not None
            }
            try:
                await self.metadata.update(table_paths=[self.table_path], partition_ids=partitions)
            except FlussError as e:
                log.info("metadata refresh for scanning '%s' failed: %s", self.table_path, e)
        finally:
            self._next_refresh = loop.time() + REFRESH_INTERVAL
            self._refresh = None
            self.data_ready.set()  # pollers may send fetches to the new leaders

    # ------------------------------------------------------------------ lifecycle

    def drop(self, predicate: Callable[[CompletedFetch], bool]) -> None:
        """Forget buffered answers matching `predicate` (e.g. of an unsubscribed bucket)."""
        self.completed = deque(c for c in self.completed if not predicate(c))

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks) + ([self._refresh] if self._refresh is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.remote.close()

