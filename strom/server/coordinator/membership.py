"""Live tablet servers: the coordinator's table of who is up, fed by registrations and failures.

Fluss tracks tablet servers with ZooKeeper ephemeral nodes (`zk_liveness.py` does the same); the
embedded mode gives each registration a session that expires when heartbeats stop for
`tablet-server.session.timeout` (`embedded_liveness.py`). Either way a server is known by its id and
by its incarnation: a new incarnation of a known id is a restarted process, whose replicas start over.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from strom.common.placement import ServerLocation


@dataclass
class LiveServer:
    server_id: int
    host: str
    port: int
    rack: str | None
    # the session the coordinator gave this registration (embedded) or the ZooKeeper session of the
    # server's ephemeral node
    session_id: int
    last_heartbeat: float
    # one value per server process (random at start, or its ZooKeeper session); None: not known yet
    incarnation: int | None = None
    # remembered from before a coordinator restart and not confirmed by the server since
    remembered: bool = False
    listeners: str | None = None  # every advertised listener, NAME://host:port,...


class Membership:
    def __init__(self, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self.servers: dict[int, LiveServer] = {}

    def register(
        self,
        server_id: int,
        host: str,
        port: int,
        rack: str | None,
        incarnation: int | None = None,
        session_id: int | None = None,
        listeners: str | None = None,
    ) -> tuple[LiveServer, bool]:
        """A new session; True when it replaces the session of another process with this id (the
        server restarted). A remembered server registering with its old incarnation is the same
        process: the coordinator restarted, not the server."""
        old = self.servers.get(server_id)
        restarted = old is not None and (
            incarnation is None or old.incarnation is None or old.incarnation != incarnation
        )
        server = LiveServer(
            server_id,
            host,
            port,
            rack,
            secrets.randbits(62) if session_id is None else session_id,
            time.monotonic(),
            incarnation,
            listeners=listeners,
        )
        self.servers[server_id] = server
        return server, restarted

    def remember(self, server: LiveServer) -> None:
        """A server that was live before a coordinator restart: live until its session would expire."""
        server.remembered = True
        server.last_heartbeat = time.monotonic()
        self.servers[server.server_id] = server

    def heartbeat(self, server_id: int, session_id: int) -> bool:
        server = self.servers.get(server_id)
        if server is None or server.session_id != session_id:
            return False
        server.last_heartbeat = time.monotonic()
        return True

    def expire(self) -> list[LiveServer]:
        """Removes and returns the servers whose session timed out."""
        now = time.monotonic()
        expired = [s for s in self.servers.values() if now - s.last_heartbeat > self.session_timeout]
        for server in expired:
            del self.servers[server.server_id]
        return expired

    def remove(self, server_id: int, session_id: int | None = None) -> LiveServer | None:
        """Removes a server (only that session of it, when given); returns what was removed."""
        server = self.servers.get(server_id)
        if server is None or (session_id is not None and server.session_id != session_id):
            return None
        del self.servers[server_id]
        return server

    def live_ids(self) -> list[int]:
        return sorted(self.servers)

    def locations(self, server_ids: Iterable[int]) -> list[ServerLocation]:
        """The failure domains (host, rack) of these live servers, for replica placement."""
        return [
            ServerLocation(s, self.servers[s].host, self.servers[s].rack)
            for s in server_ids
            if s in self.servers
        ]
