"""What `strom status` shows: the cluster as the coordinator sees it (DescribeCluster) joined with what
each tablet server reports about the replicas it holds (DescribeReplicas) and the rebalance in progress.

`ClusterStatus.to_json()` is the documented shape of `strom status --json` (docs/operations.md).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from strom.client.cluster import ServerNode
from strom.common.rebalance import BucketMove, RebalanceStatus, ServerTag
from strom.rpc.api import ServerType
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal


@dataclass(frozen=True, slots=True)
class DataDirStatus:
    """One of a tablet server's data directories (`data.dirs`) as its last disk check found it."""

    path: str
    replicas: int
    usage_ratio: float
    write_locked: bool  # writes refused: usage reached server.data-disk.write-limit-ratio
    offline: str | None  # why the directory failed; its replicas are offline
    free_bytes: int | None


@dataclass(frozen=True, slots=True)
class ServerStatus:
    role: str  # "coordinator" or "tablet-server"
    id: int
    host: str | None
    port: int | None
    alive: bool
    leaders: int = 0
    replicas: int = 0
    tag: str | None = None  # PERMANENT_OFFLINE / TEMPORARY_OFFLINE while tagged
    rack: str | None = None  # tablet-server.rack
    data_dirs: list[DataDirStatus] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BucketStatus:
    bucket: int
    partition: str | None
    partition_id: int | None
    leader: int | None
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    # from the leader; None when the leader did not answer
    log_start: int | None
    log_end: int | None
    high_watermark: int | None
    kv_snapshot_id: int | None
    # follower id -> records it is behind the leader's log end
    follower_lag: dict[int, int] = field(default_factory=dict)
    # eligible leader replicas (KIP-966): out of the ISR, still holding every acknowledged record
    elr: list[int] = field(default_factory=list)
    # from the leader: log past table.log.ttl kept because the lake lacks it, (segments, bytes)
    held_local: tuple[int, int] = (0, 0)
    held_remote: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class LakeOffset:
    partition_id: int | None
    bucket: int
    offset: int
    # the log end a last-resort or unclean election left, below `offset`: the lake is ahead of the log
    lake_ahead_log_end: int | None = None


@dataclass(frozen=True, slots=True)
class LakeStatus:
    snapshot_id: int | None  # None until the first round commits
    committed_time_ms: int | None
    offsets: list[LakeOffset]
    lag_records: int  # records in Fluss (below the high watermarks) not yet in the lake
    lag_ms: int  # 0 when the lake is caught up, else the age of its newest snapshot


@dataclass(frozen=True, slots=True)
class TableStatus:
    database: str
    name: str
    table_id: int
    primary_key: bool
    lake_enabled: bool
    bucket_count: int
    buckets: list[BucketStatus]
    lake: LakeStatus | None
    # the table's bucket rescale ("2 -> 6 buckets: SEALED" while rows move), None if it never had one
    rescale: str | None = None


@dataclass(frozen=True, slots=True)
class TieringJobStatus:
    """A tiering job as the coordinator knows it: the name and Spark application id it sent ("" from
    jobs that do not send them, such as Fluss's), its connection's address and principal."""

    name: str
    application_id: str
    address: str
    principal: str
    last_seen_age_ms: int | None  # since its last heartbeat; None if silent for the job timeout

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.name, self.application_id, self.address, self.principal)

    @classmethod
    def from_pb(cls, job: internal.StatusTieringJob) -> TieringJobStatus:
        return cls(
            job.name,
            job.application_id,
            job.address,
            job.principal,
            job.last_seen_age_ms if job.last_seen_age_ms >= 0 else None,
        )


@dataclass(frozen=True, slots=True)
class TieringStatus:
    table: str
    state: str
    tiering_epoch: int
    heartbeat_age_ms: int | None
    # the job holding the table while state is "tiering"; otherwise the job that tiered it last
    job: TieringJobStatus | None = None
    last_heartbeat_ms: int | None = None  # epoch ms of the holder's last heartbeat for this table


@dataclass(frozen=True, slots=True)
class BucketRebalance:
    table_id: int
    partition_id: int | None
    bucket: int
    original_replicas: list[int]
    new_replicas: list[int]
    original_leader: int | None
    new_leader: int | None
    status: str


@dataclass(frozen=True, slots=True)
class RebalanceProgress:
    rebalance_id: str
    status: str
    buckets: list[BucketRebalance]

    @property
    def done(self) -> int:
        return sum(RebalanceStatus[b.status].final for b in self.buckets)

    @property
    def finished(self) -> bool:
        return RebalanceStatus[self.status].final

    @classmethod
    def from_pb(cls, response: pb.ListRebalanceProgressResponse) -> RebalanceProgress:
        buckets = []
        for table in response.table_progress:
            for entry in table.buckets_progress:
                plan = entry.rebalance_plan
                buckets.append(
                    BucketRebalance(
                        table_id=table.table_id,
                        partition_id=plan.partition_id if plan.HasField("partition_id") else None,
                        bucket=plan.bucket_id,
                        original_replicas=list(plan.original_replicas),
                        new_replicas=list(plan.new_replicas),
                        original_leader=plan.original_leader if plan.HasField("original_leader") else None,
                        new_leader=plan.new_leader if plan.HasField("new_leader") else None,
                        status=RebalanceStatus(entry.rebalance_status).name,
                    )
                )
        return cls(response.rebalance_id, RebalanceStatus(response.rebalance_status).name, buckets)

    @classmethod
    def planned(cls, moves: list[BucketMove]) -> RebalanceProgress:
        """A plan not yet started (what `strom rebalance --dry-run` shows)."""
        return cls(
            "",
            RebalanceStatus.NOT_STARTED.name,
            [
                BucketRebalance(
                    m.key[0],
                    m.key[1],
                    m.key[2],
                    list(m.original_replicas),
                    list(m.new_replicas),
                    m.original_leader,
                    m.new_leader,
                    RebalanceStatus.NOT_STARTED.name,
                )
                for m in moves
            ],
        )


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    coordinator_epoch: int
    servers: list[ServerStatus]
    tables: list[TableStatus]
    tiering: list[TieringStatus]
    rebalance: RebalanceProgress | None
    tiering_jobs: list[TieringJobStatus] = field(default_factory=list)  # heard from within the job timeout

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def table_name(self, table_id: int) -> str:
        return next((f"{t.database}.{t.name}" for t in self.tables if t.table_id == table_id), str(table_id))


def build_cluster_status(
    cluster: internal.DescribeClusterResponse,
    nodes: list[ServerNode],
    replicas: dict[int, internal.DescribeReplicasResponse | None],
    rebalance: RebalanceProgress | None,
    now_ms: int | None = None,
) -> ClusterStatus:
    """Joins the coordinator's view with the tablet servers' (`replicas`: None for a server that did not
    answer). `nodes` are the addresses clients use, from the Metadata answer."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    by_id = {n.id: n for n in nodes if n.server_type == ServerType.TABLET_SERVER}
    # (table, partition, bucket) -> the leader's report of the replica
    reports: dict[tuple[int, int | None, int], internal.StatusReplica] = {}
    for response in replicas.values():
        for r in response.replicas if response is not None else ():
            if r.leader:
                reports[(r.table_id, r.partition_id if r.HasField("partition_id") else None, r.bucket_id)] = r
    tags = {t.server_id: ServerTag(t.tag).name for t in cluster.server_tags}
    live = {s.server_id for s in cluster.tablet_servers}
    leaders: dict[int, int] = {}
    hosted: dict[int, int] = {}
    buckets_by_table: dict[int, list[BucketStatus]] = {}
    for b in cluster.buckets:
        partition_id = b.partition_id if b.HasField("partition_id") else None
        leader = b.leader if b.HasField("leader") else None
        report = reports.get((b.table_id, partition_id, b.bucket_id))
        log_start: int | None
        log_end: int | None
        hw: int | None
        if report is not None and report.leader and leader is not None:
            log_start, log_end, hw = report.log_start_offset, report.log_end_offset, report.high_watermark
            lag = {f.server_id: max(0, log_end - f.log_end_offset) for f in report.followers}
            held_local = (report.held_local_segments, report.held_local_bytes)
            held_remote = (report.held_remote_segments, report.held_remote_bytes)
        else:
            log_start = log_end = hw = None
            lag = {}
            held_local = held_remote = (0, 0)
        if leader is not None:
            leaders[leader] = leaders.get(leader, 0) + 1
        for r in b.replicas:
            hosted[r] = hosted.get(r, 0) + 1
        buckets_by_table.setdefault(b.table_id, []).append(
            BucketStatus(
                bucket=b.bucket_id,
                partition=b.partition_name if b.HasField("partition_name") else None,
                partition_id=partition_id,
                leader=leader,
                leader_epoch=b.leader_epoch,
                replicas=list(b.replicas),
                isr=list(b.isr),
                log_start=log_start,
                log_end=log_end,
                high_watermark=hw,
                kv_snapshot_id=b.kv_snapshot_id if b.HasField("kv_snapshot_id") else None,
                follower_lag=lag,
                elr=list(b.elr),
                held_local=held_local,
                held_remote=held_remote,
            )
        )
    lakes = {lake.table_id: lake for lake in cluster.lakes}
    tables = []
    for t in sorted(cluster.tables, key=lambda t: (t.database, t.name)):
        buckets = sorted(buckets_by_table.get(t.table_id, []), key=lambda b: (b.partition or "", b.bucket))
        tables.append(
            TableStatus(
                database=t.database,
                name=t.name,
                table_id=t.table_id,
                primary_key=t.primary_key,
                lake_enabled=t.lake_enabled,
                bucket_count=t.bucket_count,
                buckets=buckets,
                lake=_lake_status(lakes.get(t.table_id), buckets, now_ms) if t.lake_enabled else None,
                rescale=t.rescale if t.HasField("rescale") else None,
            )
        )
    names = {t.table_id: f"{t.database}.{t.name}" for t in cluster.tables}
    servers = []
    for server_id in sorted(live | set(hosted) | set(tags)):
        node = by_id.get(server_id)
        registered = next((s for s in cluster.tablet_servers if s.server_id == server_id), None)
        host = node.host if node else registered.host if registered else None
        port = node.port if node else registered.port if registered else None
        servers.append(
            ServerStatus(
                role="tablet-server",
                id=server_id,
                host=host,
                port=port,
                alive=server_id in live and replicas.get(server_id) is not None,
                leaders=leaders.get(server_id, 0),
                replicas=hosted.get(server_id, 0),
                tag=tags.get(server_id),
                rack=registered.rack if registered and registered.HasField("rack") else None,
                data_dirs=_data_dirs(replicas.get(server_id)),
            )
        )
    coordinator = next((n for n in nodes if n.server_type == ServerType.COORDINATOR), None)
    if coordinator is not None:
        servers.insert(
            0, ServerStatus("coordinator", coordinator.id, coordinator.host, coordinator.port, True)
        )
    tiering = [
        TieringStatus(
            table=names.get(t.table_id, str(t.table_id)),
            state=t.state,
            tiering_epoch=t.tiering_epoch,
            heartbeat_age_ms=t.heartbeat_age_ms if t.HasField("heartbeat_age_ms") else None,
            job=TieringJobStatus.from_pb(t.job) if t.HasField("job") else None,
            last_heartbeat_ms=t.last_heartbeat_ms if t.HasField("last_heartbeat_ms") else None,
        )
        for t in cluster.tiering
    ]
    jobs = [TieringJobStatus.from_pb(j) for j in cluster.tiering_jobs]
    return ClusterStatus(cluster.coordinator_epoch, servers, tables, tiering, rebalance, jobs)


def _lake_status(lake: internal.StatusLake | None, buckets: list[BucketStatus], now_ms: int) -> LakeStatus:
    offsets = [
        LakeOffset(
            o.partition_id if o.HasField("partition_id") else None,
            o.bucket_id,
            o.offset,
            o.lake_ahead_log_end if o.HasField("lake_ahead_log_end") else None,
        )
        for o in (lake.offsets if lake is not None else ())
    ]
    tiered = {(o.partition_id, o.bucket): o.offset for o in offsets}
    behind = 0
    for b in buckets:
        if b.high_watermark is not None:
            behind += max(0, b.high_watermark - tiered.get((b.partition_id, b.bucket), 0))
    if lake is None:
        return LakeStatus(None, None, [], behind, 0)
    return LakeStatus(
        snapshot_id=lake.snapshot_id,
        committed_time_ms=lake.committed_time,
        offsets=offsets,
        lag_records=behind,
        lag_ms=max(0, now_ms - lake.committed_time) if behind else 0,
    )


def _data_dirs(response: internal.DescribeReplicasResponse | None) -> list[DataDirStatus]:
    return [
        DataDirStatus(
            path=d.path,
            replicas=d.replicas,
            usage_ratio=d.usage_ratio,
            write_locked=d.write_locked,
            offline=d.offline_reason if d.HasField("offline_reason") else None,
            free_bytes=d.free_bytes if d.HasField("free_bytes") else None,
        )
        for d in (response.data_dirs if response is not None else ())
    ]
