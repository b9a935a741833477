"""Bucket placement and leadership: assigns replicas, elects leaders when servers come and go, and
pushes the result to tablet servers (NotifyLeaderAndIsr, StopReplica, UpdateMetadata)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence

from strom.common import config as options
from strom.common.errors import (
    FencedLeaderEpochError,
    FlussError,
    IneligibleReplicaError,
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    UnknownTableOrBucketError,
)
from strom.common.placement import ServerLocation, place_replicas
from strom.common.supervision import spawn
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.coordinator.leader_election import (
    Election,
    change_isr,
    elect,
    forget_unclean,
    prefer_longest_log,
)
from strom.server.coordinator.membership import Membership
from strom.server.coordinator.resend import Owed, Resender
from strom.server.store.base import BucketAssignment
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT = 10.0
LEADERS_FIRST_TIMEOUT = 1.0
# How long a last-resort or unclean election waits for the replicas to report their logs (without the
# controller lock). A live replica answers DescribeReplicas from memory in milliseconds; one that does
# not answer in time is passed over, as one that is down, and the bucket stays leaderless no longer.
DESCRIBE_LOGS_TIMEOUT = 2.0


def assign_replicas(
    table_id: int,
    partition_id: int | None,
    bucket_count: int,
    replication_factor: int,
    live: Sequence[ServerLocation],
) -> list[BucketAssignment]:
    """Replicas of new buckets spread over racks and hosts, then evenly over the live servers
    (`strom.common.placement`); the first replica leads. What the layout cannot guarantee is logged."""
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, got {replication_factor}"
        )
    if replication_factor > len(live):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the number of available tablet "
            f"servers ({len(live)})"
        )
    placed = place_replicas(bucket_count, replication_factor, live)
    for warning in placed.warnings:
        _warn_once(warning)
    return [
        BucketAssignment(table_id, partition_id, bucket, replicas, replicas[0], 0, replicas, 0)
        for bucket, replicas in enumerate(placed.replicas)
    ]


_warned: set[str] = set()


def _warn_once(warning: str) -> None:
    """A layout that cannot separate replicas is said once per coordinator, not at every new table."""
    if warning not in _warned:
        _warned.add(warning)
        log.warning("replica placement: %s", warning)


class Controller:
    def __init__(
        self,
        store: OrderedStore,
        membership: Membership,
        pool: ConnectionPool,
        coordinator_epoch: int,
        coordinator_node: pb.PbServerNode,
        min_isr: int = 1,
    ) -> None:
        self.store = store
        self.membership = membership
        self.pool = pool
        self.coordinator_epoch = coordinator_epoch
        self.coordinator_node = coordinator_node
        # `log.replica.min-in-sync-replicas-number`: below it, replicas leaving the ISR join the ELR
        self.min_isr = min_isr
        # leaders elected that may have lost acknowledged records (unclean or last-resort elections)
        self.unclean_elections = 0
        # leaders elected from the ELR (no ISR member was live)
        self.elr_elections = 0
        # held while reading and writing assignments, so leadership, ISR and rebalance steps do not race
        self.lock = asyncio.Lock()
        # the current metadata (schema id, descriptor) of the tables with these ids, as UpdateMetadata
        # carries it (set by the metadata service)
        self.table_metadata: Callable[[set[int]], list[pb.PbTableMetadata]] = lambda ids: []
        # called after an election that may lose acknowledged records with the new leader's reported
        # log end (None: no answer); the lake service checks the lake is not ahead of it
        self.on_truncating_election: Callable[[BucketAssignment, int | None], Awaitable[None]] | None = None
        # pushes a live server missed, sent again until it acknowledges them (resend.py)
        self.resender = Resender(self._session_of, self._push_owed)

    async def close(self) -> None:
        await self.resender.close()

    # ---- pushes to tablet servers

    async def send(
        self, server_id: int, key: ApiKey, message: object, owe: Callable[[], None] | None = None
    ) -> object | None:
        """The server's answer, or None. `owe` records the push for resending when the server may not
        have got it (a lost connection, a timeout); an error it answered with is not resent."""
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
            if owe is not None and e.retriable:
                owe()
            return None

    def _session_of(self, server_id: int) -> int | None:
        server = self.membership.servers.get(server_id)
        return None if server is None else server.session_id

    async def _push_owed(self, server_id: int, owed: Owed) -> Owed:
        """Send the current state of what `owed` names; returns what failed again."""
        left = Owed(owed.session_id)
        if owed.servers or owed.tables:
            request = self._update_metadata(self.table_metadata(owed.tables) if owed.tables else ())
            if await self.send(server_id, ApiKey.UPDATE_METADATA, request) is None:
                left.servers, left.tables = owed.servers, set(owed.tables)
        if owed.buckets:
            # buckets it no longer hosts (or that are gone) need nothing
            notify = self._leadership_requests(self._current(owed.buckets), {server_id}).get(server_id)
            key = ApiKey.NOTIFY_LEADER_AND_ISR
            if notify is not None and await self.send(server_id, key, notify) is None:
                left.buckets = set(owed.buckets)
        return left

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
        """Tell every live replica of these buckets who leads them now.

        What is sent is the store's state at the moment of sending, not the caller's copy: callers await
        other pushes first (a paused server holds them for NOTIFY_TIMEOUT), and a stale leadership that
        reaches a server restarted meanwhile has nothing newer to be fenced by. A restarted replica that
        lost its tail then led an old epoch with an empty log, and the replica that kept the records
        truncated to it (tests/cluster/test_eligible_leaders.py).
        """
        keys = {a.key for a in assignments}
        by_server = self._leadership_requests(self._current(keys), only_servers)
        # Leaders first, so that followers asking a new leader where to truncate (OffsetForLeaderEpoch)
        # usually find it already leading; a leader that does not answer in time does not hold them up.
        leaders = {s for s, r in by_server.items() if any(e.leader == s for e in r.notify_buckets_leader_req)}
        # spawned: a leader slower than the timeout is still told, and an error of its call still seen
        first = [spawn(self._notify(s, by_server[s]), name="notify-leader-first") for s in leaders]
        if first:
            await asyncio.wait(first, timeout=LEADERS_FIRST_TIMEOUT)
            by_server = self._leadership_requests(self._current(keys), only_servers)  # fresh again
        await asyncio.gather(*(self._notify(s, r) for s, r in by_server.items() if s not in leaders))

    async def _notify(self, server_id: int, request: pb.NotifyLeaderAndIsrRequest) -> object | None:
        keys = {
            (
                e.table_bucket.table_id,
                e.table_bucket.partition_id if e.table_bucket.HasField("partition_id") else None,
                e.table_bucket.bucket_id,
            )
            for e in request.notify_buckets_leader_req
        }
        owe = lambda: self.resender.owe(server_id, buckets=keys)  # noqa: E731
        return await self.send(server_id, ApiKey.NOTIFY_LEADER_AND_ISR, request, owe)

    def _current(self, keys: set[tuple[int, int | None, int]]) -> list[BucketAssignment]:
        """The stored state of these buckets (dropped ones left out)."""
        found: list[BucketAssignment] = []
        for table_id in {k[0] for k in keys}:
            found.extend(a for a in self.store.list_buckets(table_id) if a.key in keys)
        return found

    def _leadership_requests(
        self, assignments: Iterable[BucketAssignment], only_servers: set[int] | None
    ) -> dict[int, pb.NotifyLeaderAndIsrRequest]:
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
        return by_server

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
        request = self._update_metadata(tables)
        table_ids = {t.table_id for t in tables}

        def owe(server_id: int) -> Callable[[], None]:
            return lambda: self.resender.owe(server_id, servers=True, tables=table_ids)

        await asyncio.gather(
            *(self.send(s, ApiKey.UPDATE_METADATA, request, owe(s)) for s in list(self.membership.servers))
        )

    def _update_metadata(self, tables: Sequence[pb.PbTableMetadata]) -> pb.UpdateMetadataRequest:
        request = pb.UpdateMetadataRequest(coordinator_epoch=self.coordinator_epoch)
        request.table_metadata.extend(tables)
        request.coordinator_server.CopyFrom(self.coordinator_node)
        for server in self.membership.servers.values():
            node = request.tablet_servers.add(node_id=server.server_id, host=server.host, port=server.port)
            if server.listeners:
                node.listeners = server.listeners
        return request

    # ---- membership events

    async def on_server_registered(self, server_id: int, unclean: bool = False) -> None:
        """Elect leaders of the (re)joining server's leaderless buckets, and tell it all its replicas.

        `unclean`: this process started after an unclean shutdown, so its replicas may have lost their
        unflushed tails; they are no longer eligible to lead (KIP-966) until they rejoin the ISR.
        """
        deferred: list[_Deferred] = []
        async with self.lock:
            changed: list[BucketAssignment] = []
            hosted: list[BucketAssignment] = []
            live = set(self.membership.servers)
            for a in self.store.list_buckets():
                if server_id not in a.replicas:
                    continue
                before = a
                if unclean:
                    a = forget_unclean(a, server_id)
                if a.leader is None:
                    elected, kind = elect(a, set(), live, self.min_isr, self._unclean_allowed(a.table_id))
                    if kind in (Election.LAST_RESORT, Election.UNCLEAN):
                        # settled outside the lock once the replicas report their logs (`a` is stored
                        # now, so that the server stays ineligible whatever happens meanwhile)
                        deferred.append(_Deferred(a, elected, frozenset()))
                    else:
                        a = elected
                        self._count(a, kind)
                if a != before:
                    changed.append(a)
                hosted.append(a)
            if changed:
                await self.store.put_buckets(changed)
                log.info("server %d joined: %d bucket(s) changed leadership or ISR", server_id, len(changed))
        # A returning server may have missed AlterTable's UpdateMetadata (it was down or frozen): it
        # learns its tables' current schemas before it leads or follows them again.
        await self.broadcast_servers(self.table_metadata({a.table_id for a in hosted}))
        await self.notify_leadership(hosted)
        await self._settle(deferred)

    async def on_servers_dead(
        self, server_ids: set[int], still_registered: bool = False, moved: Callable[[], None] | None = None
    ) -> None:
        """Move leadership away from dead servers to live eligible replicas (or leave the bucket
        waiting for one); dead followers leave the ISR.

        `still_registered`: the ids are registered again already (restarted processes), so they get
        the new leadership too, as followers. `moved` runs once the store holds the new leadership.
        """
        async with self.lock:
            live = set(self.membership.servers) - server_ids
            affected = [
                a for a in self.store.list_buckets() if a.leader in server_ids or set(a.isr) & server_ids
            ]
            changed, deferred = self._elect_all(affected, server_ids, live)
            if changed:
                await self.store.put_buckets(changed)
                log.info(
                    "servers %s gone: %d bucket(s) changed leadership or ISR",
                    sorted(server_ids),
                    len(changed),
                )
            if moved is not None:
                moved()
        if not still_registered:
            await self.broadcast_servers()
        await self.notify_leadership(changed)
        await self._settle(deferred)

    async def report_offline_replicas(
        self, request: internal.ReportOfflineReplicasRequest, ctx: object
    ) -> internal.ReportOfflineReplicasResponse:
        """A tablet server's data directory failed and closed the replicas in it: each bucket led
        there gets a new leader from the rest of its ISR (or waits for one), and the server leaves
        the ISR and the ELR of every such bucket, since it no longer holds the data. It stays in the
        replica list: restarted with the directory readable, it catches up and rejoins the ISR."""
        server_id = request.server_id
        keys = {
            (r.table_id, r.partition_id if r.HasField("partition_id") else None, r.bucket_id)
            for r in request.replicas
        }

        def not_eligible(a: BucketAssignment) -> BucketAssignment:
            return dataclasses.replace(a, elr=tuple(r for r in a.elr if r != server_id))

        async with self.lock:
            live = set(self.membership.servers) - {server_id}
            before = {
                a.key: a for a in self.store.list_buckets() if a.key in keys and server_id in a.replicas
            }
            stripped = {key: not_eligible(a) for key, a in before.items()}
            elected_list, deferred = self._elect_all(list(stripped.values()), {server_id}, live)
            elected = {a.key: a for a in elected_list}
            waiting = {d.original.key: d for d in deferred}
            deferred = []
            changed: list[BucketAssignment] = []
            for key, old in before.items():
                # below the minimum ISR the election keeps a removed member eligible (ELR): not this one
                new = not_eligible(stripped[key] if key in waiting else elected.get(key, stripped[key]))
                if new != old:
                    if new.bucket_epoch == old.bucket_epoch:
                        new = dataclasses.replace(new, bucket_epoch=old.bucket_epoch + 1)
                    changed.append(new)
                if key in waiting:
                    # stored stripped now; elected once the other replicas report their logs
                    deferred.append(
                        _Deferred(
                            new if new != old else old,
                            waiting[key].elected,
                            frozenset({server_id}),
                            not_eligible,
                        )
                    )
            if changed:
                await self.store.put_buckets(changed)
            log.warning(
                "tablet server %d reports %d replica(s) offline (%s): %d bucket(s) changed leadership or ISR",
                server_id,
                len(keys),
                request.reason or "a data directory failed",
                len(changed),
            )
        await self.notify_leadership(changed)
        await self._settle(deferred)
        return internal.ReportOfflineReplicasResponse()

    async def elect_waiting(self, table_id: int) -> None:
        """Try again to elect leaders of this table's leaderless buckets (its options changed)."""
        async with self.lock:
            live = set(self.membership.servers)
            waiting = [a for a in self.store.list_buckets(table_id) if a.leader is None]
            changed, deferred = self._elect_all(waiting, set(), live)
            if changed:
                await self.store.put_buckets(changed)
        await self.notify_leadership(changed)
        await self._settle(deferred)

    def _elect_all(
        self, buckets: list[BucketAssignment], gone: set[int], live: set[int]
    ) -> tuple[list[BucketAssignment], list[_Deferred]]:
        """Elect each bucket (`gone` servers just left). Returns the buckets whose assignment changed,
        and the elections that take a replica that may have lost data (last-resort, unclean): those
        are left as they are for `_settle`, which asks the replicas for their logs first."""
        changed: list[BucketAssignment] = []
        deferred: list[_Deferred] = []
        for a in buckets:
            new, kind = elect(a, gone, live, self.min_isr, self._unclean_allowed(a.table_id))
            if kind in (Election.LAST_RESORT, Election.UNCLEAN):
                deferred.append(_Deferred(a, new, frozenset(gone)))
                continue
            self._count(new, kind)
            if new != a:
                changed.append(new)
        return changed, deferred

    async def _settle(self, deferred: list[_Deferred]) -> None:
        """Finish last-resort and unclean elections. The replicas are asked for their logs without the
        controller lock: one that does not answer would otherwise stall every other controller action
        (ISR changes, other elections) for the whole wait. Under the lock again, a bucket that got a
        leader meanwhile (another election settled first) or was dropped is left as it is; the others
        are elected again from their current state, with the answers."""
        if not deferred:
            return
        live = set(self.membership.servers)
        reports = await self._report_logs([d.elected for d in deferred], live)
        settled: list[BucketAssignment] = []
        async with self.lock:
            current = {a.key: a for a in self._current({d.original.key for d in deferred})}
            live = set(self.membership.servers)
            for d in deferred:
                stored = current.get(d.original.key)
                if stored is None or (stored != d.original and stored.leader is not None):
                    log.info(
                        "table %d bucket %d changed while its replicas reported their logs (leader %s); "
                        "its election is left to that change",
                        d.original.table_id,
                        d.original.bucket_id,
                        None if stored is None else stored.leader,
                    )
                    continue
                allowed = self._unclean_allowed(stored.table_id)
                new, kind = elect(stored, set(d.gone), live - d.gone, self.min_isr, allowed)
                if kind in (Election.LAST_RESORT, Election.UNCLEAN):
                    new = await self._prefer_longest_log(new, kind, reports)
                else:
                    self._count(new, kind)
                if d.after is not None:
                    new = d.after(new)
                if new != stored:
                    if new.bucket_epoch == stored.bucket_epoch:
                        new = dataclasses.replace(new, bucket_epoch=stored.bucket_epoch + 1)
                    settled.append(new)
            if settled:
                await self.store.put_buckets(settled)
        await self.notify_leadership(settled)

    async def _report_logs(
        self, elected: list[BucketAssignment], live: set[int]
    ) -> dict[tuple[int, int | None, int], dict[int, tuple[int, int]]]:
        """Each live replica of these buckets reports its log as it lies on disk: bucket -> server ->
        (latest leader epoch, log end offset). A replica that does not answer in time is left out; a
        server stopping under a controlled shutdown still answers but is not `live`, so it is not asked."""
        by_server: dict[int, internal.DescribeReplicasRequest] = {}
        for a in elected:
            for server_id in a.replicas:
                if server_id not in live:
                    continue
                request = by_server.setdefault(server_id, internal.DescribeReplicasRequest())
                entry = request.on_disk.add(table_id=a.table_id, bucket_id=a.bucket_id)
                if a.partition_id is not None:
                    entry.partition_id = a.partition_id
        servers = list(by_server)
        answers = await asyncio.gather(*(self._describe_logs(s, by_server[s]) for s in servers))
        ends: dict[tuple[int, int | None, int], dict[int, tuple[int, int]]] = defaultdict(dict)
        for server_id, answer in zip(servers, answers, strict=True):
            if not isinstance(answer, internal.DescribeReplicasResponse):
                continue
            for r in answer.replicas:
                key = (r.table_id, r.partition_id if r.HasField("partition_id") else None, r.bucket_id)
                epoch = r.latest_leader_epoch if r.HasField("latest_leader_epoch") else -1
                ends[key][server_id] = (epoch, r.log_end_offset)
        return ends

    async def _prefer_longest_log(
        self,
        a: BucketAssignment,
        kind: Election,
        reports: dict[tuple[int, int | None, int], dict[int, tuple[int, int]]],
    ) -> BucketAssignment:
        """A last-resort election (every replica live, none eligible) or an unclean one
        (`table.unclean.leader.election.enabled`, no eligible replica live): of the replicas that
        reported their logs, the one with the latest leader epoch, then the longest log, leads rather
        than the first in assignment order, which may be the one that lost its unflushed tail in a
        power cut while the others were only killed; with no answer at all the first in order leads.
        Counted and logged here, and the lake service checks the lake is not ahead of the new log."""
        reported = {s: e for s, e in reports.get(a.key, {}).items() if s in a.replicas}
        new = prefer_longest_log(a, reported)
        log.warning(
            "%s election of table %d bucket %d: replica logs (leader epoch, log end) %s%s",
            "last-resort" if kind is Election.LAST_RESORT else "unclean",
            a.table_id,
            a.bucket_id,
            {s: reported.get(s, "no answer") for s in a.replicas},
            "" if new.leader == a.leader else f": server {new.leader} has the longest, not {a.leader}",
        )
        self._count(new, kind)
        if self.on_truncating_election is not None and new.leader is not None:
            end = reported.get(new.leader)
            await self.on_truncating_election(new, None if end is None else end[1])
        return new

    async def _describe_logs(
        self, server_id: int, request: internal.DescribeReplicasRequest
    ) -> object | None:
        """The replica's report of its logs on disk, or None after DESCRIBE_LOGS_TIMEOUT."""
        try:
            return await asyncio.wait_for(
                self.send(server_id, ApiKey.DESCRIBE_REPLICAS, request), DESCRIBE_LOGS_TIMEOUT
            )
        except TimeoutError:
            log.warning(
                "tablet server %d did not report its logs within %.1f s; passed over in this election",
                server_id,
                DESCRIBE_LOGS_TIMEOUT,
            )
            return None

    def _unclean_allowed(self, table_id: int) -> Callable[[], bool]:
        def allowed() -> bool:
            table = self.store.get_table_by_id(table_id)
            if table is None:
                return False
            option = options.TABLE_UNCLEAN_LEADER_ELECTION_ENABLED
            raw = TableDescriptor.from_json_bytes(table.table_json).properties.get(option.key)
            return raw is not None and option.parse(raw)

        return allowed

    def _count(self, a: BucketAssignment, kind: Election) -> None:
        where = f"table {a.table_id} bucket {a.bucket_id}" + (
            "" if a.partition_id is None else f" (partition {a.partition_id})"
        )
        if kind is Election.UNCLEAN:
            self.unclean_elections += 1
            log.error(
                "UNCLEAN LEADER ELECTION of %s: no eligible replica is live and "
                "table.unclean.leader.election.enabled is set, so server %s leads; acknowledged records "
                "it lost are gone for good",
                where,
                a.leader,
            )
        elif kind is Election.LAST_RESORT:
            self.unclean_elections += 1
            log.error(
                "every replica of %s restarted after an unclean shutdown and none is eligible: server %s "
                "leads; records acknowledged after its last fsync may be lost",
                where,
                a.leader,
            )
        elif kind is Election.ELR:
            self.elr_elections += 1
            log.warning("%s: no ISR member is live; eligible leader replica %s leads", where, a.leader)
        elif kind is Election.WAITING:
            log.warning(
                "%s waits for an eligible replica (ISR %s, ELR %s) to come back; none of the live "
                "replicas is known to hold every acknowledged record",
                where,
                list(a.isr),
                list(a.elr),
            )

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
                    elif dead := sorted(set(new_isr) - set(a.isr) - set(self.membership.servers)):
                        # the leader saw them caught up just before they went away (a rolling restart
                        # stops one server after another): taken in, they would hold every acks=all
                        # write until they lagged out of the ISR again (found by tests/faults)
                        error = IneligibleReplicaError(
                            f"ISR {list(new_isr)} adds server(s) {dead}, which are not alive"
                        )
                    if error is not None:
                        result.error_code = error.code
                        result.error_message = error.message
                        continue
                    assert a is not None
                    a = change_isr(a, new_isr, self.min_isr)
                    accepted.append(a)
                    result.leader_id = a.leader
                    result.leader_epoch = a.leader_epoch
                    result.isr.extend(a.isr)
                    result.bucket_epoch = a.bucket_epoch
                    result.coordinator_epoch = self.coordinator_epoch
            if accepted:
                await self.store.put_buckets(accepted)
                for a in accepted:
                    log.info(
                        "ISR of table %d bucket %d (partition %s) is now %s (ELR %s)",
                        a.table_id,
                        a.bucket_id,
                        a.partition_id,
                        list(a.isr),
                        list(a.elr),
                    )
        return response


@dataclasses.dataclass(frozen=True)
class _Deferred:
    """A last-resort or unclean election waiting for the replicas' log reports: `original` the bucket
    as stored when it was decided (re-checked before it is settled), `elected` the choice before the
    reports,
    `gone` the servers that had just left, `after` what the event does to the bucket after electing
    (a server whose data directory failed stays out of the ELR)."""

    original: BucketAssignment
    elected: BucketAssignment
    gone: frozenset[int]
    after: Callable[[BucketAssignment], BucketAssignment] | None = None


def _pb_bucket(a: BucketAssignment) -> pb.PbTableBucket:
    bucket = pb.PbTableBucket(table_id=a.table_id, bucket_id=a.bucket_id)
    if a.partition_id is not None:
        bucket.partition_id = a.partition_id
    return bucket


def bucket_of(a: BucketAssignment) -> TableBucket:
    return TableBucket(a.table_id, a.partition_id, a.bucket_id)
