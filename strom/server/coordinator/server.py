"""The coordinator server process: serves the coordinator APIs on its listeners, as the active
coordinator or as a standby that forwards to the active one.

Without ZooKeeper the process is always active, with its metadata in an embedded SQLite file. With
`zookeeper.address` any number of coordinators run; the one that wins the election
(`election.py`) builds an `ActiveCoordinator` from the ZooKeeper store, the others forward every
request to it, and answer LeaderNotAvailable (retriable) while there is none.

The listeners and the security layer belong to the process: a standby authenticates and authorizes a
request before it forwards it (with the servers' own login, which the active coordinator trusts), and
mirrors the ACLs from the active coordinator as tablet servers do.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import LeaderNotAvailableError
from strom.common.supervision import TaskSet, supervise
from strom.common.table_path import TablePath
from strom.metrics import Metrics, MetricsServer, start_reporter
from strom.metrics.coordinator import register_coordinator_metrics
from strom.metrics.requests import RequestMetrics
from strom.metrics.supervision import register_supervision_metrics
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.limits import RpcLimits
from strom.rpc.server import RequestContext
from strom.security.layer import SecurityLayer, SecuritySettings
from strom.security.listeners import ListenerSettings
from strom.server.coordinator.active import HANDLERS, ActiveCoordinator
from strom.server.coordinator.embedded_liveness import EmbeddedLiveness
from strom.server.rpc_listeners import ListenerGroup
from strom.server.server_options import check_server_config
from strom.server.store.sqlite import SqliteMetadataStore
from strom.server.tablet.acl_sync import AclSync

if TYPE_CHECKING:
    # kazoo is imported only when zookeeper.address is set
    from strom.server.coordinator.election import CoordinatorElection

log = logging.getLogger(__name__)

COORDINATOR_ID = 0


class CoordinatorServer:
    def __init__(self, *, host: str, port: int, data_dir: Path, config: dict[str, str]) -> None:
        self.host = host
        self.data_dir = data_dir
        self.config = Configuration(config)
        check_server_config(self.config)
        data_dir.mkdir(parents=True, exist_ok=True)
        listeners = ListenerSettings.from_config(self.config, host, port)
        security = SecuritySettings.from_config(self.config, listeners)
        self.security = SecurityLayer(security, resolve_table=self._table_path)
        self.pool = ConnectionPool(sasl=security.internal_login, tls=security.internal_tls)
        self.node = pb.PbServerNode(node_id=COORDINATOR_ID, host=host, port=port)
        self.active: ActiveCoordinator | None = None
        self._activation = asyncio.Lock()
        self.election: CoordinatorElection | None = None  # with ZooKeeper, from start()
        self.metrics = Metrics("coordinator")
        self.metrics_server: MetricsServer | None = None
        register_coordinator_metrics(self.metrics, lambda: self.active)
        self.rpc = ListenerGroup(
            name="coordinator",
            listeners=listeners,
            handlers={key: functools.partial(self._route, key) for key in HANDLERS},
            server_type=ServerType.COORDINATOR,
            limits=RpcLimits.from_config(self.config),
            security=self.security,
            observer=RequestMetrics(self.metrics),
        )
        # while standing by, the ACLs come from the active coordinator (which keeps its own up to date)
        self._acl_mirror = (
            AclSync(
                self.security.authorizer,
                self._active_request,
                self.config.get(options.AUTHORIZER_ACL_REFRESH_INTERVAL).total_seconds(),
            )
            if self.security.authorizer is not None
            else None
        )
        self._tasks = TaskSet("coordinator")
        self._stop_counting_supervision: Callable[[], None] = lambda: None

    @property
    def port(self) -> int:
        return self.rpc.port

    @property
    def coordinator_epoch(self) -> int | None:
        return self.active.coordinator_epoch if self.active is not None else None

    async def start(self) -> None:
        await self.rpc.start()
        self._stop_counting_supervision = register_supervision_metrics(self.metrics)
        self.metrics_server = start_reporter(self.metrics, self.config, self.host)
        if self.metrics_server is not None:
            supervise(self.metrics.refresh_state, name="metrics", tasks=self._tasks)
        self.node.CopyFrom(self.rpc.describe(COORDINATOR_ID))
        if self.config.get_optional(options.ZOOKEEPER_ADDRESS) is None:
            await self._activate(SqliteMetadataStore(self.data_dir / "metadata.db"))
            return
        from strom.server.coordinator.election import CoordinatorElection

        self.election = CoordinatorElection(self.config, self.node, self._elected, self._deactivate)
        await self.election.start()
        if self._acl_mirror is not None:
            supervise(self._mirror_acls, name="acl-mirror", tasks=self._tasks)

    async def stop(self) -> None:
        await self._tasks.close()
        self._stop_counting_supervision()
        if self.election is not None:
            await self.election.stop()
        await self._deactivate()
        await self.rpc.close()
        await self.pool.close()
        if self.metrics_server is not None:
            self.metrics_server.close()

    # ---- becoming active and standby

    async def _activate(self, store: Any, liveness: Any = EmbeddedLiveness) -> None:
        async with self._activation:
            active = await ActiveCoordinator.create(
                store=store,
                config=self.config,
                node=self.node,
                data_dir=self.data_dir,
                pool=self.pool,
                liveness=liveness,
                security=self.security,
            )
            await active.start()
            self.active = active

    async def _elected(self, store: Any, liveness: Any) -> None:
        await self._activate(store, liveness)

    async def _deactivate(self) -> None:
        """Stop acting as the active coordinator (stopping, or the election was lost)."""
        async with self._activation:
            active, self.active = self.active, None
            if active is None:
                return
            log.warning("coordinator (epoch %d) is no longer active", active.coordinator_epoch)
            await active.stop()
            await active.store.close()

    # ---- requests

    def _active_address(self) -> tuple[str, int]:
        target = self.election.active_address() if self.election is not None else None
        if target is None or target == (self.node.host, self.node.port):
            raise LeaderNotAvailableError(
                "no coordinator is active at the moment (starting, or electing a new one); retry shortly"
            )
        return target

    async def _active_request(self, key: ApiKey, request: Message, timeout: float | None = None) -> Any:
        return await self.pool.request(*self._active_address(), key, request, timeout=timeout)

    async def _route(self, key: ApiKey, request: Message, ctx: RequestContext) -> Message:
        active = self.active
        if active is not None:
            return await active.handlers[key](request, ctx)
        return await self._active_request(key, request)

    async def _mirror_acls(self) -> None:
        assert self._acl_mirror is not None
        while True:
            if self.active is None:
                try:
                    await self._acl_mirror.refresh()
                except Exception as e:  # no active coordinator yet: keep the last ACLs
                    log.debug("cannot mirror ACLs from the active coordinator: %s", e)
            await asyncio.sleep(self._acl_mirror.interval)

    def _table_path(self, table_id: int) -> TablePath | None:
        active = self.active
        record = active.store.get_table_by_id(table_id) if active is not None else None
        return None if record is None else TablePath(record.database, record.name)
