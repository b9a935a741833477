"""The active coordinator: everything a coordinator does while it owns the metadata.

One exists per coordinator process while that process is the active one (always, in the embedded mode;
after winning the election, with ZooKeeper). It bumps the coordinator epoch, loads its state from the
metadata store, tracks tablet servers, decides bucket leadership and serves the coordinator APIs.
Losing the election throws it away; winning again builds a fresh one from the store.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.lake_enablement import cluster_lake_format
from strom.common.supervision import TaskSet, supervise
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import Handler, RequestContext
from strom.security.layer import SecurityLayer
from strom.server.coordinator.acl_service import AclService
from strom.server.coordinator.auto_increment_service import AutoIncrementService
from strom.server.coordinator.auto_partition import AutoPartitionManager
from strom.server.coordinator.cluster_configs import ClusterConfigService
from strom.server.coordinator.cluster_health import get_cluster_health
from strom.server.coordinator.cluster_status import describe_cluster
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.failure_detector import FailureDetector
from strom.server.coordinator.kv_snapshot_leases import KvSnapshotLeaseService
from strom.server.coordinator.kv_snapshot_service import KvSnapshotService
from strom.server.coordinator.lake_service import LakeService
from strom.server.coordinator.lake_tiering import LakeTieringManager
from strom.server.coordinator.liveness import Liveness
from strom.server.coordinator.membership import LiveServer, Membership
from strom.server.coordinator.metadata_service import MetadataService
from strom.server.coordinator.orphan_files import OrphanFileCleaner
from strom.server.coordinator.producer_offsets import ProducerOffsetsService
from strom.server.coordinator.rebalance import RebalanceManager
from strom.server.coordinator.remote_log_service import RemoteLogService
from strom.server.coordinator.rescale import RescaleManager
from strom.server.dynamic_config import DynamicConfig
from strom.server.server_options import remote_data_dir
from strom.server.store.base import MetadataStore, TableRecord
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

# per tablet server, the process (incarnation) whose unclean start the controller already acted on
_UNCLEAN_STARTS = "unclean-starts/"

# Every API the coordinator serves, and which part of the active coordinator answers it. A standby
# coordinator advertises the same keys and forwards them to the active one.
HANDLERS: dict[ApiKey, Callable[[ActiveCoordinator], Handler]] = {
    ApiKey.CREATE_DATABASE: lambda c: c.metadata.create_database,
    ApiKey.DROP_DATABASE: lambda c: c.metadata.drop_database,
    ApiKey.LIST_DATABASES: lambda c: c.metadata.list_databases,
    ApiKey.DATABASE_EXISTS: lambda c: c.metadata.database_exists,
    ApiKey.GET_DATABASE_INFO: lambda c: c.metadata.get_database_info,
    ApiKey.CREATE_TABLE: lambda c: c.metadata.create_table,
    ApiKey.DROP_TABLE: lambda c: c.metadata.drop_table,
    ApiKey.GET_TABLE_INFO: lambda c: c.metadata.get_table_info,
    ApiKey.LIST_TABLES: lambda c: c.metadata.list_tables,
    ApiKey.TABLE_EXISTS: lambda c: c.metadata.table_exists,
    ApiKey.GET_TABLE_SCHEMA: lambda c: c.metadata.get_table_schema,
    ApiKey.ALTER_TABLE: lambda c: c.metadata.alter_table,
    ApiKey.LIST_PARTITION_INFOS: lambda c: c.metadata.list_partition_infos,
    ApiKey.CREATE_PARTITION: lambda c: c.metadata.create_partition,
    ApiKey.DROP_PARTITION: lambda c: c.metadata.drop_partition,
    ApiKey.GET_METADATA: lambda c: c.metadata.metadata,
    ApiKey.GET_LAKE_SNAPSHOT: lambda c: c.lake.get_lake_snapshot,
    ApiKey.LAKE_TIERING_HEARTBEAT: lambda c: c.lake.heartbeat,
    ApiKey.PREPARE_LAKE_TABLE_SNAPSHOT: lambda c: c.lake.prepare_snapshot,
    ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT: lambda c: c.lake.commit_snapshot,
    ApiKey.GET_LATEST_KV_SNAPSHOTS: lambda c: c.kv_snapshots.get_latest,
    ApiKey.GET_KV_SNAPSHOT_METADATA: lambda c: c.kv_snapshots.get_metadata,
    ApiKey.LIST_KV_SNAPSHOTS: lambda c: c.kv_snapshots.list,
    ApiKey.COMMIT_KV_SNAPSHOT: lambda c: c.kv_snapshots.commit,
    ApiKey.COMMIT_REMOTE_LOG_MANIFEST: lambda c: c.remote_logs.commit,
    ApiKey.LIST_REMOTE_LOG_MANIFESTS: lambda c: c.remote_logs.list,
    ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: lambda c: c.metadata.get_security_token,
    ApiKey.ADJUST_ISR: lambda c: c.controller.adjust_isr,
    ApiKey.CREATE_ACLS: lambda c: c.acls.create_acls,
    ApiKey.LIST_ACLS: lambda c: c.acls.list_acls,
    ApiKey.DROP_ACLS: lambda c: c.acls.drop_acls,
    ApiKey.DESCRIBE_CLUSTER: lambda c: functools.partial(describe_cluster, c),
    ApiKey.GET_CLUSTER_HEALTH: lambda c: functools.partial(get_cluster_health, c),
    ApiKey.ALTER_DATABASE: lambda c: c.metadata.alter_database,
    ApiKey.ADD_SERVER_TAG: lambda c: c.rebalance.add_server_tag,
    ApiKey.REMOVE_SERVER_TAG: lambda c: c.rebalance.remove_server_tag,
    ApiKey.REBALANCE: lambda c: c.rebalance.rebalance,
    ApiKey.LIST_REBALANCE_PROGRESS: lambda c: c.rebalance.list_progress,
    ApiKey.CANCEL_REBALANCE: lambda c: c.rebalance.cancel,
    ApiKey.REGISTER_TABLET_SERVER: lambda c: c.liveness.register,
    ApiKey.TABLET_SERVER_HEARTBEAT: lambda c: c.liveness.heartbeat,
    ApiKey.CONTROLLED_SHUTDOWN: lambda c: c.controlled_shutdown,
    ApiKey.REPORT_OFFLINE_REPLICAS: lambda c: c.controller.report_offline_replicas,
    ApiKey.ALLOCATE_AUTO_INCREMENT_IDS: lambda c: c.auto_increment.allocate,
    ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE: lambda c: c.kv_snapshot_leases.acquire,
    ApiKey.RELEASE_KV_SNAPSHOT_LEASE: lambda c: c.kv_snapshot_leases.release,
    ApiKey.DROP_KV_SNAPSHOT_LEASE: lambda c: c.kv_snapshot_leases.drop,
    ApiKey.DESCRIBE_CLUSTER_CONFIGS: lambda c: c.cluster_configs.describe,
    ApiKey.ALTER_CLUSTER_CONFIGS: lambda c: c.cluster_configs.alter,
    ApiKey.REGISTER_PRODUCER_OFFSETS: lambda c: c.producer_offsets.register,
    ApiKey.GET_PRODUCER_OFFSETS: lambda c: c.producer_offsets.get,
    ApiKey.DELETE_PRODUCER_OFFSETS: lambda c: c.producer_offsets.delete,
}

# Requests that need the tablet servers: after a (re)start they wait until every bucket has a live
# leader again (or the servers had their session timeout to come back), so that clients are never told
# a cluster without servers (the official client then reports existing tables as not found).
WAIT_UNTIL_READY = (ApiKey.GET_METADATA, ApiKey.CREATE_TABLE, ApiKey.CREATE_PARTITION)


class ActiveCoordinator:
    @classmethod
    async def create(
        cls,
        *,
        store: MetadataStore,
        config: Configuration,
        node: pb.PbServerNode,
        data_dir: Path,
        pool: ConnectionPool,
        liveness: Callable[[ActiveCoordinator], Liveness],
        security: SecurityLayer,
    ) -> ActiveCoordinator:
        """Take over `store`: bump the coordinator epoch (which fences the previous coordinator's
        writes) and make sure the default database exists. Nothing here blocks the event loop."""
        ordered = OrderedStore(store)
        try:
            epoch = await ordered.bump_coordinator_epoch()
            active = cls(
                store=ordered,
                coordinator_epoch=epoch,
                config=config,
                node=node,
                data_dir=data_dir,
                pool=pool,
                liveness=liveness,
                security=security,
            )
            await active.metadata.ensure_default_database()
        except BaseException:
            await ordered.close()  # the store and its thread: nothing else holds them
            raise
        return active

    def __init__(
        self,
        *,
        store: OrderedStore,
        coordinator_epoch: int,
        config: Configuration,
        node: pb.PbServerNode,
        data_dir: Path,
        pool: ConnectionPool,
        liveness: Callable[[ActiveCoordinator], Liveness],
        security: SecurityLayer,
    ) -> None:
        self.store = store
        self.config = config
        self.node = node
        self.pool = pool
        self.coordinator_epoch = coordinator_epoch
        self.membership = Membership(self.config.get(options.TABLET_SERVER_SESSION_TIMEOUT).total_seconds())
        # The services HANDLERS reads carry their types, since HANDLERS comes before this class.
        self.controller: Controller = Controller(
            store,
            self.membership,
            pool,
            self.coordinator_epoch,
            node,
            min_isr=self.config.get(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER) or 1,
        )
        self.failure_detector = FailureDetector(self._confirmed_dead)
        self.liveness: Liveness = liveness(self)
        self.metadata: MetadataService = MetadataService(
            store, self.config, self.membership, self.controller, node
        )
        self.auto_partitions = AutoPartitionManager(self.metadata)
        self.tiering = LakeTieringManager(self.config.get(options.LAKE_TIERING_JOB_TIMEOUT).total_seconds())
        self.lake: LakeService = LakeService(store, self.controller, self.tiering, data_dir / "lake-offsets")
        self.controller.on_truncating_election = self.lake.check_truncation
        self.metadata.on_table_created = self._table_created
        if cluster_lake_format(self.config) is not None:
            self.metadata.create_lake_table = self._create_lake_table
        self.kv_snapshots: KvSnapshotService = KvSnapshotService(store, self.config)
        self.kv_snapshot_leases: KvSnapshotLeaseService = KvSnapshotLeaseService(
            store, self.kv_snapshots.snapshot_exists
        )
        self.remote_logs: RemoteLogService = RemoteLogService(store)
        self.auto_increment: AutoIncrementService = AutoIncrementService(store)
        self.producer_offsets: ProducerOffsetsService = ProducerOffsetsService(store, self.config)
        self.cluster_configs: ClusterConfigService = ClusterConfigService(
            store, DynamicConfig(self.config), self.controller
        )
        self.cluster_configs.load()
        self.acls: AclService = AclService(store, security)  # loads the ACLs into the process's authorizer
        self.metadata.on_table_dropped = self._table_dropped
        remote_root = remote_data_dir(self.config)
        self.orphan_files: OrphanFileCleaner | None = (
            OrphanFileCleaner(
                store,
                remote_root,
                self.config.get(options.REMOTE_ORPHAN_CLEANUP_GRACE_PERIOD).total_seconds(),
            )
            if remote_root
            else None
        )
        self.rebalance: RebalanceManager = RebalanceManager(store, self.membership, self.controller)
        self.metadata.placement_candidates = self.rebalance.placement_candidates
        self.metadata.on_table_altered = self._table_altered
        self.rescale: RescaleManager = RescaleManager(
            store,
            self.membership,
            self.controller,
            self.metadata.tables_metadata,
            self.config.get(options.MAX_BUCKET_NUM),
        )
        self.metadata.rescale = self.rescale
        self.handlers: dict[ApiKey, Handler] = {key: handler(self) for key, handler in HANDLERS.items()}
        for key in WAIT_UNTIL_READY:
            self.handlers[key] = self._when_ready(self.handlers[key])
        self.ready = asyncio.Event()
        self._tasks = TaskSet("active coordinator")

    async def start(self) -> None:
        """Take over: learn the live tablet servers, tell them this coordinator's epoch and the current
        leadership, and move leadership off servers that are gone."""
        await self.liveness.start()
        for server in list(self.membership.servers.values()):
            self.failure_detector.watch(server)
        # A server that started uncleanly while no coordinator was active (or before the previous one
        # acted on it) is registered already: it loses its eligibility now, before anything is pushed.
        for server_id, unclean_start in self.liveness.unclean_at_start.items():
            if self._unclean_start_is_new(server_id, unclean_start):
                log.info("tablet server %d started after an unclean shutdown", server_id)
                await self.controller.on_server_registered(server_id, unclean=True)
                await self._unclean_start_acted_on(server_id, unclean_start)
        await self.controller.broadcast_servers()
        await self.controller.notify_leadership(self.store.list_buckets())
        supervise(self._startup_grace, name="startup-grace", tasks=self._tasks)
        supervise(self._become_ready, name="readiness", tasks=self._tasks)
        supervise(self._auto_partition_loop, name="auto-partition", tasks=self._tasks)
        self.lake.load_tables()
        supervise(self._tiering_expiry_loop, name="tiering-expiry", tasks=self._tasks)
        supervise(self._resume_rebalance, name="rebalance-resume", tasks=self._tasks)
        supervise(self._resume_rescales, name="rescale-resume", tasks=self._tasks)
        supervise(self.producer_offsets.cleanup_loop, name="producer-offsets-cleanup", tasks=self._tasks)
        orphan_interval = self.config.get(options.REMOTE_ORPHAN_CLEANUP_INTERVAL).total_seconds()
        if self.orphan_files is not None and orphan_interval > 0:
            orphans = self.orphan_files
            supervise(lambda: orphans.run(orphan_interval), name="remote-orphan-cleanup", tasks=self._tasks)
        # Nothing is awaited from here until the server routes requests to this coordinator, so the
        # servers' sessions start when they can reach it (not before the pushes above, which take
        # seconds with tens of thousands of buckets).
        self.liveness.serving()
        log.info(
            "coordinator active (epoch %d) on %s:%d with tablet servers %s",
            self.coordinator_epoch,
            self.node.host,
            self.node.port,
            self.membership.live_ids(),
        )

    async def stop(self) -> None:
        await self._tasks.close()
        await self.rebalance.stop()
        await self.controller.close()
        await self.liveness.stop()
        await self.failure_detector.close()

    # ---- tablet servers coming and going (called by the liveness source and the failure detector)

    async def server_registered(
        self, server: LiveServer, restarted: bool, unclean_start: int | None = None
    ) -> None:
        """`unclean_start`: the id of the server process when it started after an unclean shutdown
        (it re-registers with the same id after a coordinator failover: acted on once)."""
        unclean = unclean_start is not None and self._unclean_start_is_new(server.server_id, unclean_start)
        log.info(
            "tablet server %d registered at %s:%d%s%s",
            server.server_id,
            server.host,
            server.port,
            " (restarted)" if restarted else "",
            " after an unclean shutdown (or with a new data directory)" if unclean else "",
        )
        if restarted:
            # A new process of a known id lost whatever its predecessor led: move that first.
            await self.controller.on_servers_dead({server.server_id}, still_registered=True)
        self.failure_detector.watch(server)
        await self.controller.on_server_registered(server.server_id, unclean=unclean)
        if unclean and unclean_start is not None:
            await self._unclean_start_acted_on(server.server_id, unclean_start)

    def _unclean_start_is_new(self, server_id: int, unclean_start: int) -> bool:
        return self.store.get_document(f"{_UNCLEAN_STARTS}{server_id:010d}") != str(unclean_start).encode()

    async def _unclean_start_acted_on(self, server_id: int, unclean_start: int) -> None:
        await self.store.put_document(f"{_UNCLEAN_STARTS}{server_id:010d}", str(unclean_start).encode())

    async def servers_dead(self, servers: list[LiveServer], still_listed: bool = False) -> None:
        """These servers are gone: move their leadership. `still_listed`: they are still in the
        membership, and leave it once the store holds their buckets' new leaders (see _confirmed_dead)."""
        for server in servers:
            self.failure_detector.unwatch(server.server_id)

        def leave() -> None:
            for server in servers:
                self.membership.remove(server.server_id, server.session_id)

        ids = {s.server_id for s in servers}
        await self.controller.on_servers_dead(ids, moved=leave if still_listed else None)
        await self.liveness.forget(servers)

    async def controlled_shutdown(
        self, request: pb.ControlledShutdownRequest, ctx: RequestContext
    ) -> pb.ControlledShutdownResponse:
        """A tablet server about to stop (SIGTERM) asks for its leadership to move now, while it still
        answers its clients (with NOT_LEADER_OR_FOLLOWER, so they ask for the new leaders), instead of
        when its port closes or its session lapses, after which clients can only find out by retrying.
        It leaves the membership as a dead server would; its next start registers it again. The answer
        lists the buckets it still leads: those with no other replica to lead them."""
        server_id = request.tablet_server_id
        server = self.membership.servers.get(server_id)
        if server is not None:
            log.info("tablet server %d is shutting down: moving its leadership", server_id)
            await self.servers_dead([server], still_listed=True)
        response = pb.ControlledShutdownResponse()
        for a in self.store.list_buckets():
            if a.leader == server_id:
                bucket = response.remaining_leader_buckets.add(table_id=a.table_id, bucket_id=a.bucket_id)
                if a.partition_id is not None:
                    bucket.partition_id = a.partition_id
        return response

    async def _confirmed_dead(self, server_id: int, session_id: int) -> None:
        # The server stays listed until its leadership has moved: the store write takes a moment now
        # that it is off the event loop, and a Metadata answer of that moment naming a leader missing
        # from its own server list makes pyfluss 1.0 stop writing to the bucket for good.
        server = self.membership.servers.get(server_id)
        if server is not None and server.session_id == session_id:
            await self.servers_dead([server], still_listed=True)

    def _when_ready(self, handler: Handler) -> Handler:
        async def gated(request: Any, ctx: RequestContext) -> Message:
            await self.ready.wait()
            return await handler(request, ctx)

        return gated

    async def _become_ready(self) -> None:
        deadline = asyncio.get_running_loop().time() + self.liveness.session_timeout()
        while asyncio.get_running_loop().time() < deadline:
            live = self.membership.servers
            if all(b.leader in live for b in self.store.list_buckets()):
                break
            await asyncio.sleep(0.05)
        self.ready.set()

    async def _startup_grace(self) -> None:
        """Leaders recorded for servers that are not live once their sessions could have expired
        (servers that never came back after a restart of the whole cluster) are moved elsewhere."""
        await asyncio.sleep(self.liveness.grace_period())
        recorded = {b.leader for b in self.store.list_buckets() if b.leader is not None}
        missing = recorded - set(self.membership.servers)
        if missing:
            log.warning("tablet servers %s did not come back", sorted(missing))
            await self.controller.on_servers_dead(missing)

    # ---- background chores

    async def _resume_rebalance(self) -> None:
        """A rebalance a previous coordinator left unfinished goes on once the servers are back."""
        await self.ready.wait()
        self.rebalance.resume()

    async def _resume_rescales(self) -> None:
        """Rescales a previous coordinator (or a failed run) left unfinished go on once servers are back."""
        await self.ready.wait()
        await self.rescale.resume_loop()

    async def _auto_partition_loop(self) -> None:
        interval = self.config.get(options.AUTO_PARTITION_CHECK_INTERVAL).total_seconds()
        # give tablet servers time to register before creating partitions that need replicas
        await asyncio.sleep(min(interval, self.membership.session_timeout))
        while True:
            await self.auto_partitions.check_all()
            await asyncio.sleep(interval)

    async def _tiering_expiry_loop(self) -> None:
        """Fences tiering jobs that stopped heartbeating (Fluss checks every 15 s)."""
        while True:
            await asyncio.sleep(min(15.0, max(0.2, self.tiering.job_timeout / 4)))
            self.tiering.expire_silent_jobs()

    # ---- table lifecycle hooks

    async def _table_created(self, record: TableRecord) -> None:
        self.lake.on_table_created(record)
        await self.auto_partitions.check_table(record)

    async def _table_altered(self, old: TableDescriptor, record: TableRecord) -> None:
        self.lake.on_table_altered(old, record)
        await self.auto_partitions.check_table(record)
        # table.unclean.leader.election.enabled may have been set for a bucket waiting for a leader
        await self.controller.elect_waiting(record.table_id)

    async def _table_dropped(self, table_id: int) -> None:
        await self.lake.on_table_dropped(table_id)
        await self.kv_snapshots.drop_table(table_id)
        await self.remote_logs.drop_table(table_id)
        await self.auto_increment.drop_table(table_id)
        if self.orphan_files is not None:
            self.orphan_files.wake()  # its remote data has no metadata left: swept now

    async def _create_lake_table(self, info: TableInfo) -> None:
        """Lake-enabled tables get their lake table first, so tiering always has somewhere to write."""
        from strom.lake import lake_storage_from_config

        storage = lake_storage_from_config(dict(self.config))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: storage.catalog().create_table(info))
        log.info("created lake table for %s", info.table_path)
