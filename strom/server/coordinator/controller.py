"""Bucket placement and leadership: assigns replicas, elects leaders when servers come and go, and
pushes the result to tablet servers (NotifyLeaderAndIsr, StopReplica, UpdateMetadata)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from strom.common.errors import (
    FencedLeaderEpochError,
    FlussError,
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    UnknownTableOrBucketError,
)
from strom.common.supervision import spawn
from strom.common.table_bucket import TableBucket
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.membership import Membership
from strom.server.store.base import BucketAssignment, MetadataStore

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT = 10.0
LEADERS_FIRST_TIMEOUT = 1.0


def assign_replicas(
    table_id: int, partition_id: int | None, bucket_count: int, replication_factor: int, live: list[int]
) -> list[BucketAssignment]:
    """Spread replicas round-robin over the live servers from a random start, first replica leads."""
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, got {replication_factor}"
        )
    if replication_factor > len(live):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the number of available tablet "
            f"servers ({len(live)})"
        )
    servers = sorted(live)
    start = random.randrange(len(servers))
    assignments = []
    for bucket in range(bucket_count):
        first = (start + bucket) % len(servers)
        replicas = tuple(servers[(first + i) % len(servers)] for i in range(replication_factor))
        assignments.append(
            BucketAssignment(table_id, partition_id, bucket, replicas, replicas[0], 0, replicas, 0)
        )
    return assignments


class Controller:
    def __init__(
        self,
        store: MetadataStore,
        membership: Membership,
        pool: ConnectionPool,
        coordinator_epoch: int,
        coordinator_node: pb.PbServerNode,
    ) -> None:
        self.store = store
        self.membership = membership
        self.pool = pool
        self.coordinator_epoch = coordinator_epoch
        self.coordinator_node = coordinator_node
        # held while reading and writing assignments, so leadership, ISR and rebalance steps do not race
        self.lock = asyncio.Lock()
        # the current metadata (schema id, descriptor) of the tables with these ids, as UpdateMetadata
        # carries it (set by the metadata service)
        self.table_metadata: Callable[[set[int]], list[pb.PbTableMetadata]] = lambda ids: []

    # ---- pushes to tablet servers

    async def send(self, server_id: int, key: ApiKey, message: object) -> object | None:
        server = self.membership.servers.get(server_id)
        if server is None:
            return None
        try:
            return await self.pool.request(
                server.host,
                server.port,
                key,
                message,
                timeout=NOTIFY_TIMEOUT,
            )
        except FlussError as e:
            log.warning("%s to tablet server %d failed: %s", key.name, server_id, e)
            return None

    def _physical_path(self, assignment: BucketAssignment) -> pb.PbPhysicalTablePath | None:
        table = self.store.get_table_by_id(assignment.table_id)
        if table is None:
            return None
        path = pb.PbPhysicalTablePath(database_name=table.database, table_name=table.name)
        if assignment.partition_id is not None:
            partition = self.store.get_partition_by_id(assignment.partition_id)
            if partition is None:
                return None
            path.partition_name = partition.name
        return path

    async def notify_leadership(
        self, assignments: Iterable[BucketAssignment], only_servers: set[int] | None = None
    ) -> None:
        """Tell every live replica of these buckets who leads them now."""
        by_server: dict[int, pb.NotifyLeaderAndIsrRequest] = {}
        for a in assignments:
            if a.leader is None:
                continue
            path = self._physical_path(a)
            if path is None:
                continue
            for server_id in a.replicas:
                if only_servers is not None and server_id not in only_servers:
                    continue
                request = by_server.setdefault(
                    server_id, pb.NotifyLeaderAndIsrRequest(coordinator_epoch=self.coordinator_epoch)
                )
                entry = request.notify_buckets_leader_req.add(
                    leader=a.leader,
                    leader_epoch=a.leader_epoch,
                    replicas=a.replicas,
                    isr=a.isr,
                    bucket_epoch=a.bucket_epoch,
                )
                entry.physical_table_path.CopyFrom(path)
                entry.table_bucket.CopyFrom(_pb_bucket(a))
        # Leaders first, so that followers asking a new leader where to truncate (OffsetForLeaderEpoch)
        # usually find it already leading; a leader that does not answer in time does not hold them up.
        leaders = {s for s, r in by_server.items() if any(e.leader == s for e in r.notify_buckets_leader_req)}
        # spawned: a leader slower than the timeout is still told, and an error of its call still seen
        first = [
            spawn(self.send(s, ApiKey.NOTIFY_LEADER_AND_ISR, by_server[s]), name="notify-leader-first")
            for s in leaders
        ]
        if first:
            await asyncio.wait(first, timeout=LEADERS_FIRST_TIMEOUT)
        await asyncio.gather(
            *(self.send(s, ApiKey.NOTIFY_LEADER_AND_ISR, r) for s, r in by_server.items() if s not in leaders)
        )

    async def stop_replicas(self, assignments: Iterable[BucketAssignment], delete: bool) -> None:
        by_server: dict[int, pb.StopReplicaRequest] = defaultdict(
            lambda: pb.StopReplicaRequest(coordinator_epoch=self.coordinator_epoch)
        )
        for a in assignments:
            for server_id in a.replicas:
                entry = by_server[server_id].stop_replicas_req.add(leader_epoch=a.leader_epoch, delete=delete)
                entry.table_bucket.CopyFrom(_pb_bucket(a))
        await asyncio.gather(*(self.send(s, ApiKey.STOP_REPLICA, r) for s, r in by_server.items()))

    async def broadcast_servers(self, tables: Sequence[pb.PbTableMetadata] = ()) -> None:
        """UpdateMetadata with the live server list, so tablet servers know their peers, and the
        given tables' current metadata (an altered table's new schema or options)."""
        request = pb.UpdateMetadataRequest(coordinator_epoch=self.coordinator_epoch)
        request.table_metadata.extend(tables)
        request.coordinator_server.CopyFrom(self.coordinator_node)
        for server in self.membership.servers.values():
            node = request.tablet_servers.add(node_id=server.server_id, host=server.host, port=server.port)
            if server.listeners:
                node.listeners = server.listeners
        await asyncio.gather(
            *(self.send(s, ApiKey.UPDATE_METADATA, request) for s in list(self.membership.servers))
        )

    # ---- membership events

    async def on_server_registered(self, server_id: int) -> None:
        """Give a (re)joining server leadership of its leaderless buckets, and tell it all its replicas."""
        async with self.lock:
            changed: list[BucketAssignment] = []
            hosted: list[BucketAssignment] = []
            for a in self.store.list_buckets():
                if server_id not in a.replicas:
                    continue
                if a.leader is None and (server_id in a.isr or not a.isr):
                    a = BucketAssignment(
                        a.table_id,
                        a.partition_id,
                        a.bucket_id,
                        a.replicas,
                        server_id,
                        a.leader_epoch + 1,
                        a.isr or (server_id,),
                        a.bucket_epoch,
                    )
                    changed.append(a)
                hosted.append(a)
            if changed:
                self.store.put_buckets(changed)
                log.info("server %d leads %d leaderless bucket(s) again", server_id, len(changed))
        # A returning server may have missed AlterTable's UpdateMetadata (it was down or frozen): it
        # learns its tables' current schemas before it leads or follows them again.
        await self.broadcast_servers(self.table_metadata({a.table_id for a in hosted}))
        await self.notify_leadership(hosted)

    async def on_servers_dead(self, server_ids: set[int], still_registered: bool = False) -> None:
        """Move leadership away from dead servers to live ISR members (or leave the bucket offline).

        `still_registered`: the ids are registered again already (restarted processes), so they get
        the new leadership too, as followers.
        """
        async with self.lock:
            live = set(self.membership.servers) - server_ids
            changed: list[BucketAssignment] = []
            for a in self.store.list_buckets():
                if a.leader not in server_ids:
                    if a.leader is not None and set(a.isr) & server_ids:
                        # a dead follower leaves the ISR at once, so acks=all writes do not wait for it
                        isr = tuple(r for r in a.isr if r not in server_ids)
                        changed.append(
                            BucketAssignment(
                                a.table_id,
                                a.partition_id,
                                a.bucket_id,
                                a.replicas,
                                a.leader,
                                a.leader_epoch,
                                isr,
                                a.bucket_epoch + 1,
                            )
                        )
                    continue
                candidates = [r for r in a.replicas if r in a.isr and r in live]
                new_leader = candidates[0] if candidates else None
                # Keep the dead leader in the ISR when nobody else is left (Kafka does the same), so it
                # can lead again on return without losing acknowledged writes.
                new_isr = tuple(r for r in a.isr if r not in server_ids) or a.isr
                changed.append(
                    BucketAssignment(
                        a.table_id,
                        a.partition_id,
                        a.bucket_id,
                        a.replicas,
                        new_leader,
                        a.leader_epoch + 1,
                        new_isr,
                        a.bucket_epoch,
                    )
                )
            if changed:
                self.store.put_buckets(changed)
                log.info("servers %s gone: %d bucket(s) changed leadership", sorted(server_ids), len(changed))
        if not still_registered:
            await self.broadcast_servers()
        await self.notify_leadership(changed)

    async def adjust_isr(self, request: pb.AdjustIsrRequest, ctx: object) -> pb.AdjustIsrResponse:
        """A leader proposes a new ISR; accepted when its leader and bucket epochs are current."""
        response = pb.AdjustIsrResponse()
        accepted: list[BucketAssignment] = []
        async with self.lock:
            for table in request.tables_req:
                current = {(a.partition_id, a.bucket_id): a for a in self.store.list_buckets(table.table_id)}
                table_resp = response.tables_resp.add(table_id=table.table_id)
                for entry in table.buckets_req:
                    partition = entry.partition_id if entry.HasField("partition_id") else None
                    result = table_resp.buckets_resp.add(bucket_id=entry.bucket_id)
                    if partition is not None:
                        result.partition_id = partition
                    a = current.get((partition, entry.bucket_id))
                    new_isr = tuple(entry.new_isr)
                    error: FlussError | None = None
                    if a is None:
                        error = UnknownTableOrBucketError(
                            f"bucket {entry.bucket_id} of table {table.table_id} does not exist"
                        )
                    elif a.leader != request.serverId or entry.leader_epoch != a.leader_epoch:
                        error = FencedLeaderEpochError(
                            f"server {request.serverId} with leader epoch {entry.leader_epoch} does not lead "
                            f"bucket {entry.bucket_id} (leader {a.leader}, epoch {a.leader_epoch})"
                        )
                    elif entry.bucket_epoch != a.bucket_epoch:
                        error = InvalidUpdateVersionError(
                            f"bucket epoch {entry.bucket_epoch} is stale (current {a.bucket_epoch})"
                        )
                    elif a.leader not in new_isr or not set(new_isr) <= set(a.replicas):
                        error = InvalidUpdateVersionError(
                            f"ISR {list(new_isr)} must hold the leader and only replicas {list(a.replicas)}"
                        )
                    if error is not None:
                        result.error_code = error.code
                        result.error_message = error.message
                        continue
                    assert a is not None
                    a = BucketAssignment(
                        a.table_id,
                        a.partition_id,
                        a.bucket_id,
                        a.replicas,
                        a.leader,
                        a.leader_epoch,
                        new_isr,
                        a.bucket_epoch + 1,
                    )
                    accepted.append(a)
                    result.leader_id = a.leader
                    result.leader_epoch = a.leader_epoch
                    result.isr.extend(a.isr)
                    result.bucket_epoch = a.bucket_epoch
                    result.coordinator_epoch = self.coordinator_epoch
            if accepted:
                self.store.put_buckets(accepted)
                for a in accepted:
                    log.info(
                        "ISR of table %d bucket %d (partition %s) is now %s",
                        a.table_id,
                        a.bucket_id,
                        a.partition_id,
                        list(a.isr),
                    )
        return response


def _pb_bucket(a: BucketAssignment) -> pb.PbTableBucket:
    bucket = pb.PbTableBucket(table_id=a.table_id, bucket_id=a.bucket_id)
    if a.partition_id is not None:
        bucket.partition_id = a.partition_id
    return bucket


def bucket_of(a: BucketAssignment) -> TableBucket:
    return TableBucket(a.table_id, a.partition_id, a.bucket_id)
