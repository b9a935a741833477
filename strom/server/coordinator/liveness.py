"""Where the active coordinator learns which tablet servers are live: the interface.

`EmbeddedLiveness` (registration and heartbeat RPCs, sessions that time out) and `ZooKeeperLiveness`
(ephemeral znodes under /tabletservers/ids) both fill the coordinator's `Membership` and report
registrations and deaths to the active coordinator. The failure detector reports deaths too, faster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.server.coordinator.membership import LiveServer


class Liveness(ABC):
    # server id -> the process id of a server live at start() that reported an unclean start (only
    # ZooKeeper keeps that in the registration; embedded servers register again and report it then)
    unclean_at_start: dict[int, int] = {}

    @abstractmethod
    async def start(self) -> None:
        """Fill the membership with the servers that are live now (before the coordinator serves)."""

    @abstractmethod
    def serving(self) -> None:
        """The coordinator has taken over and answers the tablet servers from now on (called once,
        at the end of its start, with nothing awaited before it serves). Sessions judged by the
        coordinator run from here, not from `start`: taking over may take seconds."""

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def forget(self, servers: list[LiveServer]) -> None:
        """These servers are dead (their sessions are gone from the membership already)."""

    @abstractmethod
    def grace_period(self) -> float:
        """How long a server recorded as a leader may take to show up after the coordinator starts,
        before its leadership is moved."""

    @abstractmethod
    def session_timeout(self) -> float:
        """How long a tablet server may be out of touch before it counts as dead."""

    @abstractmethod
    async def register(
        self, request: internal.RegisterTabletServerRequest, ctx: RequestContext
    ) -> internal.RegisterTabletServerResponse: ...

    @abstractmethod
    async def heartbeat(
        self, request: internal.TabletServerHeartbeatRequest, ctx: RequestContext
    ) -> internal.TabletServerHeartbeatResponse: ...
