"""Tablet-server liveness through ZooKeeper, as in Fluss: each live tablet server holds an ephemeral
/tabletservers/ids/<id> (its TabletServerRegistration), and the active coordinator watches the list.

The node's owner session is the server's incarnation: a node of the same id with another owner is a
restarted server. When the failure detector has declared a server dead before ZooKeeper expired its
session, the stale node is ignored until it goes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from strom.common.errors import ConfigError
from strom.common.supervision import spawn
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.security.listeners import internal_listener_name
from strom.server.coordinator.liveness import Liveness
from strom.server.coordinator.membership import LiveServer
from strom.server.zookeeper import layout
from strom.server.zookeeper.client import call, on_loop, paths_of
from strom.server.zookeeper.client import session_timeout as zookeeper_session_timeout

if TYPE_CHECKING:
    from strom.server.coordinator.active import ActiveCoordinator

log = logging.getLogger(__name__)


class ZooKeeperLiveness(Liveness):
    def __init__(self, coordinator: ActiveCoordinator, zk: Any) -> None:
        self.coordinator = coordinator
        self.membership = coordinator.membership
        self.zk = zk
        self.paths = paths_of(coordinator.config)
        self.internal_listener = internal_listener_name(coordinator.config)
        self._dead_owners: set[int] = set()  # sessions of servers declared dead whose node is still there
        self._stopped = False
        self._sync_lock = asyncio.Lock()

    async def start(self) -> None:
        self.unclean_at_start = {}
        for server_id, (host, port, rack, listeners, owner, unclean_start) in (
            await self._read_all()
        ).items():
            self.membership.register(
                server_id, host, port, rack, incarnation=owner, session_id=owner, listeners=listeners
            )
            if unclean_start is not None:
                self.unclean_at_start[server_id] = unclean_start
        loop = asyncio.get_running_loop()
        changed = on_loop(loop, self._children_changed)

        def watch(children: list[str]) -> bool | None:  # on kazoo's thread
            if self._stopped:
                return False  # ends this watch: a later active coordinator sets its own
            changed(children)
            return None

        ChildrenWatch(self.zk, self.paths.server_ids, watch)

    def serving(self) -> None:
        pass  # ZooKeeper keeps the servers' sessions, and they run whatever the coordinator is doing

    async def stop(self) -> None:
        self._stopped = True

    async def forget(self, servers: list[LiveServer]) -> None:
        # A server declared dead before ZooKeeper expired its session leaves its node behind for a
        # while: ignore that node (by its owner session) until it goes.
        self._dead_owners.update(s.session_id for s in servers)

    def grace_period(self) -> float:
        return 0.0  # ZooKeeper already knows who is live

    def session_timeout(self) -> float:
        return zookeeper_session_timeout(self.coordinator.config)

    async def register(
        self, request: internal.RegisterTabletServerRequest, ctx: RequestContext
    ) -> internal.RegisterTabletServerResponse:
        raise ConfigError(
            "this cluster tracks tablet servers in ZooKeeper: start the tablet server with "
            "--config zookeeper.address=<the coordinators' ZooKeeper>"
        )

    async def heartbeat(
        self, request: internal.TabletServerHeartbeatRequest, ctx: RequestContext
    ) -> internal.TabletServerHeartbeatResponse:
        return internal.TabletServerHeartbeatResponse(
            session_valid=False, coordinator_epoch=self.coordinator.coordinator_epoch
        )

    # ---- watching /tabletservers/ids

    async def _read_all(self) -> dict[int, tuple[str, int, str | None, str | None, int, int | None]]:
        """server id -> (host, port, rack, listeners, owner session, unclean start) of every
        registration now."""
        ids = await call(self.zk.get_children, self.paths.server_ids)
        found = {}
        for child in ids:
            if not child.isdigit():
                continue
            try:
                data, stat = await call(self.zk.get, self.paths.server_id(int(child)))
                host, port, rack, listeners = layout.parse_tablet_server_registration(
                    data, self.internal_listener
                )
                unclean_start = layout.registration_unclean_start(data)
            except NoNodeError:
                continue
            except (ValueError, KeyError) as e:
                log.warning("unreadable registration of tablet server %s: %s", child, e)
                continue
            found[int(child)] = (host, port, rack, listeners, stat.ephemeralOwner, unclean_start)
        return found

    def _children_changed(self, children: list[str]) -> None:
        if not self._stopped:
            spawn(self._sync(), name="tablet-server-sync")

    async def _sync(self) -> None:
        async with self._sync_lock:
            if self._stopped:
                return
            registered = await self._read_all()
            owners = {owner for (*_, owner, _) in registered.values()}
            self._dead_owners &= owners  # nodes that went away need no remembering
            gone = [
                server
                for server_id in list(self.membership.servers)
                if server_id not in registered and (server := self.membership.remove(server_id)) is not None
            ]
            if gone:
                log.warning("tablet servers %s left ZooKeeper", sorted(s.server_id for s in gone))
                await self.coordinator.servers_dead(gone)
            for server_id, (host, port, rack, listeners, owner, unclean_start) in registered.items():
                known = self.membership.servers.get(server_id)
                if (known is not None and known.incarnation == owner) or owner in self._dead_owners:
                    continue
                server, restarted = self.membership.register(
                    server_id, host, port, rack, incarnation=owner, session_id=owner, listeners=listeners
                )
                await self.coordinator.server_registered(server, restarted, unclean_start)
