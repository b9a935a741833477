"""The tablet server: hosts bucket replicas and serves reads and writes for the buckets it leads.

It registers with the coordinator and heartbeats it (Strom's embedded stand-in for ZooKeeper sessions),
or with `zookeeper.address` registers an ephemeral znode and follows the active coordinator there
(`zk_registration.py`). It takes leadership from NotifyLeaderAndIsr (fenced by coordinator epoch and
leader epoch), and answers Metadata and the read-only admin calls by asking the coordinator, which owns
the metadata.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import (
    AuthorizationError,
    FlussError,
    LakeSnapshotNotExistError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTableOrBucketError,
)
from strom.common.schema import Schema
from strom.common.supervision import TaskSet, spawn, supervise
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.metrics import Metrics, MetricsServer, start_reporter
from strom.metrics.disks import DiskMetrics
from strom.metrics.requests import RequestMetrics
from strom.metrics.supervision import register_supervision_metrics
from strom.metrics.tablet import TabletMetrics
from strom.rpc.api import ApiKey, ServerType, api_spec
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.limits import RpcLimits
from strom.rpc.server import Handler, RequestContext
from strom.security.layer import SecurityLayer, SecuritySettings
from strom.security.listeners import ListenerSettings, endpoint_map, endpoint_on, format_endpoints
from strom.server.dynamic_config import DYNAMIC, DynamicConfig
from strom.server.kafka import KAFKA_METRIC_NAMES, BrokerContext, kafka_listener_names, kafka_listeners
from strom.server.rpc_listeners import ListenerGroup
from strom.server.server_options import check_server_config, option_value, remote_data_dir
from strom.server.tablet.acl_sync import AclSync
from strom.server.tablet.clean_shutdown import CleanShutdown
from strom.server.tablet.coordinator_fence import CoordinatorEpochFence
from strom.server.tablet.data_dirs import DataDirs, OfflineDirError, configured_paths
from strom.server.tablet.historical_lookup import HistoricalLookup
from strom.server.tablet.kv.kv_manager import KvManager
from strom.server.tablet.kv.scanners import ScannerManager
from strom.server.tablet.kv.shared_rocksdb import RocksDbSettings, SharedRocksDb
from strom.server.tablet.kv.snapshot import CompletedSnapshot
from strom.server.tablet.kv_service import KvService
from strom.server.tablet.leader_epoch_service import LeaderEpochService
from strom.server.tablet.log.lake_hold import RetentionOutcome, lake_hold
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import LogTablet, TieredCopies
from strom.server.tablet.log_service import LogService
from strom.server.tablet.remote_log import RemoteLog, RemoteLogManager
from strom.server.tablet.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from strom.server.tablet.replica_manager import Replica, ReplicaManager
from strom.server.tablet.replica_status import describe_log_on_disk, describe_replicas
from strom.server.tablet.rescale_service import RescaleService
from strom.server.tablet.schema_history import load_schema_history

if TYPE_CHECKING:
    # kazoo is imported only when zookeeper.address is set
    from strom.server.tablet.zk_registration import ZooKeeperRegistration

log = logging.getLogger(__name__)

# Read-only calls a tablet server answers on behalf of the coordinator (Fluss's "gateway" APIs).
FORWARDED_TO_COORDINATOR = (
    ApiKey.LIST_DATABASES,
    ApiKey.DATABASE_EXISTS,
    ApiKey.GET_DATABASE_INFO,
    ApiKey.GET_TABLE_INFO,
    ApiKey.LIST_TABLES,
    ApiKey.TABLE_EXISTS,
    ApiKey.GET_TABLE_SCHEMA,
    ApiKey.LIST_PARTITION_INFOS,
    ApiKey.GET_LAKE_SNAPSHOT,
    ApiKey.GET_LATEST_KV_SNAPSHOTS,
    ApiKey.GET_KV_SNAPSHOT_METADATA,
    ApiKey.GET_CLUSTER_HEALTH,
)


# How long a graceful stop lets running requests finish: an acks=all write needs one follower fetch
# (log.replica.fetch.wait-max-time, 500 ms by default, returns early on new data) to be acknowledged.
STOP_GRACE_S = 2.0
# then, once leadership moved, until clients stopped coming (each refused one asks for new metadata)
STOP_QUIET_S = 0.3
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0

# Requests about the data of a bucket this server hosts. While it stops they are refused with
# NOT_LEADER_OR_FOLLOWER, which Fluss clients (pyfluss included) answer by refreshing their metadata and
# retrying, as after a leader change; the rest (metadata, admin calls passed on to the coordinator,
# writer ids) are still served, as they do not depend on this server's replicas.
_BUCKET_DATA_APIS = frozenset(
    {
        ApiKey.PRODUCE_LOG,
        ApiKey.FETCH_LOG,
        ApiKey.LIST_OFFSETS,
        ApiKey.PUT_KV,
        ApiKey.LOOKUP,
        ApiKey.PREFIX_LOOKUP,
        ApiKey.LIMIT_SCAN,
        ApiKey.GET_TABLE_STATS,
        ApiKey.RESCALE_BUCKET,
        ApiKey.SCAN_KV,
    }
)


# the requests a stop lets finish; the rest (long-polling fetches above all) are answered at the close
_FINISH_BEFORE_STOP = _BUCKET_DATA_APIS - {ApiKey.FETCH_LOG}


def _refuse_while_stopping(key: ApiKey, request: Any) -> FlussError | None:
    """The refusal of a stopping tablet server (RpcServer.drain)."""
    if key not in _BUCKET_DATA_APIS:
        return None
    if key == ApiKey.FETCH_LOG and request is not None and request.follower_server_id >= 0:
        return None  # a follower's fetch: it is what acknowledges the acks=all writes still running
    return NotLeaderOrFollowerError("the tablet server is shutting down; its buckets move to other replicas")


class TabletServer:
    def __init__(
        self,
        *,
        server_id: int,
        host: str,
        port: int,
        data_dir: Path,
        coordinator: tuple[str, int] | None,
        config: dict[str, str],
    ) -> None:
        self.server_id = server_id
        self.host = host
        # the active coordinator; with ZooKeeper it is looked up there (and may change)
        self.coordinator = coordinator
        self.config = Configuration(config)
        check_server_config(self.config)
        # data.dirs (one directory per disk), or data_dir alone
        self.data_dirs = DataDirs(configured_paths(data_dir, self.config))
        self.data_dirs.set_ratios(
            option_value(self.config, options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO),
            option_value(self.config, options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO),
        )
        self.data_dir = self.data_dirs.first
        self.incarnation = secrets.randbits(62)  # tells the coordinator this process from an earlier one
        self.clean_shutdown = CleanShutdown(self.data_dir)
        self.live_servers: dict[int, tuple[str, int]] = {}
        listeners = ListenerSettings.from_config(self.config, host, port)
        security = SecuritySettings.from_config(self.config, listeners)
        self.security = SecurityLayer(security, resolve_table=self._table_path)
        # advertised listeners of the coordinator and the tablet servers, for Metadata answered here
        self._coordinator_listeners: str | None = None
        self._server_listeners: dict[int, str] = {}
        self.pool = ConnectionPool(sasl=security.internal_login, tls=security.internal_tls)
        self.replica_manager = ReplicaManager(server_id, self.data_dirs, self._log_config)
        self.metrics = Metrics("tabletserver")
        self.disk_metrics = DiskMetrics(self.metrics, self.data_dirs)
        self.metrics_server: MetricsServer | None = None
        self.tablet_metrics = TabletMetrics(
            self.metrics,
            server_id,
            lambda: list(self.replica_manager.replicas.values()),
            lambda: self.kv_manager.memory_usage(),
            self._table_path,
        )
        self.log_service = LogService(
            self.replica_manager,
            self.config.get(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER),
            self.config.get(options.LOG_FETCH_MAX_WAIT_TIME).total_seconds(),
            traffic=self.tablet_metrics,
        )
        self.log_service.refresh_table = self._refresh_table
        self.fetchers = ReplicaFetcherManager(
            server_id,
            self.pool,
            self.live_servers.get,
            FetcherSettings(
                max_bytes=int(self.config.get(options.LOG_REPLICA_FETCH_MAX_BYTES)),
                max_bytes_per_bucket=int(self.config.get(options.LOG_REPLICA_FETCH_MAX_BYTES_FOR_BUCKET)),
                max_wait_ms=int(
                    self.config.get(options.LOG_REPLICA_FETCH_WAIT_MAX_TIME).total_seconds() * 1000
                ),
                backoff=self.config.get(options.LOG_REPLICA_FETCH_BACKOFF_INTERVAL).total_seconds(),
                min_bytes=int(option_value(self.config, options.LOG_REPLICA_FETCH_MIN_BYTES)),
            ),
            on_replicated=self.tablet_metrics.replicated,
            on_unknown_schema=self.log_service.learn_schema_soon,
            on_storage_error=self.replica_manager.storage_failed,
        )
        self.kv_manager = KvManager(
            server_id,
            remote_data_dir=remote_data_dir(self.config),
            snapshot_num_retained=self.config.get(options.KV_SNAPSHOT_NUM_RETAINED),
            rocksdb=SharedRocksDb(RocksDbSettings.from_config(self.config)),
            open_concurrency=self.config.get(options.KV_OPEN_CONCURRENCY),
            recover_read_bytes=int(option_value(self.config, options.KV_RECOVER_LOG_RECORD_BATCH_MAX_SIZE)),
            commit_snapshot=self._commit_kv_snapshot,
            on_snapshot=lambda replica, done, seconds: self.tablet_metrics.kv_snapshot(
                replica.bucket, replica.database, replica.table, done.size, seconds
            ),
        )
        self.kv_service = KvService(
            self.replica_manager,
            self.kv_manager,
            self.log_service,
            self.config.get(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER),
            allocate_ids=self._allocate_auto_increment_ids,
            historical=HistoricalLookup(dict(self.config)),
            scanners=ScannerManager(self.config),
        )
        self.rescale_service = RescaleService(self.replica_manager, self.kv_service)
        self.dynamic_config = DynamicConfig(self.config)
        self.dynamic_config.on_change(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER, self._set_min_isr)
        self.dynamic_config.on_change(options.KV_SNAPSHOT_INTERVAL, self._set_snapshot_interval)
        self.dynamic_config.on_change(options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO, self._set_disk_ratios)
        self.dynamic_config.on_change(options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO, self._set_disk_ratios)
        remote_root = remote_data_dir(self.config)
        self.remote_logs = (
            RemoteLogManager(
                self.replica_manager,
                remote_root,
                self._commit_remote_log_manifest,
                max_upload_segments=option_value(self.config, options.REMOTE_LOG_TASK_MAX_UPLOAD_SEGMENTS),
                on_retention=self._on_retention,
            )
            if remote_root
            else None
        )
        self.replica_manager.on_leader = self._on_leader
        self.replica_manager.on_follower = self._on_follower
        self.replica_manager.on_stopped = self._on_stopped
        self.replica_manager.on_dir_failed = self._data_dir_failed
        self._table_infos: dict[int, TableInfo] = {}
        self._schema_histories: dict[int, dict[int, Schema]] = {}
        self._learning: dict[int, asyncio.Future[TableInfo]] = {}  # tables asked for, by id
        self._refreshed: dict[int, float] = {}  # table id -> when `_refresh_table` last asked
        self.session_id: int | None = None
        self.fence = CoordinatorEpochFence(self._cluster_coordinator_epoch)
        self.zookeeper: ZooKeeperRegistration | None = None  # with zookeeper.address, from start()
        self._tasks = TaskSet("tablet server")
        self._stop_counting_supervision: Callable[[], None] = lambda: None
        self._registered = asyncio.Event()
        self.leader_epochs = LeaderEpochService(self.replica_manager)
        handlers: dict[ApiKey, Handler] = {key: self._forward for key in FORWARDED_TO_COORDINATOR}
        handlers.update(
            {
                ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: self._get_security_token,
                # requests only the active coordinator may send: refused from a replaced one
                ApiKey.NOTIFY_LEADER_AND_ISR: self.fence.guard(self._notify_leader_and_isr),
                ApiKey.STOP_REPLICA: self.fence.guard(self._stop_replica),
                ApiKey.UPDATE_METADATA: self.fence.guard(self._update_metadata),
                ApiKey.NOTIFY_LAKE_TABLE_OFFSET: self.fence.guard(self._notify_lake_table_offset),
                ApiKey.OFFSET_FOR_LEADER_EPOCH: self.leader_epochs.offset_for_leader_epoch,
                ApiKey.INIT_WRITER: self.log_service.init_writer,
                ApiKey.PRODUCE_LOG: self.log_service.produce_log,
                ApiKey.FETCH_LOG: self.log_service.fetch_log,
                ApiKey.LIST_OFFSETS: self.log_service.list_offsets,
                ApiKey.LIMIT_SCAN: self.kv_service.limit_scan,
                ApiKey.GET_TABLE_STATS: self.kv_service.get_table_stats,
                ApiKey.SCAN_KV: self.kv_service.scan_kv,
                ApiKey.PUT_KV: self.kv_service.put_kv,
                ApiKey.LOOKUP: self.kv_service.lookup,
                ApiKey.PREFIX_LOOKUP: self.kv_service.prefix_lookup,
                ApiKey.GET_METADATA: self._metadata,
                ApiKey.LIST_ACLS: self._list_acls,
                ApiKey.DESCRIBE_REPLICAS: self._describe_replicas,
                ApiKey.RESCALE_BUCKET: self.rescale_service.rescale_bucket,
            }
        )
        limits = RpcLimits.from_config(self.config)
        observer = RequestMetrics(self.metrics, KAFKA_METRIC_NAMES)
        self.kafka_listener_names = kafka_listener_names(self.config, listeners)
        self.rpc = ListenerGroup(
            name=f"tablet server {server_id}",
            listeners=listeners,
            handlers=handlers,
            server_type=ServerType.TABLET_SERVER,
            limits=limits,
            security=self.security,
            observer=observer,
            # the one place the Kafka protocol joins the tablet server
            others=kafka_listeners(
                f"tablet server {server_id}",
                listeners,
                self.kafka_listener_names,
                BrokerContext(
                    server_id=server_id,
                    database=self.config.get(options.KAFKA_DATABASE),
                    replicas=self.replica_manager,
                    log_service=self.log_service,
                    coordinator=self._pass_on,
                    brokers=self._kafka_brokers,
                ),
                limits,
                observer,
                self.security,
            ),
        )
        self.acl_sync = (
            AclSync(
                self.security.authorizer,
                self._coordinator_request,
                self.config.get(options.AUTHORIZER_ACL_REFRESH_INTERVAL).total_seconds(),
            )
            if self.security.authorizer is not None
            else None
        )

    @property
    def port(self) -> int:
        return self.rpc.port

    @property
    def coordinator_epoch(self) -> int:
        return self.fence.epoch

    async def start(self) -> None:
        await asyncio.to_thread(self.data_dirs.make)
        # the first sample before any write: a server starting on a full disk refuses writes at once
        await self._sample_disks()
        # before anything is written: from here on a crash must look unclean
        await asyncio.get_running_loop().run_in_executor(None, self.clean_shutdown.begin)
        # replicas deleted before a crash, still in the trash
        self._tasks.spawn(asyncio.to_thread(self.replica_manager.purge_trash), name="purge-trash")
        await self.rpc.start()
        self._stop_counting_supervision = register_supervision_metrics(self.metrics)
        self.metrics_server = start_reporter(self.metrics, self.config, self.host)
        if self.metrics_server is not None:
            supervise(self.metrics.refresh_state, name="metrics", tasks=self._tasks)
        if self.config.get_optional(options.ZOOKEEPER_ADDRESS) is not None:
            from strom.server.tablet.zk_registration import ZooKeeperRegistration

            self.zookeeper = ZooKeeperRegistration(self)
            await self.zookeeper.start()
        else:
            supervise(self._membership_loop, name="membership", tasks=self._tasks)
        supervise(self._maintenance_loop, name="log-maintenance", tasks=self._tasks)
        supervise(self._isr_loop, name="isr-maintenance", tasks=self._tasks)
        if self.acl_sync is not None:
            supervise(self.acl_sync.run, name="acl-sync", tasks=self._tasks)
        if self.remote_logs is not None:
            interval = self.config.get(options.REMOTE_LOG_TASK_INTERVAL_DURATION).total_seconds()
            remote_logs = self.remote_logs
            supervise(lambda: remote_logs.run(interval), name="remote-log", tasks=self._tasks)
        self.kv_manager.snapshot_interval = self.config.get(options.KV_SNAPSHOT_INTERVAL).total_seconds()
        supervise(self.kv_manager.run_snapshots, name="kv-snapshots", tasks=self._tasks)
        if self.kv_service.scanners is not None:
            supervise(self.kv_service.scanners.run_expiry, name="kv-scanner-expiry", tasks=self._tasks)
        supervise(self._dynamic_config_loop, name="dynamic-config", tasks=self._tasks)
        supervise(self._disk_usage_loop, name="disk-usage", tasks=self._tasks)
        idle_flush = self.config.get(options.KV_ROCKSDB_IDLE_FLUSH_INTERVAL).total_seconds()
        if idle_flush > 0:
            supervise(
                lambda: self.kv_manager.run_idle_flush(idle_flush), name="kv-idle-flush", tasks=self._tasks
            )

    async def stop(self) -> None:
        """A controlled stop (SIGTERM), as Fluss's: clients are turned away with a retriable error while
        the requests already running finish (an acks=all write still reaches its followers, whose
        fetches are served); the coordinator moves this server's leadership; the listeners stay open
        until the refused clients have asked for the new leaders; then everything closes, what still
        runs answered with an error. A client is never left with a request that no one answers."""
        began = time.monotonic()
        unfinished = await self.rpc.drain(_refuse_while_stopping, STOP_GRACE_S, _FINISH_BEFORE_STOP)
        drained = time.monotonic()
        if unfinished:
            log.warning(
                "stopping: %d request(s) still running after %.0f s are answered with an error",
                unfinished,
                STOP_GRACE_S,
            )
        # the heartbeats end first: a session the coordinator closed must not be renewed
        await self._tasks.close()
        await self._controlled_shutdown()
        self._stop_counting_supervision()
        if self.zookeeper is not None:
            await self.zookeeper.stop()
        moved = time.monotonic()
        await self.rpc.quiet(STOP_QUIET_S, STOP_GRACE_S)
        quiet = time.monotonic()
        await self.fetchers.close()
        await self.rpc.close()
        await self.pool.close()
        await self.kv_manager.aclose()
        # Closing fsyncs every log and checkpoint (seconds for many replicas): blocking disk work, so in
        # the executor like all other. Nothing else touches the replicas now: requests, fetchers and
        # background tasks have all ended.
        await asyncio.get_running_loop().run_in_executor(None, self._close_replicas)
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.data_dirs.release()
        log.info(
            "stopped in %.2f s: requests drained in %.2f s, leadership moved in %.2f s, clients gone "
            "in %.2f s, closed in %.2f s",
            time.monotonic() - began,
            drained - began,
            moved - drained,
            quiet - moved,
            time.monotonic() - quiet,
        )

    def _close_replicas(self) -> None:
        self.replica_manager.close()
        # only now is everything on disk: the next start may trust its replicas
        self.clean_shutdown.record()

    # ---- membership

    async def _controlled_shutdown(self) -> None:
        """Asks the coordinator to move this server's leadership before it stops (ControlledShutdown).
        Without an answer the stop goes on: the coordinator then learns it from the closed port (or
        ZooKeeper), as for a crash."""
        if self.coordinator is None:
            return
        request = pb.ControlledShutdownRequest(tablet_server_id=self.server_id, tablet_server_epoch=-1)
        try:
            response = await self._coordinator_request(
                ApiKey.CONTROLLED_SHUTDOWN, request, timeout=CONTROLLED_SHUTDOWN_TIMEOUT_S
            )
        except Exception as e:  # the stop must go on whatever the coordinator did
            log.warning("controlled shutdown: the coordinator did not move our leadership: %s", e)
            return
        remaining = len(response.remaining_leader_buckets)
        log.info(
            "controlled shutdown: the coordinator moved our leadership%s",
            f"; {remaining} bucket(s) have no other replica to lead them" if remaining else "",
        )

    def _active_coordinator(self) -> tuple[str, int]:
        """The active coordinator's address; with ZooKeeper there may be none for a while."""
        if self.coordinator is None:
            raise LeaderNotAvailableError("no coordinator is active at the moment; retry shortly")
        return self.coordinator

    async def _coordinator_request(self, key: ApiKey, message: Message, timeout: float | None = None) -> Any:
        return await self.pool.request(*self._active_coordinator(), key, message, timeout=timeout)

    async def _cluster_coordinator_epoch(self) -> int:
        """The cluster's coordinator epoch, from its source of truth (for the coordinator fence)."""
        if self.zookeeper is not None:
            return await self.zookeeper.coordinator_epoch()
        response = await self._coordinator_request(
            ApiKey.TABLET_SERVER_HEARTBEAT,
            internal.TabletServerHeartbeatRequest(server_id=self.server_id, session_id=self.session_id or 0),
            timeout=5,
        )
        return response.coordinator_epoch if response.HasField("coordinator_epoch") else -1

    async def _membership_loop(self) -> None:
        interval = self.config.get(options.TABLET_SERVER_HEARTBEAT_INTERVAL).total_seconds()
        while True:
            try:
                if self.session_id is None:
                    response = await self._coordinator_request(
                        ApiKey.REGISTER_TABLET_SERVER,
                        self._registration(),
                        timeout=10,
                    )
                    self.session_id = response.session_id
                    self.fence.observe(response.coordinator_epoch)
                    self._registered.set()
                    log.info(
                        "registered with the coordinator (session %d, epoch %d)",
                        self.session_id,
                        response.coordinator_epoch,
                    )
                else:
                    response = await self._coordinator_request(
                        ApiKey.TABLET_SERVER_HEARTBEAT,
                        internal.TabletServerHeartbeatRequest(
                            server_id=self.server_id, session_id=self.session_id
                        ),
                        timeout=10,
                    )
                    if response.HasField("coordinator_epoch"):
                        self.fence.observe(response.coordinator_epoch)
                    if not response.session_valid:
                        log.warning("coordinator expired our session; registering again")
                        self.session_id = None
                        continue
            except FlussError as e:
                log.warning("coordinator unreachable: %s", e)
                self.session_id = None
            await asyncio.sleep(interval)

    # ---- log maintenance

    async def _maintenance_loop(self) -> None:
        """Periodic log chores: high-watermark checkpoints, TTL retention, idle writer expiry."""
        periods = {
            "checkpoint": self.config.get(
                options.LOG_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL
            ).total_seconds(),
            "retention": self.config.get(options.LOG_RETENTION_CHECK_INTERVAL).total_seconds(),
            "writers": self.config.get(options.SERVER_WRITER_ID_EXPIRATION_CHECK_INTERVAL).total_seconds(),
        }
        last = dict.fromkeys(periods, time.monotonic())
        while True:
            await asyncio.sleep(min(1.0, *periods.values()))
            now = time.monotonic()
            due = {chore for chore, period in periods.items() if now - last[chore] >= period}
            for chore in due:
                last[chore] = now
            if not due:
                continue
            now_ms = int(time.time() * 1000)
            if "checkpoint" in due:
                await self._checkpoint_high_watermarks()
            for replica in list(self.replica_manager.replicas.values()):
                tablet = replica.log
                if tablet is None:
                    continue
                try:
                    # A PK table's changelog is also what rebuilds its KV state after the last snapshot, so
                    # TTL retention applies to log tables only (Fluss keeps it from the snapshot offset).
                    if "retention" in due and not replica.table_info.has_primary_key:
                        # a lake-enabled table's segments also wait for the lake (lake_hold.py)
                        hold = lake_hold(replica.table_info.properties, replica.lake_log_end_offset)
                        outcome = tablet.retain(now_ms, hold, self._tiered_copies(replica))
                        if outcome.deleted:
                            log.info("retention deleted %d segment(s) of %s", outcome.deleted, replica.bucket)
                        self._on_retention(replica, "local", outcome)
                    if "writers" in due:
                        tablet.remove_expired_writers(now_ms)
                except Exception as e:
                    log.exception("log maintenance of %s failed", replica.bucket)
                    self.replica_manager.storage_failed(replica, e)

    async def _checkpoint_high_watermarks(self) -> None:
        """The periodic high-watermark checkpoints, of the logs whose high watermark moved since the
        last one, written in an executor: at 2,048 replicas the file replacements held the event loop
        for about half of a first write's 45 s."""
        moved: list[tuple[Replica, LogTablet]] = []
        for replica in list(self.replica_manager.replicas.values()):
            tablet = replica.log
            if tablet is None:
                continue
            try:
                tablet.poll_flushes()
            except Exception as e:
                log.exception("log maintenance of %s failed", replica.bucket)
                self.replica_manager.storage_failed(replica, e)
            if not tablet.high_watermark_checkpointed:
                moved.append((replica, tablet))
        if not moved:
            return
        failed = await asyncio.to_thread(_write_high_watermark_checkpoints, moved)
        for replica, error in failed:
            # the recovery after a crash does without it (the high watermark then starts lower), but a
            # broken disk takes its data directory offline
            log.warning("high-watermark checkpoint of %s failed: %s", replica.bucket, error)
            self.replica_manager.storage_failed(replica, error)

    def _tiered_copies(self, replica: Replica) -> TieredCopies | None:
        """For the leader of a log that is tiered: how far its remote copy reaches (nothing until
        its manifest is loaded) and `table.log.local-ttl`, which then rules local retention."""
        if self.remote_logs is None or not replica.is_leader(self.server_id):
            return None
        remote = replica.remote
        return TieredCopies(
            copied_end=0 if remote is None else remote.end_offset or 0,
            local_ttl_ms=int(replica.table_info.log_local_ttl.total_seconds() * 1000),
        )

    def _on_retention(self, replica: Replica, tier: str, outcome: RetentionOutcome) -> None:
        """Record what a retention pass held for the lake, and shout when the hold bound deleted
        records the lake does not have."""
        if tier == "local":
            replica.held_local = (outcome.held_segments, outcome.held_bytes)
        else:
            replica.held_remote = (outcome.held_segments, outcome.held_bytes)
        if outcome.forced:
            log.error(
                "LAKE RETENTION HOLD EXPIRED: deleted %d %s log segment(s) of %s.%s %s up to offset %d "
                "that the lake does not have (lake offset %d): table.datalake.retention-hold.max-duration "
                "passed; those records are lost",
                outcome.forced,
                tier,
                replica.database,
                replica.table,
                replica.bucket,
                outcome.forced_end_offset,
                replica.lake_log_end_offset,
            )
            self.tablet_metrics.retention_hold_expired(replica.database, replica.table, tier, outcome.forced)

    # ---- role changes

    def _learn_lake_offset(self, replica: Replica) -> None:
        """A replica new here (or after a restart) does not know how far the lake reaches until the
        next tiering commit notifies it; until then its retention holds everything past the TTL. Ask
        the coordinator for the table's latest lake snapshot so retention resumes at once."""
        if replica.lake_log_end_offset >= 0 or not replica.table_info.datalake_enabled:
            return

        async def learn() -> None:
            path = replica.table_info.table_path
            request = pb.GetLakeSnapshotRequest(
                table_path=pb.PbTablePath(database_name=path.database_name, table_name=path.table_name)
            )
            try:
                response = await self._coordinator_request(ApiKey.GET_LAKE_SNAPSHOT, request, timeout=10)
            except LakeSnapshotNotExistError:
                return  # nothing tiered yet: everything waits
            for entry in response.bucket_snapshots:
                partition = entry.partition_id if entry.HasField("partition_id") else None
                if (
                    entry.bucket_id == replica.bucket.bucket
                    and partition == replica.bucket.partition_id
                    and entry.HasField("log_offset")
                ):
                    replica.lake_log_end_offset = max(replica.lake_log_end_offset, entry.log_offset)

        def done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                # safe side: retention stays held until the next tiering commit notifies this replica
                log.warning(
                    "cannot learn the lake offset of %s (retention waits for the next lake commit): %s",
                    replica.bucket,
                    task.exception(),
                )

        asyncio.get_running_loop().create_task(learn()).add_done_callback(done)

    def _on_leader(self, replica: Replica) -> None:
        self.fetchers.unfollow(replica.bucket)
        self._learn_lake_offset(replica)
        if self.remote_logs is not None and not replica.table_info.has_primary_key:
            # readers below the local log start are sent to the remote segments, so know them now
            self._tasks.spawn(
                asyncio.to_thread(self.remote_logs.remote_log, replica), name="remote-log-index"
            )
        if replica.table_info.has_primary_key:
            # the high watermark shows a change only once RocksDB has it, so lookups agree with the log
            replica.hw_clamp = lambda candidate, r=replica: self.kv_manager.flush_to_high_watermark(
                r, candidate
            )
            # open RocksDB now, in the background, so the first write does not wait for it
            self.kv_manager.open_soon(replica)

    def _on_follower(self, replica: Replica) -> None:
        replica.held_remote = (0, 0)  # the remote log is the leader's to keep
        self._learn_lake_offset(replica)
        self.kv_manager.drop(replica.bucket)
        replica.hw_clamp = None
        self.fetchers.follow(replica)

    def _on_stopped(self, replica: Replica) -> None:
        self.kv_manager.drop(replica.bucket)
        self.fetchers.unfollow(replica.bucket)
        table_id = replica.bucket.table_id
        if not any(b.table_id == table_id for b in self.replica_manager.replicas):
            # UpdateMetadata no longer reaches this server for the table (a server back from a freeze
            # is told only the tables it hosts): a replica given to it again learns the table anew
            self._table_infos.pop(table_id, None)
            self._schema_histories.pop(table_id, None)

    async def _commit_remote_log_manifest(self, replica: Replica, remote: RemoteLog, manifest: str) -> None:
        request = pb.CommitRemoteLogManifestRequest(
            table_id=replica.bucket.table_id,
            bucket_id=replica.bucket.bucket,
            remote_log_manifest_path=manifest,
            remote_log_start_offset=remote.start_offset or 0,
            remote_log_end_offset=remote.end_offset or 0,
            coordinator_epoch=self.coordinator_epoch,
            bucket_leader_epoch=replica.leader_epoch,
        )
        if replica.bucket.partition_id is not None:
            request.partition_id = replica.bucket.partition_id
        await self._coordinator_request(ApiKey.COMMIT_REMOTE_LOG_MANIFEST, request)

    async def _allocate_auto_increment_ids(self, table_id: int, column_id: int, count: int) -> int:
        request = internal.AllocateAutoIncrementIdsRequest(
            table_id=table_id, column_id=column_id, count=count
        )
        response = await self._coordinator_request(ApiKey.ALLOCATE_AUTO_INCREMENT_IDS, request, timeout=10)
        return int(response.start)

    async def _commit_kv_snapshot(self, snapshot: CompletedSnapshot, leader_epoch: int) -> frozenset[int]:
        """Commit a snapshot to the coordinator; returns the snapshot ids of the bucket the coordinator
        still lists (the retained ones and those a reader leased), which retention must keep."""
        await self._coordinator_request(
            ApiKey.COMMIT_KV_SNAPSHOT,
            pb.CommitKvSnapshotRequest(
                completed_snapshot=snapshot.to_json_bytes(),
                coordinator_epoch=self.coordinator_epoch,
                bucket_leader_epoch=leader_epoch,
            ),
        )
        bucket = snapshot.bucket
        listing = pb.ListKvSnapshotsRequest(table_id=bucket.table_id)
        if bucket.partition_id is not None:
            listing.partition_id = bucket.partition_id
        listed = await self._coordinator_request(ApiKey.LIST_KV_SNAPSHOTS, listing)
        return frozenset(s.snapshot_id for s in listed.active_snapshots if s.bucket_id == bucket.bucket)

    # ---- in-sync replicas

    async def _isr_loop(self) -> None:
        """Leaders drop followers that lag more than log.replica.max-lag-time from the ISR and take
        caught-up ones back, through AdjustIsr to the coordinator."""
        max_lag = self.config.get(options.LOG_REPLICA_MAX_LAG_TIME).total_seconds()
        while True:
            await asyncio.sleep(max(0.1, min(1.0, max_lag / 4)))
            proposals: dict[TableBucket, tuple[int, ...]] = {}
            for bucket, replica in list(self.replica_manager.replicas.items()):
                if (
                    replica.is_leader(self.server_id)
                    and replica.log is not None
                    and len(replica.replicas) > 1
                ):
                    new_isr = replica.isr_change(max_lag)
                    if new_isr is not None:
                        proposals[bucket] = new_isr
            if proposals:
                try:
                    await self._adjust_isr(proposals)
                except FlussError as e:
                    log.warning("AdjustIsr failed: %s", e)

    async def _adjust_isr(self, proposals: dict[TableBucket, tuple[int, ...]]) -> None:
        request = pb.AdjustIsrRequest(serverId=self.server_id)
        by_table: dict[int, pb.PbAdjustIsrReqForTable] = {}
        for bucket, isr in proposals.items():
            proposer = self.replica_manager.replicas[bucket]
            table = by_table.get(bucket.table_id)
            if table is None:
                table = request.tables_req.add(table_id=bucket.table_id)
                by_table[bucket.table_id] = table
            entry = table.buckets_req.add(
                bucket_id=bucket.bucket,
                leader_epoch=proposer.leader_epoch,
                new_isr=isr,
                coordinator_epoch=self.coordinator_epoch,
                bucket_epoch=proposer.bucket_epoch,
            )
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        response = await self._coordinator_request(ApiKey.ADJUST_ISR, request)
        for table in response.tables_resp:
            for result in table.buckets_resp:
                partition = result.partition_id if result.HasField("partition_id") else None
                replica = self.replica_manager.replicas.get(
                    TableBucket(table.table_id, partition, result.bucket_id)
                )
                if replica is None:
                    continue
                if result.HasField("error_code") and result.error_code != 0:
                    log.info("ISR change of %s refused: %s", replica.bucket, result.error_message)
                    continue
                before = len(replica.isr)
                if not replica.apply_isr_change(tuple(result.isr), result.leader_epoch, result.bucket_epoch):
                    log.info(
                        "ISR change of %s to %s overtaken by newer state (bucket epoch %d)",
                        replica.bucket,
                        list(result.isr),
                        replica.bucket_epoch,
                    )
                    continue
                log.info("ISR of %s is now %s", replica.bucket, list(result.isr))
                self.tablet_metrics.isr_changed(before, len(result.isr))

    # ---- tables

    def _log_config(self, table: TableInfo) -> LogConfig:
        ttl_ms = int(table.log_ttl.total_seconds() * 1000)
        flush = self.config.get(options.LOG_FLUSH_INTERVAL_MESSAGES)
        return LogConfig(
            segment_bytes=int(self.config.get(options.LOG_SEGMENT_FILE_SIZE)),
            index_interval_bytes=int(self.config.get(options.LOG_INDEX_INTERVAL_SIZE)),
            index_max_bytes=int(self.config.get(options.LOG_INDEX_FILE_SIZE)),
            retention_ms=ttl_ms or None,
            flush_interval_messages=None if flush is None or flush >= 2**62 else flush,
            writer_expiration_ms=int(
                self.config.get(options.SERVER_WRITER_ID_EXPIRATION_TIME).total_seconds() * 1000
            ),
        )

    async def _table_info(self, table_id: int, path: TablePath) -> TableInfo:
        info = self._table_infos.get(table_id)
        if info is not None:
            return info
        # One fetch per table: replicas arriving together (partitions created at once) must share
        # one schema history, or those holding a discarded one miss the schemas added later.
        learning = self._learning.get(table_id)
        if learning is None:
            # the callers see its error; spawn only holds it and keeps a failure with no caller left seen
            learning = spawn(self._learn_table(table_id, path), name="learn-table", quiet=True)
            self._learning[table_id] = learning
            learning.add_done_callback(lambda _: self._learning.pop(table_id, None))
        info = await asyncio.shield(learning)
        return self._table_infos.get(table_id, info)  # an UpdateMetadata may have come meanwhile

    async def _learn_table(self, table_id: int, path: TablePath) -> TableInfo:
        """The table's info and every schema it has had, from the coordinator."""
        response = await self._coordinator_table_info(path)
        if response.table_id != table_id:
            raise FlussError(f"table {path} now has id {response.table_id}, not {table_id}")
        info = TableInfo(
            path,
            response.table_id,
            response.schema_id,
            TableDescriptor.from_json_bytes(response.table_json),
            response.created_time,
            response.modified_time,
        )
        self._schema_histories[table_id] = await load_schema_history(
            self._coordinator_request, path, info.schema_id, info.schema
        )
        self._table_infos[table_id] = info
        return info

    async def _coordinator_table_info(self, path: TablePath) -> pb.GetTableInfoResponse:
        request = pb.GetTableInfoRequest()
        request.table_path.database_name = path.database_name
        request.table_path.table_name = path.table_name
        response: pb.GetTableInfoResponse = await self._coordinator_request(ApiKey.GET_TABLE_INFO, request)
        return response

    async def _refresh_table(self, table_id: int) -> None:
        """Ask the coordinator for a hosted table's current info and take it as an UpdateMetadata
        would (for a fetch naming a column this server has not heard of). At most once a second per
        table: a client's bad projection must not turn every fetch into a coordinator request."""
        info = self._table_infos.get(table_id)
        now = time.monotonic()
        if info is None or now - self._refreshed.get(table_id, -1.0) < 1.0:
            return
        self._refreshed[table_id] = now
        response = await self._coordinator_table_info(info.table_path)
        if response.table_id != table_id:
            return  # dropped and created again: the replicas here are for the old table
        metadata = pb.PbTableMetadata(
            table_id=table_id,
            schema_id=response.schema_id,
            table_json=response.table_json,
            created_time=response.created_time,
            modified_time=response.modified_time,
        )
        await self._table_altered(metadata)

    async def _table_altered(self, metadata: pb.PbTableMetadata) -> None:
        """UpdateMetadata carries an altered table: its replicas take the new options and schema."""
        old = self._table_infos.get(metadata.table_id)
        learning = self._learning.get(metadata.table_id)
        if old is None and learning is not None:
            # being learnt: the answer may predate this change, which must not be lost
            try:
                old = await asyncio.shield(learning)
            except Exception:
                return  # the next replica of it learns it anew
        if old is None:
            return  # not hosted here; learnt in full when a replica of it arrives
        if (metadata.schema_id, metadata.modified_time) <= (old.schema_id, old.modified_time):
            return  # nothing new (a returning server is told all its tables again)
        info = TableInfo(
            old.table_path,
            metadata.table_id,
            metadata.schema_id,
            TableDescriptor.from_json_bytes(metadata.table_json),
            metadata.created_time,
            metadata.modified_time,
        )
        history = self._schema_histories.setdefault(metadata.table_id, {})
        missed = [i for i in range(1, info.schema_id) if i not in history]
        if missed:
            # this server slept through some AlterTables: batches of every schema id must stay readable
            older = await load_schema_history(
                self._coordinator_request, old.table_path, info.schema_id, info.schema, missed
            )
            history.update(older)
        if self._table_infos.get(metadata.table_id) is not old:
            return  # learnt anew while the schemas were asked for
        history[info.schema_id] = info.schema
        self._table_infos[metadata.table_id] = info
        for replica in list(self.replica_manager.replicas.values()):
            if replica.bucket.table_id == metadata.table_id:
                replica.table_altered(info)
                kv = self.kv_manager.tablet(replica.bucket)
                if kv is not None:
                    kv.table_altered(info)
                    kv.use_schemas(history)  # with the ids this server skipped over, if any

    # ---- handlers

    # ---- data disks: write protection when one fills

    def _data_dir_failed(self, root: Path, reason: str) -> None:
        """A data directory's disk broke: its replicas close here and the coordinator is told, so it
        moves their leadership and takes this server out of their ISRs; the others are served on."""
        gone = self.replica_manager.take_dir_offline(root, reason)
        if gone is None:
            return  # offline already
        log.error(
            "data directory %s failed (%s): its %d replica(s) are offline on this server until it restarts; "
            "the other data directories are served on",
            root,
            reason,
            len(gone),
        )
        self.disk_metrics.update()
        if gone:
            buckets = [r.bucket for r in gone]
            self._tasks.spawn(
                self._report_offline(buckets, f"data directory {root}: {reason}"), name="report-offline"
            )

    async def _report_offline(self, replicas: list[TableBucket], reason: str) -> None:
        """Until the coordinator has it (a failover or a lost connection is retried; each failure is
        logged)."""
        request = internal.ReportOfflineReplicasRequest(server_id=self.server_id, reason=reason)
        for bucket in replicas:
            entry = request.replicas.add(table_id=bucket.table_id, bucket_id=bucket.bucket)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        delay = 0.2
        while True:
            try:
                await self._coordinator_request(ApiKey.REPORT_OFFLINE_REPLICAS, request, timeout=10)
                log.info("the coordinator knows that %d replica(s) here are offline", len(replicas))
                return
            except Exception as e:  # whatever it is, the coordinator must learn it: retried
                log.warning("reporting offline replicas to the coordinator failed (retrying): %s", e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _sample_disks(self) -> None:
        lock_changes, failures = await asyncio.to_thread(self.data_dirs.sample)
        for d, reason in failures:
            self._data_dir_failed(d.path, reason)
        for d, locked in lock_changes:
            if locked:
                log.warning(
                    "data directory %s: disk usage %.2f%% reached the write limit %.2f%%; refusing writes "
                    "to its %d replica(s) until usage is at or below %.2f%%",
                    d.path,
                    d.usage_ratio * 100,
                    self.data_dirs.write_limit_ratio * 100,
                    d.replicas,
                    self.data_dirs.write_recover_ratio * 100,
                )
            else:
                log.info(
                    "data directory %s: disk usage %.2f%% is at or below %.2f%%; writes resume",
                    d.path,
                    d.usage_ratio * 100,
                    self.data_dirs.write_recover_ratio * 100,
                )
        self.disk_metrics.update()

    async def _disk_usage_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.get(options.SERVER_DATA_DISK_CHECK_INTERVAL).total_seconds())
            await self._sample_disks()

    def _set_disk_ratios(self, _value: Any) -> None:
        effective = self.dynamic_config.effective
        self.data_dirs.set_ratios(
            option_value(effective, options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO),
            option_value(effective, options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO),
        )

    # ---- dynamic cluster configs (AlterClusterConfigs on the coordinator)

    def _set_min_isr(self, value: int) -> None:
        self.log_service.min_in_sync_replicas = value or 1
        self.kv_service.min_in_sync_replicas = value or 1

    def _set_snapshot_interval(self, value: Any) -> None:
        self.kv_manager.snapshot_interval = value.total_seconds()

    async def _dynamic_config_loop(self) -> None:
        """Read the cluster's dynamic configs from the coordinator and apply what changed. A failed
        read is logged and retried on the next round; the values stay as they were meanwhile."""
        interval = self.config.get(options.SERVER_DYNAMIC_CONFIG_REFRESH_INTERVAL).total_seconds()
        failing = False
        while True:
            try:
                response = await self._pass_on(
                    ApiKey.DESCRIBE_CLUSTER_CONFIGS, pb.DescribeClusterConfigsRequest()
                )
            except (FlussError, OSError) as e:
                if not failing:  # once per outage, not every round
                    log.info(
                        "could not read the dynamic cluster configs (retrying every %.1f s): %s", interval, e
                    )
                failing = True
            else:
                if failing:
                    log.info("read the dynamic cluster configs again")
                failing = False
                self.dynamic_config.update(
                    {c.config_key: c.config_value for c in response.configs if c.config_source == DYNAMIC}
                )
            await asyncio.sleep(interval)

    async def _forward(self, request: Message, ctx: RequestContext) -> Message:
        return await self._pass_on(_KEY_BY_REQUEST_TYPE[type(request)], request)

    async def _pass_on(self, key: ApiKey, request: Message) -> Any:
        """Send a client's request to the coordinator as it came, even with required fields missing:
        the coordinator answers those with the right error code."""
        connection = await self.pool.get(*self._active_coordinator())
        body = await connection.request_raw(key, request.SerializePartialToString())
        response = api_spec(key).response_type()
        response.ParseFromString(body)
        return response

    async def _metadata(self, request: pb.MetadataRequest, ctx: RequestContext) -> Message:
        """Metadata from the coordinator, with the addresses of the listener this client came through."""
        response = await self._pass_on(ApiKey.GET_METADATA, request)
        listener = ctx.session.listener
        coordinator = response.coordinator_server
        address = endpoint_on(listener, self._coordinator_listeners, (coordinator.host, coordinator.port))
        if address is not None:
            coordinator.host, coordinator.port = address
        kept = []
        for node in response.tablet_servers:
            address = endpoint_on(listener, self._server_listeners.get(node.node_id), (node.host, node.port))
            if address is not None:
                kept.append(pb.PbServerNode(node_id=node.node_id, host=address[0], port=address[1]))
        del response.tablet_servers[:]
        response.tablet_servers.extend(kept)
        return response

    async def _describe_replicas(self, request: Message, ctx: RequestContext) -> Message:
        assert isinstance(request, internal.DescribeReplicasRequest)
        if request.on_disk and not self.security.is_trusted(ctx.session.listener, ctx.session.principal):
            # opening (recovering) logs no replica holds is for the coordinator's elections only
            raise AuthorizationError(
                "DescribeReplicas with on_disk is served only on the internal listener or to an internal "
                f"principal, not to {ctx.session.principal}"
            )
        response = describe_replicas(
            self.server_id, list(self.replica_manager.replicas.values()), self.data_dirs.dirs
        )
        for entry in request.on_disk:
            partition = entry.partition_id if entry.HasField("partition_id") else None
            bucket = TableBucket(entry.table_id, partition, entry.bucket_id)
            if bucket in self.replica_manager.replicas:
                continue  # reported above
            tablet = await self.replica_manager.log_on_disk(bucket)
            if tablet is not None:
                describe_log_on_disk(response, bucket, tablet)
        return response

    async def _list_acls(self, request: pb.ListAclsRequest, ctx: RequestContext) -> Message:
        return self.security.list_acls(request, ctx.session)

    def _registration(self) -> internal.RegisterTabletServerRequest:
        node = self.rpc.describe(self.server_id)
        return internal.RegisterTabletServerRequest(
            server_id=self.server_id,
            host=node.host,
            port=node.port,
            incarnation=self.incarnation,
            listeners=node.listeners,
            rack=self.config.get_optional(options.TABLET_SERVER_RACK),
            unclean_shutdown=self.clean_shutdown.unclean,
        )

    def _kafka_brokers(self) -> dict[int, tuple[str, int]]:
        """Every live tablet server's Kafka address (by the first Kafka listener it advertises)."""
        found: dict[int, tuple[str, int]] = {}
        listeners = dict(self._server_listeners)
        listeners[self.server_id] = format_endpoints(self.rpc.listeners.advertised)
        for node_id, text in listeners.items():
            if node_id != self.server_id and node_id not in self.live_servers:
                continue
            endpoints = endpoint_map(text)
            for name in self.kafka_listener_names:
                if name in endpoints:
                    found[node_id] = endpoints[name]
                    break
        return found

    def _table_path(self, table_id: int) -> TablePath | None:
        info = self._table_infos.get(table_id)
        return None if info is None else info.table_path

    async def _get_security_token(self, request: Message, ctx: RequestContext) -> Message:
        # Local-directory remote storage needs no credentials. An empty token tells the client so, and
        # it asks again only after days (an error would make it retry every 30 s).
        return pb.GetFileSystemSecurityTokenResponse(schema="file", token=b"")

    async def _update_metadata(self, request: pb.UpdateMetadataRequest, ctx: RequestContext) -> Message:
        self.live_servers.clear()
        self.live_servers.update({s.node_id: (s.host, s.port) for s in request.tablet_servers})
        self._server_listeners = {s.node_id: s.listeners for s in request.tablet_servers if s.listeners}
        if request.HasField("coordinator_server") and request.coordinator_server.listeners:
            self._coordinator_listeners = request.coordinator_server.listeners
        if self.zookeeper is not None and request.HasField("coordinator_server"):
            self.coordinator = (request.coordinator_server.host, request.coordinator_server.port)
        for table in request.table_metadata:
            await self._table_altered(table)
        return pb.UpdateMetadataResponse()

    async def _notify_leader_and_isr(
        self, request: pb.NotifyLeaderAndIsrRequest, ctx: RequestContext
    ) -> Message:
        response = pb.NotifyLeaderAndIsrResponse()
        # every bucket at once: new replicas open their files in batches (replica_opener.py)
        await asyncio.gather(
            *(
                self._take_leadership(entry, response.notify_buckets_leader_resp.add())
                for entry in request.notify_buckets_leader_req
            )
        )
        return response

    async def _take_leadership(self, entry: Any, result: Any) -> None:
        """One bucket of a NotifyLeaderAndIsr; its outcome goes into `result`."""
        bucket = TableBucket.from_pb(entry.table_bucket)
        result.table_bucket.CopyFrom(entry.table_bucket)
        try:
            path = entry.physical_table_path
            table_info = await self._table_info(
                bucket.table_id, TablePath(path.database_name, path.table_name)
            )
            known = table_info.table_path
            if (path.database_name, path.table_name) != (known.database_name, known.table_name):
                raise UnknownTableOrBucketError(
                    f"table id {bucket.table_id} is '{known}', not '{path.database_name}.{path.table_name}'"
                )
            if not 0 <= bucket.bucket < table_info.bucket_count:
                raise UnknownTableOrBucketError(
                    f"table '{known}' has {table_info.bucket_count} buckets, not a bucket {bucket.bucket}"
                )
            replica = await self.replica_manager.take_leadership(
                bucket,
                database=known.database_name,
                table=known.table_name,
                partition_name=path.partition_name if path.HasField("partition_name") else None,
                table_info=table_info,
                leader=entry.leader,
                leader_epoch=entry.leader_epoch,
                replicas=tuple(entry.replicas),
                isr=tuple(entry.isr),
                bucket_epoch=entry.bucket_epoch,
            )
            replica.schema_history = self._schema_histories.setdefault(bucket.table_id, {})
        except FlussError as e:
            result.error_code = e.code
            result.error_message = e.message
            if isinstance(e, OfflineDirError):  # the coordinator must not count on this replica
                self._tasks.spawn(self._report_offline([bucket], e.message), name="report-offline")

    async def _notify_lake_table_offset(
        self, request: pb.NotifyLakeTableOffsetRequest, ctx: RequestContext
    ) -> Message:
        for entry in request.notify_buckets_req:
            partition = entry.partition_id if entry.HasField("partition_id") else None
            replica = self.replica_manager.replicas.get(
                TableBucket(entry.table_id, partition, entry.bucket_id)
            )
            if replica is not None and entry.HasField("log_end_offset"):
                replica.lake_log_end_offset = max(replica.lake_log_end_offset, entry.log_end_offset)
        return pb.NotifyLakeTableOffsetResponse()

    async def _purge_after_kv_closes(self) -> None:
        # the kv tablets of the stopped replicas are still closing in the background
        await self.kv_manager.wait_closed()
        await asyncio.to_thread(self.replica_manager.purge_trash)

    async def _stop_replica(self, request: pb.StopReplicaRequest, ctx: RequestContext) -> Message:
        response = pb.StopReplicaResponse()
        deleted = False
        for entry in request.stop_replicas_req:
            bucket = TableBucket.from_pb(entry.table_bucket)
            result = response.stop_replicas_resp.add()
            result.table_bucket.CopyFrom(entry.table_bucket)
            try:
                replica = self.replica_manager.stop_replica(
                    bucket, delete=entry.delete, leader_epoch=entry.leader_epoch
                )
            except FlussError as e:
                result.error_code = e.code
                result.error_message = e.message
                continue
            deleted = deleted or (replica is not None and entry.delete)
            if replica is not None and entry.delete and replica.table_info.has_primary_key:
                self._tasks.spawn(
                    asyncio.to_thread(self.kv_manager.delete_snapshots, replica), name="delete-kv-snapshots"
                )
        if deleted:  # the files of a dropped table's replicas go off the event loop (many, for a big log)
            self._tasks.spawn(self._purge_after_kv_closes(), name="purge-trash")
        return response


_KEY_BY_REQUEST_TYPE: dict[type, ApiKey] = {}


def _write_high_watermark_checkpoints(
    logs: list[tuple[Replica, LogTablet]],
) -> list[tuple[Replica, OSError]]:
    """In an executor: each log's checkpoint; returns the failures."""
    failed = []
    for replica, tablet in logs:
        try:
            tablet.write_high_watermark_checkpoint()
        except OSError as e:
            failed.append((replica, e))
    return failed


def _index_request_types() -> None:
    from strom.rpc.api import api_spec

    for key in FORWARDED_TO_COORDINATOR:
        _KEY_BY_REQUEST_TYPE[api_spec(key).request_type] = key


_index_request_types()
