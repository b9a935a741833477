"""The tiering service's driver: takes lake-enabled tables from the coordinator and tiers them in rounds.

One round of one table:
1. read the newest lake snapshot's per-bucket offsets (the truth about what the lake has);
2. take the current end offset (high watermark) of every bucket;
3. run one split per bucket with new records on the executors, each writing lake files;
4. commit the lake once (the snapshot carries the new offsets and commit-user=__fluss_lake_tiering),
   then tell the coordinator (CommitLakeTableSnapshot with the job's tiering epoch), then report the
   table finished in a heartbeat.
A job killed anywhere resumes from step 1, so nothing is skipped or written twice: files of an
uncommitted round are never referenced, and the lake refuses a commit that does not advance its offsets.
While a round runs, a heartbeat keeps the coordinator from fencing the job; if the coordinator fences it
anyway (stale epoch), the round is abandoned before its lake commit.

The coordinator may restart or fail over at any moment. Every call to it is retried (bootstrapping again,
so a new active coordinator is found) for `coordinator_retry_timeout`; each call is safe to repeat: a
heartbeat is, a repeated finish or failure report is refused with FENCED_TIERING_EPOCH or answered as
already done, and the coordinator records a re-sent lake commit once. A round whose lake commit the
coordinator never heard of is recorded by the next round (`_sync_coordinator`). What the service cannot
go on after (a bug, or no cluster to connect to at all) ends `run()` with the exception; `strom tiering`
then exits non-zero, so that whoever runs it starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.client import Connection
from strom.client.offset_spec import OffsetSpec
from strom.common.errors import FencedTieringEpochError, FlussError, NetworkError
from strom.common.supervision import Backoff, spawn
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake import load_lake_storage
from strom.lake.interface import LakeCommitter, LakeSnapshotInfo, LakeStorage, WriteResult, maintenance_plan
from strom.metrics.tiering import TieringMetrics
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.spark.tiering.runner import SplitRunner
from strom.spark.tiering.tiering_splits import TieringSplit, plan_splits

log = logging.getLogger("strom.tiering")

COMMIT_USER = "__fluss_lake_tiering"

# between attempts to reach a restarting coordinator
COORDINATOR_BACKOFF = Backoff(initial=0.1, maximum=2.0)


@dataclass(frozen=True)
class TieringSettings:
    bootstrap: str
    lake_format: str
    lake_properties: Mapping[str, str]
    poll_interval: float = 5.0  # how often an idle service asks for a table
    heartbeat_interval: float = 2.0  # while a round runs (well below lake.tiering.job-timeout)
    # client options (client.security.* and others) for the driver's and the executors' connections
    client_properties: Mapping[str, str] = field(default_factory=dict)
    # who this job is, sent with every heartbeat (Strom extension fields) so the coordinator can say
    # which job holds which table; the Spark application id when splits run on Spark
    job_name: str = "strom-tiering"
    application_id: str = ""
    # how long one coordinator call is retried while the coordinator restarts or fails over
    coordinator_retry_timeout: float = 120.0

    @property
    def client(self) -> dict[str, str]:
        return {**self.client_properties, "bootstrap.servers": self.bootstrap}


@dataclass
class Assignment:
    table_id: int
    path: TablePath
    epoch: int
    fenced: bool = False


@dataclass
class RoundStats:
    splits: int = 0
    records: int = 0
    snapshot_id: int | None = None
    seconds: float = 0.0
    offsets: dict[tuple[int | None, int], int] = field(default_factory=dict)


class TieringService:
    def __init__(
        self, settings: TieringSettings, runner: SplitRunner, metrics: TieringMetrics | None = None
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.metrics = metrics
        self.rounds = 0
        self._connection: Connection | None = None

    # ---- coordinator calls

    async def _coordinator(self, key: ApiKey, message: Any) -> Any:
        """One call to the active coordinator, retried across its restarts and failovers.

        Only for calls that are safe to repeat (see the module's docstring): a request may have been
        handled by the coordinator although its answer was lost with the connection.
        """
        assert self._connection is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.coordinator_retry_timeout
        delays = COORDINATOR_BACKOFF.delays()
        while True:
            try:
                node = await self._connection.metadata.coordinator_node()
                return await self._connection.pool.request(node.host, node.port, key, message)
            except FlussError as e:
                if not e.retriable:
                    raise
                delay = next(delays)
                if loop.time() + delay >= deadline:
                    raise NetworkError(
                        f"{key.name}: no coordinator answered for "
                        f"{self.settings.coordinator_retry_timeout:.0f}s: {e}"
                    ) from e
                log.warning("%s: coordinator unreachable (%s); retrying in %.1fs", key.name, e, delay)
            await asyncio.sleep(delay)
            # it may have restarted elsewhere, or another coordinator took over: ask the bootstrap list
            with contextlib.suppress(FlussError):
                await self._connection.metadata.bootstrap()

    async def _heartbeat(
        self,
        *,
        request: bool = False,
        tiering: Assignment | None = None,
        finished: tuple[Assignment, RoundStats] | None = None,
        failed: Assignment | None = None,
    ) -> Any:
        message = pb.LakeTieringHeartbeatRequest(
            request_table=request,
            tiering_job_name=self.settings.job_name,
            tiering_job_application_id=self.settings.application_id,
        )
        if tiering is not None:
            message.tiering_tables.add(
                table_id=tiering.table_id, coordinator_epoch=0, tiering_epoch=tiering.epoch
            )
        if finished is not None:
            assignment, stats = finished
            entry = message.finished_tables.add(
                table_id=assignment.table_id, coordinator_epoch=0, tiering_epoch=assignment.epoch
            )
            entry.lake_tiering_stats.record_count = stats.records
        if failed is not None:
            message.failed_tables.add(
                table_id=failed.table_id, coordinator_epoch=0, tiering_epoch=failed.epoch
            )
        return await self._coordinator(ApiKey.LAKE_TIERING_HEARTBEAT, message)

    # ---- main loop

    async def run(self, stop: asyncio.Event | None = None, max_rounds: int | None = None) -> None:
        stop = stop or asyncio.Event()
        self._connection = await Connection.create(self.settings.client)
        log.info(
            "tiering service started as job %s%s: lake format %s, cluster %s",
            self.settings.job_name,
            f" (Spark application {self.settings.application_id})" if self.settings.application_id else "",
            self.settings.lake_format,
            self.settings.bootstrap,
        )
        try:
            while not stop.is_set() and (max_rounds is None or self.rounds < max_rounds):
                try:
                    response = await self._heartbeat(request=True)
                except FlussError as e:
                    log.warning("coordinator unreachable: %s", e)
                    await _sleep(stop, self.settings.poll_interval)
                    continue
                if not response.HasField("tiering_table"):
                    await _sleep(stop, self.settings.poll_interval)
                    continue
                t = response.tiering_table
                assignment = Assignment(
                    t.table_id,
                    TablePath(t.table_path.database_name, t.table_path.table_name),
                    t.tiering_epoch,
                )
                await self._tier(assignment)
                self.rounds += 1
        finally:
            await self._connection.close()

    async def _tier(self, assignment: Assignment) -> None:
        log.info(
            "tiering %s (table id %d, tiering epoch %d): taken by job %s",
            assignment.path,
            assignment.table_id,
            assignment.epoch,
            self.settings.job_name,
        )
        beating = spawn(self._keep_alive(assignment), name="tiering-heartbeat")
        try:
            stats = await self._round(assignment)
        except Exception as e:
            beating.cancel()
            if assignment.fenced or isinstance(e, FencedTieringEpochError):
                log.warning("round of %s abandoned: this job was fenced (%s)", assignment.path, e)
                self._released(assignment, "fenced")
                return
            log.exception("round of %s failed", assignment.path)
            if self.metrics is not None:
                self.metrics.failed(assignment.path.database_name, assignment.path.table_name)
            try:
                await self._heartbeat(failed=assignment)
            except FlussError as report_error:
                log.warning("could not report the failure of %s: %s", assignment.path, report_error)
            self._released(assignment, "failed")
            return
        finally:
            beating.cancel()  # also when the round is cancelled (the service stops)
        try:
            response = await self._heartbeat(finished=(assignment, stats))
        except FlussError as e:
            # the lake has the round; the coordinator fences the silent job and queues the table again
            log.warning("could not report the finished round of %s: %s", assignment.path, e)
        else:
            if response.finished_table_resp and response.finished_table_resp[0].HasField("error"):
                # e.g. a coordinator that restarted since the round began: it no longer knows the epoch
                log.warning(
                    "coordinator refused to finish %s: %s",
                    assignment.path,
                    response.finished_table_resp[0].error.error_message,
                )
        if stats.splits:
            log.info(
                "tiered %s: %d record(s) from %d bucket(s) in %.2fs -> lake snapshot %s",
                assignment.path,
                stats.records,
                stats.splits,
                stats.seconds,
                stats.snapshot_id,
            )
        else:
            log.info("tiered %s: nothing new", assignment.path)
        self._released(assignment, "finished")

    def _released(self, assignment: Assignment, how: str) -> None:
        log.info(
            "released %s (table id %d, tiering epoch %d) by job %s: %s",
            assignment.path,
            assignment.table_id,
            assignment.epoch,
            self.settings.job_name,
            how,
        )

    async def _keep_alive(self, assignment: Assignment) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            try:
                response = await self._heartbeat(tiering=assignment)
            except FlussError as e:
                log.warning("heartbeat failed: %s", e)
                continue
            result = response.tiering_table_resp[0] if response.tiering_table_resp else None
            if result is not None and result.HasField("error"):
                log.warning(
                    "coordinator fenced the round of %s: %s", assignment.path, result.error.error_message
                )
                assignment.fenced = True
                return

    # ---- one round

    async def _round(self, assignment: Assignment) -> RoundStats:
        started = time.monotonic()
        assert self._connection is not None
        admin = self._connection.get_admin()
        info: TableInfo = await admin.get_table_info(assignment.path)
        if info.table_id != assignment.table_id:
            raise FlussError(
                f"{assignment.path} was re-created (id {info.table_id}, not {assignment.table_id})"
            )
        storage = load_lake_storage(self.settings.lake_format, self.settings.lake_properties)
        # columns AlterTable added reach the lake table before rows that carry them
        added = await asyncio.to_thread(_evolve, storage, info)
        if added:
            log.info("%s: added column(s) %s to the lake table", assignment.path, added)
        committer = storage.committer(info)
        latest: LakeSnapshotInfo | None = await asyncio.to_thread(committer.latest_snapshot)
        lake_offsets: dict[tuple[int | None, int], int] = dict(latest.bucket_offsets) if latest else {}
        await self._sync_coordinator(assignment, latest)

        partition_names: dict[int, str] = {}
        targets: list[tuple[int | None, str | None]] = [(None, None)]
        if info.is_partitioned:
            partitions = await admin.list_partition_infos(assignment.path)
            partition_names = {p.partition_id: p.partition_name for p in partitions}
            targets = [(p.partition_id, p.partition_name) for p in partitions]
        buckets: dict[tuple[int | None, int], tuple[int, int]] = {}
        snapshots: dict[tuple[int | None, int], tuple[int, int]] = {}
        bucket_ids = list(range(info.bucket_count))
        planned_at = time.monotonic()
        for partition_id, partition_name in targets:
            ends = await admin.list_offsets(assignment.path, bucket_ids, OffsetSpec.latest(), partition_name)
            starts = await admin.list_offsets(
                assignment.path, bucket_ids, OffsetSpec.earliest(), partition_name
            )
            if info.has_primary_key and any((partition_id, b) not in lake_offsets for b in bucket_ids):
                # a PK bucket's first round starts from its KV snapshot, as Fluss's snapshot splits do
                kv = await admin.get_latest_kv_snapshots(assignment.path, partition_name)
                for bucket, snapshot_id in kv.snapshot_ids.items():
                    if (partition_id, bucket) not in lake_offsets and kv.log_offsets[bucket] > 0:
                        snapshots[(partition_id, bucket)] = (snapshot_id, kv.log_offsets[bucket])
            for bucket in bucket_ids:
                start = lake_offsets.get((partition_id, bucket), 0)
                if (partition_id, bucket) not in snapshots and start < starts[bucket]:
                    if info.has_primary_key:
                        raise FlussError(
                            f"the changelog of {assignment.path} bucket {bucket} starts at {starts[bucket]}, "
                            f"past the lake's offset {start}, and no KV snapshot covers the gap"
                        )
                    log.warning(
                        "%s bucket %d: records %d..%d expired before they were tiered",
                        assignment.path,
                        bucket,
                        start,
                        starts[bucket],
                    )
                    start = starts[bucket]
                buckets[(partition_id, bucket)] = (start, ends[bucket])
        splits = plan_splits(
            table_id=info.table_id,
            database=info.table_path.database_name,
            table=info.table_path.table_name,
            buckets=buckets,
            partition_names=partition_names,
            snapshots=snapshots,
        )
        stats = RoundStats(splits=len(splits))
        db, name = info.table_path.database_name, info.table_path.table_name
        if self.metrics is not None:
            self.metrics.planned(db, name, sum(end - start for start, end in buckets.values()))
        if not splits:
            if self.metrics is not None:
                self.metrics.caught_up(db, name)
            return stats
        from_snapshots = sum(1 for split in splits if split.snapshot_id is not None)
        if from_snapshots:
            log.info(
                "%s: %d of %d split(s) start from a KV snapshot", assignment.path, from_snapshots, len(splits)
            )
        results = await asyncio.to_thread(
            self.runner.run,
            splits,
            info,
            self.settings.client,
            self.settings.lake_format,
            self.settings.lake_properties,
        )
        stats.records = sum(r.record_count for r in results)
        if assignment.fenced:
            await asyncio.to_thread(committer.abort, results)
            raise FencedTieringEpochError(f"the round of {assignment.path} lost its tiering epoch")
        stats.offsets = {s.key: s.end_offset for s in splits}
        properties = {"commit-user": COMMIT_USER, "strom-tiering-epoch": str(assignment.epoch)}
        stats.snapshot_id = await asyncio.to_thread(
            _commit, committer, results, stats.offsets, properties, partition_names
        )
        all_offsets = {**lake_offsets, **stats.offsets}
        await self._commit_to_coordinator(assignment, stats.snapshot_id, all_offsets)
        await asyncio.to_thread(_maintain, committer, info, splits)
        stats.seconds = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.committed(
                db,
                name,
                records=stats.records,
                bytes_written=sum(r.bytes_written for r in results),
                seconds=stats.seconds,
                planned_at=planned_at,
                behind=await self._records_behind(assignment.path, targets, bucket_ids, all_offsets),
            )
        return stats

    async def _records_behind(
        self,
        path: TablePath,
        targets: list[tuple[int | None, str | None]],
        bucket_ids: list[int],
        lake_offsets: Mapping[tuple[int | None, int], int],
    ) -> int:
        """Records the table has now that the lake does not (they arrived during the round)."""
        assert self._connection is not None
        admin = self._connection.get_admin()
        behind = 0
        for partition_id, partition_name in targets:
            ends = await admin.list_offsets(path, bucket_ids, OffsetSpec.latest(), partition_name)
            behind += sum(max(0, ends[b] - lake_offsets.get((partition_id, b), 0)) for b in bucket_ids)
        return behind

    async def _commit_to_coordinator(
        self, assignment: Assignment, snapshot_id: int, offsets: Mapping[tuple[int | None, int], int]
    ) -> None:
        message = pb.CommitLakeTableSnapshotRequest()
        info = message.tables_req.add(
            table_id=assignment.table_id, snapshot_id=snapshot_id, tiering_epoch=assignment.epoch
        )
        info.table_path.database_name = assignment.path.database_name
        info.table_path.table_name = assignment.path.table_name
        for (partition_id, bucket), offset in sorted(
            offsets.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])
        ):
            entry = info.buckets_req.add(bucket_id=bucket, log_end_offset=offset)
            if partition_id is not None:
                entry.partition_id = partition_id
        try:
            response = await self._coordinator(ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT, message)
        except FlussError as e:
            # The lake has the snapshot, which stays the truth; the next round records it (_sync_coordinator).
            log.warning(
                "could not record lake snapshot %d of %s with the coordinator: %s",
                snapshot_id,
                assignment.path,
                e,
            )
            return
        result = response.table_resp[0]
        if result.HasField("error_code") and result.error_code != 0:
            # The lake already has the snapshot, which stays the truth; the next round re-syncs.
            log.warning(
                "coordinator did not record lake snapshot %d of %s: %s",
                snapshot_id,
                assignment.path,
                result.error_message,
            )

    async def _sync_coordinator(self, assignment: Assignment, latest: LakeSnapshotInfo | None) -> None:
        """A job killed between the lake commit and the coordinator commit left the coordinator behind."""
        if latest is None:
            return
        request = pb.GetLakeSnapshotRequest()
        request.table_path.database_name = assignment.path.database_name
        request.table_path.table_name = assignment.path.table_name
        try:
            known = await self._coordinator(ApiKey.GET_LAKE_SNAPSHOT, request)
            if known.snapshotId == latest.snapshot_id:
                return
        except FlussError:
            pass  # no snapshot recorded yet
        log.info("recording lake snapshot %d of %s with the coordinator", latest.snapshot_id, assignment.path)
        await self._commit_to_coordinator(assignment, latest.snapshot_id, latest.bucket_offsets)


def _commit(
    committer: LakeCommitter,
    results: list[WriteResult],
    offsets: dict[tuple[int | None, int], int],
    properties: dict[str, str],
    partition_names: dict[int, str],
) -> int:
    try:
        return committer.commit(results, offsets, properties, partition_names=partition_names)
    except BaseException:
        committer.abort(results)
        raise


def _evolve(storage: LakeStorage, info: TableInfo) -> list[str]:
    catalog = storage.catalog()
    try:
        return catalog.evolve_table(info)
    finally:
        catalog.close()


def _maintain(committer: LakeCommitter, info: TableInfo, splits: list[TieringSplit]) -> None:
    plan = maintenance_plan(info)
    if plan.compact:
        committer.compact_buckets([(split.bucket, split.partition_name) for split in splits])
    if plan.expire_snapshots:
        committer.expire_snapshots()


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
