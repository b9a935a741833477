"""The coordinator's lake APIs: LakeTieringHeartbeat, PrepareLakeTableSnapshot, CommitLakeTableSnapshot,
GetLakeSnapshot, and NotifyLakeTableOffset pushes to tablet servers.

Lake snapshots are kept in the metadata store as small JSON documents, one per committed snapshot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.errors import (
    FlussError,
    InvalidUpdateVersionError,
    LakeSnapshotNotExistError,
    TableNotExistError,
    error_for_code,
)
from strom.common.lake_enablement import table_lake_enabled
from strom.common.supervision import spawn
from strom.common.table_descriptor import TableDescriptor
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.lake_tiering import LakeTieringManager
from strom.server.coordinator.tiering_jobs import TieringJob
from strom.server.store.base import BucketAssignment, MetadataStore, TableRecord
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

_PREFIX = "lake-snapshot/"
# buckets whose log a last-resort or unclean election left ending below the lake's tiered offset
_AHEAD_PREFIX = "lake-ahead/"


@dataclass
class LakeSnapshotRecord:
    table_id: int
    snapshot_id: int
    committed_time: int  # epoch ms
    # (partition_id or None, bucket) -> (end offset, max timestamp or -1)
    buckets: dict[tuple[int | None, int], tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "table_id": self.table_id,
                "snapshot_id": self.snapshot_id,
                "committed_time": self.committed_time,
                "buckets": [
                    {"partition_id": p, "bucket": b, "offset": o, "max_timestamp": ts}
                    for (p, b), (o, ts) in sorted(
                        self.buckets.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])
                    )
                ],
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LakeSnapshotRecord:
        obj = json.loads(data)
        return cls(
            obj["table_id"],
            obj["snapshot_id"],
            obj["committed_time"],
            {(b["partition_id"], b["bucket"]): (b["offset"], b["max_timestamp"]) for b in obj["buckets"]},
        )


@dataclass(frozen=True)
class LakeAhead:
    """A bucket whose lake holds offsets its log no longer has: an election that may lose acknowledged
    records (last-resort or unclean) took a leader whose log ends at `log_end`, below `lake_offset`.
    Fluss will write new records at offsets the lake already holds other records for."""

    table_id: int
    partition_id: int | None
    bucket: int
    lake_offset: int
    log_end: int
    leader: int
    leader_epoch: int
    detected_ms: int

    @property
    def key(self) -> str:
        partition = "-" if self.partition_id is None else str(self.partition_id)
        return f"{_AHEAD_PREFIX}{self.table_id:020d}/{partition}/{self.bucket}"


def _key(table_id: int, sequence: int) -> str:
    return f"{_PREFIX}{table_id:020d}/{sequence:012d}"


class LakeService:
    def __init__(
        self, store: OrderedStore, controller: Controller, tiering: LakeTieringManager, offsets_dir: Path
    ) -> None:
        self.store = store
        self.controller = controller
        self.tiering = tiering
        self.offsets_dir = offsets_dir
        # buckets found with the lake ahead of their log since this coordinator became active
        self.lake_ahead_detected = 0

    # ---- table lifecycle

    @staticmethod
    def lake_enabled(descriptor: TableDescriptor) -> bool:
        return table_lake_enabled(descriptor.properties)

    @staticmethod
    def _freshness(descriptor: TableDescriptor) -> float:
        from strom.common import config as options
        from strom.common.config import Configuration

        return Configuration(descriptor.properties).get(options.TABLE_DATALAKE_FRESHNESS).total_seconds()

    def on_table_created(self, record: TableRecord) -> None:
        descriptor = TableDescriptor.from_json_bytes(record.table_json)
        if self.lake_enabled(descriptor):
            self.tiering.add_new_table(
                record.table_id, TablePath(record.database, record.name), self._freshness(descriptor)
            )

    def on_table_altered(self, old: TableDescriptor, record: TableRecord) -> None:
        """AlterTable: tiering starts (from the table's first offset), stops, or takes the new
        freshness from its next round."""
        new = TableDescriptor.from_json_bytes(record.table_json)
        if not self.lake_enabled(new):
            self.tiering.remove_table(record.table_id)
            if self.lake_ahead(record.table_id):
                # the operator's way out of a held table (docs/reliability.md): its lake-ahead records
                # go; enabled again, tiering resumes from the lake's offsets
                log.warning(
                    "table %d: the lake is no longer tiered; its buckets with the lake ahead of the log "
                    "are forgotten",
                    record.table_id,
                )
                spawn(
                    self.store.delete_documents(f"{_AHEAD_PREFIX}{record.table_id:020d}/"),
                    name="forget-lake-ahead",
                )
        elif not self.lake_enabled(old):
            self.on_table_created(record)
        else:
            self.tiering.set_freshness(record.table_id, self._freshness(new))

    async def on_table_dropped(self, table_id: int) -> None:
        self.tiering.remove_table(table_id)
        await self.store.delete_documents(f"{_PREFIX}{table_id:020d}/")
        await self.store.delete_documents(f"{_AHEAD_PREFIX}{table_id:020d}/")

    # ---- the lake ahead of the log

    def lake_ahead(self, table_id: int | None = None) -> list[LakeAhead]:
        prefix = _AHEAD_PREFIX if table_id is None else f"{_AHEAD_PREFIX}{table_id:020d}/"
        return [LakeAhead(**json.loads(data)) for _, data in self.store.list_documents(prefix)]

    async def check_truncation(self, a: BucketAssignment, log_end: int | None) -> None:
        """Called by the controller after an election that may lose acknowledged records: when the new
        leader's log ends below what the lake already holds, Fluss would write new records at offsets
        the lake holds older ones for, and tiering, resuming at the lake's offset, would skip them.
        Recorded in the store (`strom status` shows it), logged, counted, and the table's tiering is
        held until an operator decides (docs/reliability.md, "The lake ahead of the log")."""
        if a.leader is None:
            return
        latest = self.latest(a.table_id)
        lake_offset = latest.buckets.get((a.partition_id, a.bucket_id), (0, -1))[0] if latest else 0
        if lake_offset <= 0:
            return
        where = f"table {a.table_id} bucket {a.bucket_id}" + (
            "" if a.partition_id is None else f" (partition {a.partition_id})"
        )
        if log_end is None:
            # the leader did not say where its log ends: the lake may be ahead; not assumed either way
            log.error(
                "LAKE MAY BE AHEAD OF LOG for %s: leader %s was elected without reporting its log end, "
                "and the lake holds offsets up to %d; check `strom status`",
                where,
                a.leader,
                lake_offset,
            )
            return
        if log_end >= lake_offset:
            return
        ahead = LakeAhead(
            a.table_id,
            a.partition_id,
            a.bucket_id,
            lake_offset,
            log_end,
            a.leader,
            a.leader_epoch,
            int(time.time() * 1000),
        )
        self.lake_ahead_detected += 1
        log.error(
            "LAKE AHEAD OF LOG for %s: the new leader %d (epoch %d) has records up to offset %d, but the "
            "lake already holds offsets up to %d; Fluss will reuse offsets %d..%d for new records. "
            "Tiering of the table is held so that nothing is skipped or mixed (docs/reliability.md)",
            where,
            a.leader,
            a.leader_epoch,
            log_end,
            lake_offset,
            log_end,
            lake_offset - 1,
        )
        data = json.dumps(dataclasses.asdict(ahead)).encode()
        await self.store.put_document(ahead.key, data)
        self.tiering.hold(a.table_id)

    def load_tables(self) -> None:
        """After a (re)start: every lake-enabled table resumes its schedule from its last snapshot."""
        for record in self.store.list_tables():
            descriptor = TableDescriptor.from_json_bytes(record.table_json)
            if not self.lake_enabled(descriptor):
                continue
            latest = self.latest(record.table_id)
            last = latest.committed_time / 1000 if latest is not None else time.time()
            self.tiering.add_existing_table(
                record.table_id, TablePath(record.database, record.name), self._freshness(descriptor), last
            )
            if self.lake_ahead(record.table_id):
                self.tiering.hold(record.table_id)

    # ---- snapshots

    def latest(self, table_id: int) -> LakeSnapshotRecord | None:
        documents = self.store.list_documents(f"{_PREFIX}{table_id:020d}/")
        return LakeSnapshotRecord.from_json(documents[-1][1]) if documents else None

    def _snapshot(self, table_id: int, snapshot_id: int) -> LakeSnapshotRecord | None:
        for _, data in reversed(self.store.list_documents(f"{_PREFIX}{table_id:020d}/")):
            record = LakeSnapshotRecord.from_json(data)
            if record.snapshot_id == snapshot_id:
                return record
        return None

    async def _record(self, snapshot: LakeSnapshotRecord) -> None:
        previous = self.latest(snapshot.table_id)
        if previous is not None:
            for key, (offset, _) in previous.buckets.items():
                new = snapshot.buckets.get(key)
                if new is None:
                    snapshot.buckets[key] = previous.buckets[key]  # untouched buckets keep their offsets
                elif new[0] < offset:
                    raise InvalidUpdateVersionError(
                        f"lake snapshot {snapshot.snapshot_id} of table {snapshot.table_id} moves bucket "
                        f"{key[1]} (partition {key[0]}) back from offset {offset} to {new[0]}"
                    )
            if previous.snapshot_id == snapshot.snapshot_id and _ends(previous) == _ends(snapshot):
                # the same commit again (a tiering job that lost the answer retries): recorded once
                return
        prefix = f"{_PREFIX}{snapshot.table_id:020d}/"

        def append(store: MetadataStore) -> None:
            # the sequence is counted on the store thread: commits waiting there do not share one
            store.put_document(_key(snapshot.table_id, len(store.list_documents(prefix))), snapshot.to_json())

        await self.store.atomically(append)

    async def get_lake_snapshot(
        self, request: pb.GetLakeSnapshotRequest, ctx: object
    ) -> pb.GetLakeSnapshotResponse:
        path = TablePath(request.table_path.database_name, request.table_path.table_name)
        path.validate()
        table = self.store.get_table(path.database_name, path.table_name)
        if table is None:
            raise TableNotExistError(f"Table '{path}' does not exist.")
        if request.HasField("snapshot_id"):
            snapshot = self._snapshot(table.table_id, request.snapshot_id)
            if snapshot is None:
                raise LakeSnapshotNotExistError(
                    f"Lake snapshot {request.snapshot_id} of table '{path}' does not exist."
                )
        else:
            snapshot = self.latest(table.table_id)
            if snapshot is None:
                raise LakeSnapshotNotExistError(
                    f"Table '{path}' (id {table.table_id}) has no lake snapshot yet."
                )
        response = pb.GetLakeSnapshotResponse(table_id=table.table_id, snapshotId=snapshot.snapshot_id)
        names = {p.partition_id: p.name for p in self.store.list_partitions(table.table_id)}
        for (partition_id, bucket), (offset, _) in sorted(
            snapshot.buckets.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])
        ):
            entry = response.bucket_snapshots.add(bucket_id=bucket, log_offset=offset)
            if partition_id is not None:
                entry.partition_id = partition_id
                if partition_id in names:
                    entry.partition_name = names[partition_id]
        return response

    # ---- tiering jobs

    async def heartbeat(
        self, request: pb.LakeTieringHeartbeatRequest, ctx: object
    ) -> pb.LakeTieringHeartbeatResponse:
        response = pb.LakeTieringHeartbeatResponse(coordinator_epoch=self.controller.coordinator_epoch)
        job = TieringJob.of(request, ctx if isinstance(ctx, RequestContext) else None)
        self.tiering.jobs.seen(job)

        def guarded(target: Any, entry: Any, action: Any) -> None:
            result = target.add(table_id=entry.table_id)
            try:
                action()
            except FlussError as e:
                result.error.error_code = e.code
                result.error.error_message = e.message

        for entry in request.failed_tables:
            guarded(
                response.failed_table_resp,
                entry,
                lambda e=entry: self.tiering.fail(e.table_id, e.tiering_epoch),
            )
        for entry in request.tiering_tables:
            guarded(
                response.tiering_table_resp,
                entry,
                lambda e=entry: self.tiering.heartbeat(e.table_id, e.tiering_epoch, job),
            )
        forced = set(request.force_finished_tables)
        for entry in request.finished_tables:
            stats = entry.lake_tiering_stats if entry.HasField("lake_tiering_stats") else None
            guarded(
                response.finished_table_resp,
                entry,
                lambda e=entry, s=stats: self.tiering.finish(
                    e.table_id,
                    e.tiering_epoch,
                    e.table_id in forced,
                    s.record_count if s is not None and s.HasField("record_count") else None,
                    s.file_size if s is not None and s.HasField("file_size") else None,
                ),
            )
        if request.HasField("request_table") and request.request_table:
            assignment = self.tiering.request_table(job)
            if assignment is not None:
                info = response.tiering_table
                info.table_id = assignment.table_id
                info.tiering_epoch = assignment.epoch
                info.table_path.database_name = assignment.path.database_name
                info.table_path.table_name = assignment.path.table_name
        return response

    async def prepare_snapshot(
        self, request: pb.PrepareLakeTableSnapshotRequest, ctx: object
    ) -> pb.PrepareLakeTableSnapshotResponse:
        """Stores a table's tiered offsets in a file that a later commit refers to (Fluss's two-step
        commit for large tables)."""
        response = pb.PrepareLakeTableSnapshotResponse()
        for table in request.bucket_offsets:
            result = response.prepare_lake_table_resp.add(table_id=table.table_id)
            try:
                if self.store.get_table_by_id(table.table_id) is None:
                    raise TableNotExistError(f"table {table.table_id} does not exist")
                directory = self.offsets_dir / str(table.table_id)
                directory.mkdir(parents=True, exist_ok=True)
                path = directory / f"{uuid.uuid4().hex}.offsets.json"
                offsets = [
                    {
                        "partition_id": b.partition_id if b.HasField("partition_id") else None,
                        "bucket": b.bucket_id,
                        "offset": b.log_end_offset,
                    }
                    for b in table.bucket_offsets
                ]
                path.write_text(json.dumps(offsets))
                result.lake_table_offsets_path = str(path)
            except FlussError as e:
                result.error_code = e.code
                result.error_message = e.message
        return response

    async def commit_snapshot(
        self, request: pb.CommitLakeTableSnapshotRequest, ctx: object
    ) -> pb.CommitLakeTableSnapshotResponse:
        response = pb.CommitLakeTableSnapshotResponse()
        committed: list[LakeSnapshotRecord] = []
        now = int(time.time() * 1000)
        for info in request.tables_req:
            result = response.table_resp.add(table_id=info.table_id)
            try:
                self._require_table(info.table_id)
                if info.HasField("tiering_epoch"):
                    self.tiering.check_commit(info.table_id, info.tiering_epoch)
                snapshot = LakeSnapshotRecord(
                    info.table_id,
                    info.snapshot_id,
                    now,
                    {
                        (b.partition_id if b.HasField("partition_id") else None, b.bucket_id): (
                            b.log_end_offset,
                            b.max_timestamp if b.HasField("max_timestamp") else -1,
                        )
                        for b in info.buckets_req
                    },
                )
                await self._record(snapshot)
                committed.append(snapshot)
            except FlussError as e:
                result.error_code = e.code
                result.error_message = e.message
        for meta in request.lake_table_snapshot_metadata:
            result = response.table_resp.add(table_id=meta.table_id)
            try:
                self._require_table(meta.table_id)
                offsets = json.loads(Path(meta.tiered_bucket_offsets_file_path).read_text())
                snapshot = LakeSnapshotRecord(
                    meta.table_id,
                    meta.snapshot_id,
                    now,
                    {(o["partition_id"], o["bucket"]): (o["offset"], -1) for o in offsets},
                )
                await self._record(snapshot)
                committed.append(snapshot)
            except FlussError as e:
                result.error_code = e.code
                result.error_message = e.message
            except (OSError, ValueError, KeyError) as e:
                err = error_for_code(
                    -1, f"cannot read offsets file {meta.tiered_bucket_offsets_file_path}: {e}"
                )
                result.error_code = err.code
                result.error_message = err.message
        for snapshot in committed:
            log.info(
                "lake snapshot %d committed for table %d (%d buckets)",
                snapshot.snapshot_id,
                snapshot.table_id,
                len(snapshot.buckets),
            )
        if committed:
            spawn(self._notify(committed), name="notify-lake-offsets")
        return response

    def _require_table(self, table_id: int) -> None:
        if self.store.get_table_by_id(table_id) is None:
            raise TableNotExistError(f"table {table_id} does not exist")

    async def _notify(self, snapshots: list[LakeSnapshotRecord]) -> None:
        """Tell every replica of the buckets how far the lake reaches: leaders report it to readers,
        and every replica's log retention waits for it (lake_hold.py), followers' included."""
        by_server: dict[int, pb.NotifyLakeTableOffsetRequest] = defaultdict(
            lambda: pb.NotifyLakeTableOffsetRequest(coordinator_epoch=self.controller.coordinator_epoch)
        )
        for snapshot in snapshots:
            hosts = {
                (b.partition_id, b.bucket_id): {*b.replicas, *([] if b.leader is None else [b.leader])}
                for b in self.store.list_buckets(snapshot.table_id)
            }
            for (partition_id, bucket), (offset, max_ts) in snapshot.buckets.items():
                for server in sorted(hosts.get((partition_id, bucket), ())):
                    entry = by_server[server].notify_buckets_req.add(
                        table_id=snapshot.table_id,
                        bucket_id=bucket,
                        snapshot_id=snapshot.snapshot_id,
                        log_end_offset=offset,
                    )
                    if partition_id is not None:
                        entry.partition_id = partition_id
                    if max_ts >= 0:
                        entry.max_timestamp = max_ts
        await asyncio.gather(
            *(
                self.controller.send(server, ApiKey.NOTIFY_LAKE_TABLE_OFFSET, request)
                for server, request in by_server.items()
            )
        )


def _ends(snapshot: LakeSnapshotRecord) -> dict[tuple[int | None, int], int]:
    return {key: offset for key, (offset, _) in snapshot.buckets.items()}
