"""Fast failure detection of tablet servers, on top of session timeouts.

The coordinator keeps one idle TCP connection to every live tablet server. A process that dies (a
crash, SIGKILL, an OOM kill) has its sockets closed by the kernel, so that connection drops at once;
the coordinator then confirms by connecting again: a refused connection means nothing listens on the
server's port any more, and the server is declared dead right away instead of after its session
timeout. Anything else (a timeout: the host may be down or cut off; a successful connection: the
server is alive, or already restarted) leaves the decision to the session, which is what Kafka and
Fluss rely on alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from strom.common.supervision import TaskSet, supervise
from strom.server.coordinator.membership import LiveServer
from strom.server.port_probe import wait_until_refused

log = logging.getLogger(__name__)


class FailureDetector:
    """Watches every live tablet server's port; calls `on_dead(server_id, session_id)` when the
    process behind a registration is confirmed gone."""

    def __init__(self, on_dead: Callable[[int, int], Awaitable[None]]) -> None:
        self.on_dead = on_dead
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._all = TaskSet("failure detector")

    def watch(self, server: LiveServer) -> None:
        self.unwatch(server.server_id)
        # restarted on failure: a server whose death is never noticed keeps its leaderships
        self._tasks[server.server_id] = supervise(
            lambda: self._watch(server), name="failure-detector", tasks=self._all
        )

    def unwatch(self, server_id: int) -> None:
        task = self._tasks.pop(server_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        self._tasks.clear()
        await self._all.close()

    async def _watch(self, server: LiveServer) -> None:
        await wait_until_refused(server.host, server.port)
        log.warning(
            "tablet server %d refuses connections on %s:%d: its process is gone",
            server.server_id,
            server.host,
            server.port,
        )
        self._tasks.pop(server.server_id, None)
        await self.on_dead(server.server_id, server.session_id)
