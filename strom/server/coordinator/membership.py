"""Live tablet servers: registration, heartbeats and session expiry.

Fluss tracks tablet servers with ZooKeeper ephemeral nodes. Strom's embedded mode does the same with
a session per registration that expires when heartbeats stop for `tablet-server.session.timeout`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass


@dataclass
class LiveServer:
    server_id: int
    host: str
    port: int
    rack: str | None
    session_id: int
    last_heartbeat: float
    listeners: str | None = None  # every advertised listener, NAME://host:port,...


class Membership:
    def __init__(self, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self.servers: dict[int, LiveServer] = {}

    def register(
        self, server_id: int, host: str, port: int, rack: str | None, listeners: str | None = None
    ) -> tuple[LiveServer, bool]:
        """A new session; True when this replaces a live session (the server restarted)."""
        replaced = server_id in self.servers
        server = LiveServer(server_id, host, port, rack, secrets.randbits(62), time.monotonic(), listeners)
        self.servers[server_id] = server
        return server, replaced

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

    def live_ids(self) -> list[int]:
        return sorted(self.servers)
