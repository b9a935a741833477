"""A tablet server in a ZooKeeper cluster: its ephemeral /tabletservers/ids/<id>, the active coordinator
it follows, and the coordinator epoch it checks requests against.

The registration lives as long as the server's ZooKeeper session. When the session expires (the server
was paused or cut off for longer than `zookeeper.client.session-timeout`), the coordinator moves its
leadership away; once the server reaches ZooKeeper again it registers anew and the coordinator hands it
its replicas back as a follower.

A restarted server may find the node of its previous process still there (ZooKeeper keeps it until
that session times out). Fluss waits for it to go; Strom replaces it when the old process is provably
gone (its port refuses connections, or it was this very port), and otherwise waits like Fluss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from strom.common import config as options
from strom.common.errors import FlussError
from strom.common.supervision import supervise
from strom.server.port_probe import probe
from strom.server.zookeeper import layout
from strom.server.zookeeper.client import call, connect, on_loop, paths_of, session_timeout

if TYPE_CHECKING:
    from strom.server.tablet.server import TabletServer

log = logging.getLogger(__name__)

REGISTER_RETRY = 1.0


class ZooKeeperRegistration:
    def __init__(self, server: TabletServer) -> None:
        self.server = server
        self.paths = paths_of(server.config)
        self.zk: Any = None
        self._session_lost = False
        self._stopping = False
        self._registering: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.zk = await call(connect, self.server.config)
        self.zk.add_listener(on_loop(self.loop, self._state_changed))
        DataWatch(self.zk, self.paths.coordinator_active, on_loop(self.loop, self._coordinator_changed))
        await self._register()

    async def stop(self) -> None:
        self._stopping = True
        if self._registering is not None:
            self._registering.cancel()
        if self.zk is None:
            return
        try:  # leave at once on a clean stop, instead of when the session times out
            _, stat = await call(self.zk.get, self.paths.server_id(self.server.server_id))
            if stat.ephemeralOwner == self.zk.client_id[0]:
                await call(self.zk.delete, self.paths.server_id(self.server.server_id), version=stat.version)
        except (FlussError, NoNodeError, BadVersionError):
            pass
        await call(self.zk.stop)
        await call(self.zk.close)

    async def coordinator_epoch(self) -> int:
        """The cluster's coordinator epoch, from /coordinators/epoch."""
        try:
            data, _ = await call(self.zk.get, self.paths.coordinator_epoch)
        except NoNodeError:
            return -1
        return int(data.decode() or "0")

    # ---- registration

    async def _register(self) -> None:
        server = self.server
        path = self.paths.server_id(server.server_id)
        node = server.rpc.describe(server.server_id)
        registration = layout.tablet_server_registration(
            node.host,
            node.port,
            server.config.get_optional(options.TABLET_SERVER_RACK),
            int(time.time() * 1000),
            node.listeners,
            server.incarnation if server.clean_shutdown.unclean else None,
        )
        internal = server.rpc.listeners.internal
        deadline = time.monotonic() + session_timeout(server.config) + 5
        while not self._stopping:
            try:
                await call(self.zk.create, path, registration, ephemeral=True, makepath=True)
                log.info("registered in ZooKeeper at %s", path)
                return
            except NodeExistsError:
                pass
            try:
                data, stat = await call(self.zk.get, path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return  # ours already (a retry after a lost reply)
            host, port, _, _ = layout.parse_tablet_server_registration(data, internal)
            gone = (host, port) == (node.host, node.port) or await probe(host, port) is False
            if gone or time.monotonic() > deadline:
                log.warning(
                    "replacing the registration of tablet server %d left by %s:%d (%s)",
                    server.server_id,
                    host,
                    port,
                    "that process is gone" if gone else "it outlived its session timeout",
                )
                with contextlib.suppress(NoNodeError, BadVersionError):
                    await call(self.zk.delete, path, version=stat.version)
                continue
            log.warning(
                "tablet server id %d is registered by a live server at %s:%d; retrying",
                server.server_id,
                host,
                port,
            )
            await asyncio.sleep(REGISTER_RETRY)

    # ---- events (on the event loop)

    def _state_changed(self, state: str) -> None:
        if self._stopping:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session expired: the coordinator considers this server dead")
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost and not self._stopping:
            self._session_lost = False
            log.info("ZooKeeper session re-established; registering again")
            self._registering = supervise(self._register, name="zookeeper-registration")

    def _coordinator_changed(self, data: bytes | None, stat: Any, event: Any = None) -> None:
        if data is None:
            self.server.coordinator = None
            return
        try:
            _, host, port = layout.parse_coordinator_address(data, self.server.rpc.listeners.internal)
        except (ValueError, KeyError) as e:
            log.warning("unreadable %s: %s", self.paths.coordinator_active, e)
            return
        if self.server.coordinator != (host, port):
            log.info("the active coordinator is at %s:%d", host, port)
        self.server.coordinator = (host, port)
