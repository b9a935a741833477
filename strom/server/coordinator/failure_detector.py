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

from strom.server.coordinator.membership import LiveServer

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 1.0  # a refusal is immediate; a timeout is inconclusive anyway
RETRY_INTERVAL = 1.0  # after an inconclusive probe


class _Watch(asyncio.Protocol):
    def __init__(self) -> None:
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:  # the server never sends unasked; ignore anything
        pass


async def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool | None:
    """True when something accepts connections at host:port, False when they are refused (nothing
    listens there), None when it cannot be told (timeout, unreachable network)."""
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await asyncio.wait_for(loop.create_connection(asyncio.Protocol, host, port), timeout)
    except ConnectionRefusedError:
        return False
    except (OSError, TimeoutError):
        return None
    transport.close()
    return True


class FailureDetector:
    """Watches every live tablet server's port; calls `on_dead(server_id, session_id)` when the
    process behind a registration is confirmed gone."""

    def __init__(self, on_dead: Callable[[int, int], Awaitable[None]]) -> None:
        self.on_dead = on_dead
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def watch(self, server: LiveServer) -> None:
        self.unwatch(server.server_id)
        self._tasks[server.server_id] = asyncio.get_running_loop().create_task(
            self._watch(server), name=f"failure-detector-{server.server_id}"
        )

    def unwatch(self, server_id: int) -> None:
        task = self._tasks.pop(server_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, server: LiveServer) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                transport, watch = await asyncio.wait_for(
                    loop.create_connection(_Watch, server.host, server.port), PROBE_TIMEOUT
                )
            except ConnectionRefusedError:
                log.warning(
                    "tablet server %d refuses connections on %s:%d: its process is gone",
                    server.server_id,
                    server.host,
                    server.port,
                )
                self._tasks.pop(server.server_id, None)
                await self.on_dead(server.server_id, server.session_id)
                return
            except (OSError, TimeoutError):
                await asyncio.sleep(RETRY_INTERVAL)  # inconclusive: the session timeout decides
                continue
            try:
                await watch.lost  # an idle connection drops only when the peer goes away
            finally:
                transport.close()
            log.info("connection to tablet server %d dropped; checking it", server.server_id)
