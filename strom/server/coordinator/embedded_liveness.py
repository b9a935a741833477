"""Tablet-server liveness without ZooKeeper: registration and heartbeat RPCs (Strom-only keys
9001/9002), sessions that expire after `tablet-server.session.timeout` without a heartbeat.

The live servers are also written to the metadata store, so a restarted coordinator starts with the
servers that were live before it stopped: it answers Metadata with them (instead of with no servers and
leaders nobody knows) until they register again, or until their sessions would have expired.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from strom.common.supervision import spawn, supervise
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.server.coordinator.liveness import Liveness
from strom.server.coordinator.membership import LiveServer
from strom.server.coordinator.registration import check_registration

if TYPE_CHECKING:
    from strom.server.coordinator.active import ActiveCoordinator
    from strom.server.store.base import MetadataStore

log = logging.getLogger(__name__)

_PREFIX = "tablet-servers/"


def _key(server_id: int) -> str:
    return f"{_PREFIX}{server_id:010d}"


class EmbeddedLiveness(Liveness):
    def __init__(self, coordinator: ActiveCoordinator) -> None:
        self.coordinator = coordinator
        self.membership = coordinator.membership
        self.store = coordinator.store
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for key, value in self.store.list_documents(_PREFIX):
            try:
                entry = json.loads(value)
                server = LiveServer(
                    entry["server_id"],
                    entry["host"],
                    entry["port"],
                    entry.get("rack"),
                    session_id=-1,  # sessions do not survive the coordinator: the server registers again
                    last_heartbeat=0.0,
                    incarnation=entry.get("incarnation"),
                    listeners=entry.get("listeners"),
                )
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring unreadable tablet-server record %s: %s", key, e)
                continue
            self.membership.remember(server)
        if self.membership.servers:
            log.info("remembered tablet servers %s from before the restart", self.membership.live_ids())
        self._expiry = supervise(self._expiry_loop, name="session-expiry")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)

    async def forget(self, servers: list[LiveServer]) -> None:
        def delete(store: MetadataStore) -> None:
            for server in servers:
                store.delete_documents(_key(server.server_id))

        await self.store.atomically(delete)

    def grace_period(self) -> float:
        return self.membership.session_timeout

    def session_timeout(self) -> float:
        return self.membership.session_timeout

    async def register(
        self, request: internal.RegisterTabletServerRequest, ctx: RequestContext
    ) -> internal.RegisterTabletServerResponse:
        await check_registration(request, self.membership, self.coordinator.pool.tls)
        incarnation = request.incarnation if request.HasField("incarnation") else None
        rack = request.rack if request.HasField("rack") else None
        listeners = request.listeners if request.HasField("listeners") else None
        server, restarted = self.membership.register(
            request.server_id, request.host, request.port, rack, incarnation, listeners=listeners
        )
        await self.store.put_document(
            _key(server.server_id),
            json.dumps(
                {
                    "server_id": server.server_id,
                    "host": server.host,
                    "port": server.port,
                    "rack": rack,
                    "incarnation": incarnation,
                    "listeners": listeners,
                }
            ).encode(),
        )
        unclean_start = incarnation if request.unclean_shutdown else None
        spawn(self.coordinator.server_registered(server, restarted, unclean_start), name="server-registered")
        return internal.RegisterTabletServerResponse(
            coordinator_epoch=self.coordinator.coordinator_epoch,
            session_id=server.session_id,
            session_timeout_ms=int(self.membership.session_timeout * 1000),
        )

    async def heartbeat(
        self, request: internal.TabletServerHeartbeatRequest, ctx: RequestContext
    ) -> internal.TabletServerHeartbeatResponse:
        valid = self.membership.heartbeat(request.server_id, request.session_id)
        return internal.TabletServerHeartbeatResponse(
            session_valid=valid, coordinator_epoch=self.coordinator.coordinator_epoch
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
                await self.coordinator.servers_dead(expired)
