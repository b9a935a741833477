"""Coordinator election on ZooKeeper: one active coordinator, any number of standbys.

Every coordinator registers an ephemeral /coordinators/ids/<id> and tries to create the ephemeral
/coordinators/active (Fluss's CoordinatorAddress JSON); the one that succeeds is active. It bumps
/coordinators/epoch (fencing every write of an older coordinator, see store/zookeeper.py) and builds
an ActiveCoordinator from ZooKeeper. The others watch /coordinators/active: they forward requests to
the coordinator it names, and try again the moment it disappears.

An active coordinator that crashes leaves its ephemeral node behind until its ZooKeeper session times
out. Standbys do not wait for that: like the coordinator's failure detector for tablet servers, they
hold a connection to the active coordinator's port, and when it drops and the port refuses
connections they delete the dead coordinator's node (only that exact node) and run the election.
A coordinator that loses its ZooKeeper session steps down and, once reconnected, stands again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from strom.common.config import Configuration
from strom.common.errors import FlussError
from strom.common.supervision import Backoff, spawn, supervise
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.security.listeners import internal_listener_name
from strom.server.coordinator.zk_liveness import ZooKeeperLiveness
from strom.server.port_probe import wait_until_refused
from strom.server.store.zookeeper import ZooKeeperMetadataStore
from strom.server.zookeeper import layout
from strom.server.zookeeper.client import call, connect, on_loop, paths_of

log = logging.getLogger(__name__)

REJOIN_BACKOFF = Backoff(initial=0.2, maximum=5.0)


class CoordinatorElection:
    def __init__(
        self,
        config: Configuration,
        node: pb.PbServerNode,
        on_elected: Callable[[Any, Any], Awaitable[None]],
        on_lost: Callable[[], Coroutine[Any, Any, None]],  # run as a task
    ) -> None:
        self.config = config
        self.node = node
        self.on_elected = on_elected
        self.on_lost = on_lost
        self.paths = paths_of(config)
        self.internal_listener = internal_listener_name(config)
        self.coordinator_id = uuid.uuid4().hex
        self.zk: Any = None
        self.active = False
        self._active_node: tuple[str, str, int, Any] | None = None  # (id, host, port, stat)
        self._stopping = False
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._session_lost = False
        self._rejoining: asyncio.Task[None] | None = None

    def active_address(self) -> tuple[str, int] | None:
        """The active coordinator's address, as /coordinators/active names it (None: nobody now)."""
        if self._active_node is None:
            return None
        return self._active_node[1], self._active_node[2]

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.zk = await call(connect, self.config)
        self.zk.add_listener(on_loop(self.loop, self._state_changed))
        await self._register()
        DataWatch(self.zk, self.paths.coordinator_active, on_loop(self.loop, self._active_changed))
        await self._contend()

    async def stop(self) -> None:
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
        if self._rejoining is not None:
            self._rejoining.cancel()
        if self.active:
            self.active = False
            await self.on_lost()
            await self._resign()
        if self.zk is not None:
            await call(self.zk.stop)
            await call(self.zk.close)

    # ---- standing

    async def _register(self) -> None:
        address = layout.coordinator_address(
            self.coordinator_id, self.node.host, self.node.port, self.node.listeners
        )
        with suppress(NodeExistsError):  # registered in this session already
            await call(
                self.zk.create,
                self.paths.coordinator_id(self.coordinator_id),
                address,
                ephemeral=True,
                makepath=True,
            )

    async def _contend(self) -> None:
        """Try to become the active coordinator (when nobody is)."""
        async with self._lock:
            if self.active or self._stopping:
                return
            address = layout.coordinator_address(
                self.coordinator_id, self.node.host, self.node.port, self.node.listeners
            )
            try:
                await call(
                    self.zk.create, self.paths.coordinator_active, address, ephemeral=True, makepath=True
                )
            except NodeExistsError:
                return  # someone else is active; the watch calls us again when that changes
            except FlussError as e:
                log.warning("cannot stand in the coordinator election: %s", e.message)
                return
            log.info("coordinator %s won the election", self.coordinator_id)
            self.active = True
            try:
                # the store commits on its own thread (store/ordered.py): the news comes back to the loop
                fenced = functools.partial(self.loop.call_soon_threadsafe, self._fenced)
                store = await call(ZooKeeperMetadataStore, self.zk, self.paths, fenced)
                await self.on_elected(store, lambda coordinator: ZooKeeperLiveness(coordinator, self.zk))
            except Exception:
                log.exception("taking over as the active coordinator failed; resigning")
                self.active = False
                await self._resign()

    async def _resign(self) -> None:
        """Delete /coordinators/active if it is still ours, so a standby takes over now."""
        try:
            data, stat = await call(self.zk.get, self.paths.coordinator_active)
            if layout.parse_coordinator_address(data)[0] == self.coordinator_id:
                await call(self.zk.delete, self.paths.coordinator_active, version=stat.version)
        except (FlussError, NoNodeError, BadVersionError):
            pass

    def _fenced(self) -> None:
        """The store saw a newer coordinator epoch: step down (called on the event loop)."""
        if self.active:
            self.active = False
            spawn(self._step_down(), name="election-step-down")

    async def _step_down(self) -> None:
        await self.on_lost()
        await self._resign()
        await self._contend()

    # ---- events (on the event loop)

    def _state_changed(self, state: str) -> None:
        if self._stopping:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of coordinator %s expired", self.coordinator_id)
            self._session_lost = True
            if self.active:
                self.active = False
                spawn(self.on_lost(), name="election-lost")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; waiting for it to come back")
        elif state == KazooState.CONNECTED and self._session_lost and not self._stopping:
            self._session_lost = False
            log.info("ZooKeeper session re-established; standing for election again")
            if self._rejoining is not None:
                self._rejoining.cancel()
            # supervised: a _register that fails (ZooKeeper gone again) is retried with backoff, or this
            # coordinator would never stand for election again
            self._rejoining = supervise(self._rejoin, name="election-rejoin", backoff=REJOIN_BACKOFF)

    async def _rejoin(self) -> None:
        if self._stopping:
            return
        await self._register()
        await self._contend()

    def _active_changed(self, data: bytes | None, stat: Any, event: Any = None) -> None:
        if self._stopping:
            return
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if data is None:
            self._active_node = None
            if self.active:  # our node is gone (deleted, or our session with it): not active any more
                self.active = False
                spawn(self._step_down(), name="election-step-down")
            else:
                spawn(self._contend(), name="election-contend")
            return
        try:
            coordinator_id, host, port = layout.parse_coordinator_address(data, self.internal_listener)
        except (ValueError, KeyError) as e:
            log.warning("unreadable %s: %s", self.paths.coordinator_active, e)
            return
        self._active_node = (coordinator_id, host, port, stat)
        if coordinator_id != self.coordinator_id:
            if self.active:
                self.active = False
                spawn(self.on_lost(), name="election-lost")
            log.info("active coordinator is %s at %s:%d", coordinator_id, host, port)
            self._watcher = spawn(self._watch_active(coordinator_id, host, port, stat), name="election-watch")

    async def _watch_active(self, coordinator_id: str, host: str, port: int, stat: Any) -> None:
        """Declare a crashed active coordinator dead as soon as its port refuses connections."""
        await wait_until_refused(host, port)
        log.warning(
            "active coordinator %s at %s:%d refuses connections: removing its registration",
            coordinator_id,
            host,
            port,
        )
        try:
            # only that exact node: if it was replaced meanwhile, the election already moved on
            _, current = await call(self.zk.get, self.paths.coordinator_active)
            if current.czxid == stat.czxid:
                await call(self.zk.delete, self.paths.coordinator_active, version=current.version)
        except (FlussError, NoNodeError, BadVersionError):
            pass
