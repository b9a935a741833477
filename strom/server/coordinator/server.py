"""The coordinator server process: serves the coordinator APIs on its port, as the active coordinator
or as a standby that forwards to the active one.

Without ZooKeeper the process is always active, with its metadata in an embedded SQLite file. With
`zookeeper.address` any number of coordinators run; the one that wins the election
(`election.py`) builds an `ActiveCoordinator` from the ZooKeeper store, the others forward every
request to it, and answer LeaderNotAvailable (retriable) while there is none.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import LeaderNotAvailableError
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext, RpcServer
from strom.server.coordinator.active import HANDLERS, ActiveCoordinator
from strom.server.coordinator.embedded_liveness import EmbeddedLiveness
from strom.server.store.sqlite import SqliteMetadataStore

log = logging.getLogger(__name__)

COORDINATOR_ID = 0


class CoordinatorServer:
    def __init__(self, *, host: str, port: int, data_dir: Path, config: dict[str, str]) -> None:
        self.host = host
        self.data_dir = data_dir
        self.config = Configuration(config)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.pool = ConnectionPool()
        self.node = pb.PbServerNode(node_id=COORDINATOR_ID, host=host, port=port)
        self.active: ActiveCoordinator | None = None
        self._activation = asyncio.Lock()
        self.election: Any = None  # strom.server.coordinator.election.CoordinatorElection, with ZooKeeper
        self.rpc = RpcServer(
            name="coordinator",
            host=host,
            port=port,
            handlers={key: functools.partial(self._route, key) for key in HANDLERS},
            server_type=ServerType.COORDINATOR,
            max_frame_size=self.config.get(options.RPC_MAX_FRAME_SIZE),
        )

    @property
    def port(self) -> int:
        return self.rpc.port

    @property
    def coordinator_epoch(self) -> int | None:
        return self.active.coordinator_epoch if self.active is not None else None

    async def start(self) -> None:
        await self.rpc.start()
        self.node.port = self.rpc.port
        if self.config.get_optional(options.ZOOKEEPER_ADDRESS) is None:
            await self._activate(SqliteMetadataStore(self.data_dir / "metadata.db"))
            return
        from strom.server.coordinator.election import CoordinatorElection

        self.election = CoordinatorElection(self.config, self.node, self._elected, self._deactivate)
        await self.election.start()

    async def stop(self) -> None:
        if self.election is not None:
            await self.election.stop()
        await self._deactivate()
        await self.rpc.close()
        await self.pool.close()

    # ---- becoming active and standby

    async def _activate(self, store: Any, liveness: Any = EmbeddedLiveness) -> None:
        async with self._activation:
            active = ActiveCoordinator(
                store=store,
                config=self.config,
                node=self.node,
                data_dir=self.data_dir,
                pool=self.pool,
                liveness=liveness,
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
            active.store.close()

    # ---- requests

    async def _route(self, key: ApiKey, request: Message, ctx: RequestContext) -> Message:
        active = self.active
        if active is not None:
            return await active.handlers[key](request, ctx)
        target = self.election.active_address() if self.election is not None else None
        if target is None or target == (self.node.host, self.node.port):
            raise LeaderNotAvailableError(
                "no coordinator is active at the moment (starting, or electing a new one); retry shortly"
            )
        return await self.pool.request(*target, key, request)  # type: ignore[no-any-return]
