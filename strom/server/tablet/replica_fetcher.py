"""Follower replication: one fetch loop per leader server, pulling the buckets this server follows with
the ordinary FetchLog API (carrying our server id), appending what arrives as a follower and adopting
the leader's high watermark.

In a new leader term a follower first truncates by leader epoch (KIP-101): it asks the leader where
its own latest epoch ends (OffsetForLeaderEpoch, Strom-only key 9003), cuts its log there (never below
what the leader has) and copies the leader's epoch entries as the data they describe arrives. Only a
log without epoch entries (written before Strom kept them) falls back to its high watermark.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from strom.common.errors import FlussError, SchemaNotExistError, StorageError
from strom.common.supervision import supervise
from strom.common.table_bucket import TableBucket
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.tablet.log.leader_epoch import UNDEFINED, EpochEntry
from strom.server.tablet.log.log_tablet import AppendResult, LogTablet, wait_durable
from strom.server.tablet.replica_manager import Replica

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 19
# A new leader may not have taken over yet when its followers ask it where to truncate: ask again soon.
TRUNCATION_RETRY = 0.05


@dataclass(frozen=True, slots=True)
class _Sent:
    """A bucket's state when its fetch was sent: the answer applies only if it is still the same."""

    leader_epoch: int
    log: LogTablet
    fetch_offset: int


def _term_changed(replica: Replica, leader: int, sent: _Sent) -> str | None:
    """Why the replica is no longer in the term (leader, epoch, log) of `sent` (None: it still is)."""
    if replica.leader != leader or replica.leader_epoch != sent.leader_epoch:
        return (
            f"sent in leader epoch {sent.leader_epoch}, the replica is now in epoch {replica.leader_epoch} "
            f"with leader {replica.leader}"
        )
    if replica.log is not sent.log:
        return "the replica's log was reopened"
    return None


def _stale_answer(replica: Replica, leader: int, sent: _Sent) -> str | None:
    """Why an answer from `leader` to a fetch sent in state `sent` no longer applies (None: it does)."""
    changed = _term_changed(replica, leader, sent)
    if changed:
        return changed
    if replica.needs_truncation:
        return "the replica must first truncate by leader epoch"
    if sent.log.log_end_offset != sent.fetch_offset:
        return f"the log end moved from {sent.fetch_offset} to {sent.log.log_end_offset} meanwhile"
    return None


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    max_bytes: int
    max_bytes_per_bucket: int
    max_wait_ms: int
    backoff: float
    min_bytes: int = 1


class ReplicaFetcherManager:
    def __init__(
        self,
        server_id: int,
        pool: ConnectionPool,
        address_of: Callable[[int], tuple[str, int] | None],
        settings: FetcherSettings,
        on_replicated: Callable[[int], None] = lambda size: None,
        on_unknown_schema: Callable[[int], None] = lambda table_id: None,
        on_storage_error: Callable[[Replica, BaseException], None] = lambda replica, error: None,
    ) -> None:
        self.server_id = server_id
        # a batch of a schema id this server does not know (table id): it missed an AlterTable's
        # UpdateMetadata and must learn the schema from the coordinator, or never catch up again
        self.on_unknown_schema = on_unknown_schema
        self.on_storage_error = on_storage_error
        self.on_replicated = on_replicated  # bytes appended as a follower (metrics)
        self.pool = pool
        self.address_of = address_of
        self.settings = settings
        self.followed: dict[int, dict[TableBucket, Replica]] = defaultdict(dict)  # leader -> buckets
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def follow(self, replica: Replica) -> None:
        self.unfollow(replica.bucket)
        leader = replica.leader
        if leader is None or leader == self.server_id:
            return
        self.followed[leader][replica.bucket] = replica
        task = self.tasks.get(leader)
        if task is None or task.done():
            self.tasks[leader] = supervise(lambda: self._run(leader), name=f"replica-fetcher-{leader}")

    def unfollow(self, bucket: TableBucket) -> None:
        for buckets in self.followed.values():
            buckets.pop(bucket, None)

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()

    async def _run(self, leader: int) -> None:
        while True:
            buckets = {
                b: r for b, r in self.followed[leader].items() if r.leader == leader and r.log is not None
            }
            if not buckets:
                if not self.followed[leader]:
                    self.tasks.pop(leader, None)
                    return
                await asyncio.sleep(self.settings.backoff)
                continue
            address = self.address_of(leader)
            if address is None:
                await asyncio.sleep(self.settings.backoff)
                continue
            truncating = {b: r for b, r in buckets.items() if r.needs_truncation}
            if truncating:
                try:
                    await self._truncate(leader, address, truncating)
                except FlussError as e:
                    log.debug("OffsetForLeaderEpoch to leader %d failed: %s", leader, e)
                buckets = {b: r for b, r in buckets.items() if not r.needs_truncation}
                if not buckets:
                    await asyncio.sleep(TRUNCATION_RETRY)
                    continue
            # while some bucket still waits to truncate, do not long-poll: ask again right after
            max_wait_ms = 0 if any(r.needs_truncation for r in truncating.values()) else None
            sent = {
                b: _Sent(r.leader_epoch, r.log_tablet(), r.log_tablet().log_end_offset)
                for b, r in buckets.items()
            }
            try:
                response = await self.pool.request(
                    *address,
                    ApiKey.FETCH_LOG,
                    self._request(buckets, max_wait_ms),
                    timeout=self.settings.max_wait_ms / 1000 + 30,
                )
            except FlussError as e:
                log.debug("fetch from leader %d failed: %s", leader, e)
                await asyncio.sleep(self.settings.backoff)
                continue
            errors, syncs = self._apply(leader, buckets, sent, response)
            # log.flush.interval-messages: the next fetch reports our log end to the leader, which
            # counts it towards acknowledging acks=all writes; it waits for the fsync of what came
            for appended in syncs:
                try:
                    await wait_durable(appended)
                except FlussError as e:
                    errors += 1
                    log.error("follower fsync failed: %s", e)
            if errors:
                await asyncio.sleep(self.settings.backoff)

    async def _truncate(
        self, leader: int, address: tuple[str, int], buckets: dict[TableBucket, Replica]
    ) -> None:
        """Truncate each bucket to where the leader's log and ours agree (KIP-101 / KIP-279)."""
        request = internal.OffsetForLeaderEpochRequest(follower_server_id=self.server_id)
        sent = {
            b: _Sent(r.leader_epoch, r.log_tablet(), r.log_tablet().log_end_offset)
            for b, r in buckets.items()
        }
        for bucket, follower in buckets.items():
            entry = request.buckets.add(
                table_id=bucket.table_id,
                bucket_id=bucket.bucket,
                current_leader_epoch=follower.leader_epoch,
                leader_epoch=follower.log_tablet().leader_epochs.latest_epoch,
            )
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        response = await self.pool.request(*address, ApiKey.OFFSET_FOR_LEADER_EPOCH, request, timeout=10)
        for result in response.buckets:
            partition = result.partition_id if result.HasField("partition_id") else None
            bucket = TableBucket(result.table_id, partition, result.bucket_id)
            replica = buckets.get(bucket)
            if replica is None or replica.log is None or not replica.needs_truncation:
                continue
            stale = _term_changed(replica, leader, sent[bucket])
            if stale:
                # The old leader answered late (paused, or partitioned): its log is no measure for the
                # new term. Cutting to it and clearing the pending truncation would leave this replica
                # never truncated against its new leader: a divergence. It stays pending for the new one.
                log.info(
                    "OffsetForLeaderEpoch answer for %s from server %d dropped: %s", bucket, leader, stale
                )
                continue
            if result.HasField("error_code") and result.error_code != 0:
                log.debug("OffsetForLeaderEpoch of %s: %s", replica.bucket, result.error_message)
                continue
            leader_entries = [EpochEntry(e.epoch, e.start_offset) for e in result.epoch_entries]
            self._truncate_one(replica, result.leader_epoch, result.end_offset, leader_entries)

    @staticmethod
    def _truncate_one(
        replica: Replica, leader_epoch: int, leader_end: int, leader_entries: list[EpochEntry]
    ) -> None:
        tablet = replica.log_tablet()
        epochs = tablet.leader_epochs
        end = tablet.log_end_offset
        done = True
        if epochs.latest_epoch == UNDEFINED or leader_end == UNDEFINED:
            # no epochs on one side (a log written before Strom kept them): the old rule
            target = min(tablet.high_watermark, end)
            how = "its high watermark (no leader epochs known)"
        else:
            follower_epoch, follower_end = epochs.end_offset_for(leader_epoch, end)
            if follower_epoch == leader_epoch:
                target = min(leader_end, follower_end, end)
                how = f"the end of epoch {leader_epoch} on the leader"
            else:
                # we never had the leader's epoch: cut back to the end of our last epoch below it, and ask
                # again with that one (KIP-279)
                target = min(follower_end, end)
                how = f"the end of its own epoch {follower_epoch}, below the leader's epoch {leader_epoch}"
                done = False
        if target < end:
            log.warning("%s truncates from %d to %d: %s", replica.bucket, end, target, how)
            tablet.truncate_to(target)
        if done:
            replica.needs_truncation = False
            replica.pending_epochs = leader_entries
            replica.adopt_leader_epochs()

    def _request(
        self, buckets: dict[TableBucket, Replica], max_wait_ms: int | None = None
    ) -> pb.FetchLogRequest:
        s = self.settings
        request = pb.FetchLogRequest(
            follower_server_id=self.server_id,
            max_bytes=s.max_bytes,
            max_wait_ms=s.max_wait_ms if max_wait_ms is None else max_wait_ms,
            min_bytes=s.min_bytes,
        )
        by_table: dict[int, pb.PbFetchLogReqForTable] = {}
        for bucket, replica in buckets.items():
            table = by_table.get(bucket.table_id)
            if table is None:
                table = request.tables_req.add(table_id=bucket.table_id, projection_pushdown_enabled=False)
                by_table[bucket.table_id] = table
            entry = table.buckets_req.add(
                bucket_id=bucket.bucket,
                fetch_offset=replica.log_tablet().log_end_offset,
                max_fetch_bytes=s.max_bytes_per_bucket,
            )
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        return request

    def _apply(
        self,
        leader: int,
        buckets: dict[TableBucket, Replica],
        sent: dict[TableBucket, _Sent],
        response: pb.FetchLogResponse,
    ) -> tuple[int, list[AppendResult]]:
        """Appends what the leader sent; returns the errors and the appends whose fsync is pending."""
        errors = 0
        syncs: list[AppendResult] = []
        for table in response.tables_resp:
            for result in table.buckets_resp:
                partition = result.partition_id if result.HasField("partition_id") else None
                bucket = TableBucket(table.table_id, partition, result.bucket_id)
                replica = buckets.get(bucket)
                request = sent.get(bucket)
                if replica is None or replica.log is None or request is None:
                    continue
                tablet = replica.log
                stale = _stale_answer(replica, leader, request)
                if stale:
                    # The fetch may have waited long (a paused leader answers when it resumes); the
                    # replica may lead now, or follow another leader or epoch. Records of the old term
                    # appended now would reach a leader's log past its KV tablet (an acknowledged
                    # upsert that lookups do not see) or a follower's log before its truncation.
                    log.info("fetch answer for %s from server %d dropped: %s", bucket, leader, stale)
                    continue
                if result.HasField("error_code") and result.error_code != 0:
                    errors += 1
                    if result.error_code == _OFFSET_OUT_OF_RANGE:
                        self._reset(replica, result)
                    else:
                        log.debug(
                            "follower fetch of %s: error %d %s",
                            replica.bucket,
                            result.error_code,
                            result.error_message,
                        )
                    continue
                try:
                    if result.HasField("records") and result.records:
                        appended = tablet.append_as_follower(result.records, replica.batch_check())
                        if appended.durable is not None:
                            syncs.append(appended)
                        self.on_replicated(len(result.records))
                        replica.adopt_leader_epochs()
                        replica.notify_appended()
                    if result.HasField("high_watermark"):
                        high_watermark = min(result.high_watermark, tablet.log_end_offset)
                        if high_watermark > tablet.high_watermark:
                            tablet.update_high_watermark(high_watermark)
                except FlussError as e:
                    errors += 1
                    log.warning("follower append of %s failed: %s", replica.bucket, e)
                    if isinstance(e, SchemaNotExistError):
                        self.on_unknown_schema(replica.bucket.table_id)
                    elif isinstance(e, StorageError):
                        self.on_storage_error(replica, e)
        return errors, syncs

    @staticmethod
    def _reset(replica: Replica, result: pb.PbFetchLogRespForBucket) -> None:
        """Our log end is outside the leader's log: behind its start (retention) or ahead of its end
        (an unclean leader change). Restart from what the leader has."""
        tablet = replica.log_tablet()
        leader_start = result.log_start_offset if result.HasField("log_start_offset") else None
        if leader_start is not None and tablet.log_end_offset < leader_start:
            log.warning(
                "%s fell behind the leader's log start %d: starting over there", replica.bucket, leader_start
            )
            tablet.truncate_fully_and_start_at(leader_start)
        else:
            log.warning("%s is ahead of its leader: truncating by leader epoch again", replica.bucket)
            replica.needs_truncation = True
