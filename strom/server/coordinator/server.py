"""The coordinator server: owns the metadata, tracks tablet servers and decides bucket leadership."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.limits import RpcLimits
from strom.rpc.server import Handler, RequestContext
from strom.security.layer import SecurityLayer, SecuritySettings
from strom.security.listeners import ListenerSettings
from strom.server.coordinator.acl_service import AclService
from strom.server.coordinator.auto_partition import AutoPartitionManager
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.kv_snapshot_service import KvSnapshotService
from strom.server.coordinator.lake_service import LakeService
from strom.server.coordinator.lake_tiering import LakeTieringManager
from strom.server.coordinator.membership import Membership
from strom.server.coordinator.metadata_service import MetadataService
from strom.server.coordinator.registration import check_registration
from strom.server.coordinator.remote_log_service import RemoteLogService
from strom.server.rpc_listeners import ListenerGroup
from strom.server.store.base import TableRecord
from strom.server.store.sqlite import SqliteMetadataStore

log = logging.getLogger(__name__)

COORDINATOR_ID = 0


class CoordinatorServer:
    def __init__(self, *, host: str, port: int, data_dir: Path, config: dict[str, str]) -> None:
        self.host = host
        self.data_dir = data_dir
        self.config = Configuration(config)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.store = SqliteMetadataStore(data_dir / "metadata.db")
        self.coordinator_epoch = self.store.bump_coordinator_epoch()
        session_timeout = self.config.get(options.TABLET_SERVER_SESSION_TIMEOUT).total_seconds()
        self.membership = Membership(session_timeout)
        listeners = ListenerSettings.from_config(self.config, host, port)
        security = SecuritySettings.from_config(self.config, listeners)
        self.security = SecurityLayer(security, resolve_table=self._table_path)
        self.pool = ConnectionPool(sasl=security.internal_login)
        self._requested_port = port
        self.node = pb.PbServerNode(node_id=COORDINATOR_ID, host=host, port=port)
        self.controller = Controller(
            self.store, self.membership, self.pool, self.coordinator_epoch, self.node
        )
        self.metadata = MetadataService(self.store, self.config, self.membership, self.controller, self.node)
        self.metadata.ensure_default_database()
        self.auto_partitions = AutoPartitionManager(self.metadata)
        self.tiering = LakeTieringManager(self.config.get(options.LAKE_TIERING_JOB_TIMEOUT).total_seconds())
        self.lake = LakeService(self.store, self.controller, self.tiering, data_dir / "lake-offsets")
        self.metadata.on_table_created = self._table_created
        if self.config.get_optional(options.DATALAKE_FORMAT) is not None:
            self.metadata.create_lake_table = self._create_lake_table
        self.kv_snapshots = KvSnapshotService(self.store, self.config)
        self.remote_logs = RemoteLogService(self.store)
        self.acls = AclService(self.store, self.security)
        self.metadata.on_table_dropped = self._table_dropped
        m = self.metadata
        handlers: dict[ApiKey, Handler] = {
            ApiKey.CREATE_DATABASE: m.create_database,
            ApiKey.DROP_DATABASE: m.drop_database,
            ApiKey.LIST_DATABASES: m.list_databases,
            ApiKey.DATABASE_EXISTS: m.database_exists,
            ApiKey.GET_DATABASE_INFO: m.get_database_info,
            ApiKey.CREATE_TABLE: m.create_table,
            ApiKey.DROP_TABLE: m.drop_table,
            ApiKey.GET_TABLE_INFO: m.get_table_info,
            ApiKey.LIST_TABLES: m.list_tables,
            ApiKey.TABLE_EXISTS: m.table_exists,
            ApiKey.GET_TABLE_SCHEMA: m.get_table_schema,
            ApiKey.LIST_PARTITION_INFOS: m.list_partition_infos,
            ApiKey.CREATE_PARTITION: m.create_partition,
            ApiKey.DROP_PARTITION: m.drop_partition,
            ApiKey.GET_METADATA: m.metadata,
            ApiKey.GET_LAKE_SNAPSHOT: self.lake.get_lake_snapshot,
            ApiKey.LAKE_TIERING_HEARTBEAT: self.lake.heartbeat,
            ApiKey.PREPARE_LAKE_TABLE_SNAPSHOT: self.lake.prepare_snapshot,
            ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT: self.lake.commit_snapshot,
            ApiKey.GET_LATEST_KV_SNAPSHOTS: self.kv_snapshots.get_latest,
            ApiKey.GET_KV_SNAPSHOT_METADATA: self.kv_snapshots.get_metadata,
            ApiKey.LIST_KV_SNAPSHOTS: self.kv_snapshots.list,
            ApiKey.COMMIT_KV_SNAPSHOT: self.kv_snapshots.commit,
            ApiKey.COMMIT_REMOTE_LOG_MANIFEST: self.remote_logs.commit,
            ApiKey.LIST_REMOTE_LOG_MANIFESTS: self.remote_logs.list,
            ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: m.get_security_token,
            ApiKey.ADJUST_ISR: self.controller.adjust_isr,
            ApiKey.CREATE_ACLS: self.acls.create_acls,
            ApiKey.LIST_ACLS: self.acls.list_acls,
            ApiKey.DROP_ACLS: self.acls.drop_acls,
            ApiKey.REGISTER_TABLET_SERVER: self._register_tablet_server,
            ApiKey.TABLET_SERVER_HEARTBEAT: self._tablet_server_heartbeat,
        }
        self.rpc = ListenerGroup(
            name="coordinator",
            listeners=listeners,
            handlers=handlers,
            server_type=ServerType.COORDINATOR,
            limits=RpcLimits.from_config(self.config),
            security=self.security,
        )
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def port(self) -> int:
        return self.rpc.port

    async def start(self) -> None:
        await self.rpc.start()
        self.node.CopyFrom(self.rpc.describe(COORDINATOR_ID))
        self._tasks.append(asyncio.create_task(self._expiry_loop(), name="session-expiry"))
        self._tasks.append(asyncio.create_task(self._startup_grace(), name="startup-grace"))
        self._tasks.append(asyncio.create_task(self._auto_partition_loop(), name="auto-partition"))
        self.lake.load_tables()
        self._tasks.append(asyncio.create_task(self._tiering_expiry_loop(), name="tiering-expiry"))
        log.info("coordinator started (epoch %d) on %s:%d", self.coordinator_epoch, self.host, self.port)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.rpc.close()
        await self.pool.close()
        self.store.close()

    # ---- membership

    async def _register_tablet_server(
        self, request: internal.RegisterTabletServerRequest, ctx: RequestContext
    ) -> internal.RegisterTabletServerResponse:
        await check_registration(request, self.membership)
        server, replaced = self.membership.register(
            request.server_id,
            request.host,
            request.port,
            request.rack if request.HasField("rack") else None,
            request.listeners if request.HasField("listeners") else None,
        )
        log.info(
            "tablet server %d registered at %s:%d%s",
            server.server_id,
            server.host,
            server.port,
            " (restarted)" if replaced else "",
        )
        asyncio.get_running_loop().create_task(self.controller.on_server_registered(server.server_id))
        return internal.RegisterTabletServerResponse(
            coordinator_epoch=self.coordinator_epoch,
            session_id=server.session_id,
            session_timeout_ms=int(self.membership.session_timeout * 1000),
        )

    async def _tablet_server_heartbeat(
        self, request: internal.TabletServerHeartbeatRequest, ctx: RequestContext
    ) -> internal.TabletServerHeartbeatResponse:
        valid = self.membership.heartbeat(request.server_id, request.session_id)
        return internal.TabletServerHeartbeatResponse(
            session_valid=valid, coordinator_epoch=self.coordinator_epoch
        )

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.membership.session_timeout / 4))
            expired = self.membership.expire()
            if expired:
                for server in expired:
                    log.warning(
                        "tablet server %d missed heartbeats for %.1fs: declared dead",
                        server.server_id,
                        self.membership.session_timeout,
                    )
                await self.controller.on_servers_dead({s.server_id for s in expired})

    async def _startup_grace(self) -> None:
        """After a restart, leaders recorded for servers that never came back are moved elsewhere."""
        await asyncio.sleep(self.membership.session_timeout)
        recorded = {b.leader for b in self.store.list_buckets() if b.leader is not None}
        missing = recorded - set(self.membership.servers)
        if missing:
            log.warning("tablet servers %s did not re-register after the restart", sorted(missing))
            await self.controller.on_servers_dead(missing)

    async def _auto_partition_loop(self) -> None:
        interval = self.config.get(options.AUTO_PARTITION_CHECK_INTERVAL).total_seconds()
        # give tablet servers time to register before creating partitions that need replicas
        await asyncio.sleep(min(interval, self.membership.session_timeout))
        while True:
            await self.auto_partitions.check_all()
            await asyncio.sleep(interval)

    async def _table_created(self, record: TableRecord) -> None:
        self.lake.on_table_created(record)
        await self.auto_partitions.check_table(record)

    async def _tiering_expiry_loop(self) -> None:
        """Fences tiering jobs that stopped heartbeating (Fluss checks every 15 s)."""
        while True:
            await asyncio.sleep(min(15.0, max(0.2, self.tiering.job_timeout / 4)))
            self.tiering.expire_silent_jobs()

    def _table_path(self, table_id: int) -> TablePath | None:
        record = self.store.get_table_by_id(table_id)
        return None if record is None else TablePath(record.database, record.name)

    def _table_dropped(self, table_id: int) -> None:
        self.lake.on_table_dropped(table_id)
        self.kv_snapshots.drop_table(table_id)
        self.remote_logs.drop_table(table_id)

    async def _create_lake_table(self, info: TableInfo) -> None:
        """Lake-enabled tables get their lake table first, so tiering always has somewhere to write."""
        from strom.lake import lake_storage_from_config

        storage = lake_storage_from_config(dict(self.config))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: storage.catalog().create_table(info))
        log.info("created lake table for %s", info.table_path)
