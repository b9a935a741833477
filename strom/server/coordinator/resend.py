"""What a live tablet server missed: UpdateMetadata and NotifyLeaderAndIsr pushes that failed (a lost
connection, a timeout) are sent again until the server acknowledges them or is declared dead.

A server that missed an AlterTable's UpdateMetadata while alive refused batches with the new schema
until it restarted; one that missed a NotifyLeaderAndIsr kept serving an old term. The coordinator now
remembers, per server, what it still owes it (the live-server list, the metadata of some tables, the
leadership of some buckets) and one task per server resends it with a backoff from RESEND_MIN_S to
RESEND_MAX_S. What is resent is the current state, read at the moment of sending, never the failed
message: a stale leadership reaching a server later is what test_eligible_leaders.py caught losing
data. The debt ends when the server answers, when it is declared dead, or when it registers anew
(its registration pushes everything again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from strom.common.supervision import supervise

log = logging.getLogger(__name__)

RESEND_MIN_S = 0.5
RESEND_MAX_S = 10.0

BucketKey = tuple[int, int | None, int]


@dataclass
class Owed:
    """What one tablet server (in one session) has not acknowledged yet."""

    session_id: int
    servers: bool = False  # the live-server list
    tables: set[int] = field(default_factory=set)  # tables whose current metadata it lacks
    buckets: set[BucketKey] = field(default_factory=set)  # buckets whose leadership it lacks

    def empty(self) -> bool:
        return not self.servers and not self.tables and not self.buckets


class Resender:
    """`session_of(server)`: its current session, None once it is no longer live.
    `push(server, owed)`: sends the current state `owed` names; returns what still failed."""

    def __init__(
        self,
        session_of: Callable[[int], int | None],
        push: Callable[[int, Owed], Awaitable[Owed]],
    ) -> None:
        self.session_of = session_of
        self.push = push
        self.owed: dict[int, Owed] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.resent = 0  # pushes delivered on a retry (for tests and logs)

    def owe(
        self,
        server_id: int,
        *,
        servers: bool = False,
        tables: set[int] | None = None,
        buckets: set[BucketKey] | None = None,
    ) -> None:
        session = self.session_of(server_id)
        if session is None:
            return  # not live: its next registration pushes everything
        owed = self.owed.get(server_id)
        if owed is None or owed.session_id != session:
            owed = self.owed[server_id] = Owed(session)
        owed.servers |= servers
        owed.tables |= tables or set()
        owed.buckets |= buckets or set()
        task = self.tasks.get(server_id)
        if task is None or task.done():
            # restarted if it fails: what a server is owed must reach it
            self.tasks[server_id] = supervise(lambda: self._run(server_id), name=f"resend-to-{server_id}")

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()

    async def _run(self, server_id: int) -> None:
        delay = RESEND_MIN_S
        attempts = 0
        while True:
            await asyncio.sleep(delay)
            owed = self.owed.get(server_id)
            if owed is None or owed.empty():
                self.owed.pop(server_id, None)
                return
            if self.session_of(server_id) != owed.session_id:
                # declared dead, or registered anew (which pushed everything again)
                log.info("tablet server %d left or registered again: nothing to resend", server_id)
                self.owed.pop(server_id, None)
                return
            attempts += 1
            # take the debt; whatever fails again is owed anew (possibly together with newer pushes)
            self.owed[server_id] = Owed(owed.session_id)
            try:
                left = await self.push(server_id, owed)
            except Exception:  # a bug must not end the resending: log it and try again later
                log.exception("resending to tablet server %d failed unexpectedly", server_id)
                left = owed
            current = self.owed[server_id]
            current.servers |= left.servers
            current.tables |= left.tables
            current.buckets |= left.buckets
            if current.empty():
                self.owed.pop(server_id, None)
                self.resent += 1
                log.warning(
                    "tablet server %d acknowledged the metadata it had missed (attempt %d)",
                    server_id,
                    attempts,
                )
                return
            log.warning(
                "tablet server %d still misses %s%d table(s) and %d bucket leadership(s); retrying in %.1fs",
                server_id,
                "the server list, " if current.servers else "",
                len(current.tables),
                len(current.buckets),
                min(delay * 2, RESEND_MAX_S),
            )
            delay = min(delay * 2, RESEND_MAX_S)
