"""Telling whether a server process is gone, from outside: by its listening port.

A process that dies (a crash, SIGKILL, an OOM kill) has its sockets closed by the kernel: connections
to it drop at once, and new ones to its port are refused. Nothing else refuses a connection to a
port a server was listening on, so a refusal is proof; a timeout or an unreachable network proves
nothing (the host may be down, or just cut off), and is left to session timeouts.
"""

from __future__ import annotations

import asyncio
import logging

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


async def wait_until_refused(host: str, port: int) -> None:
    """Returns once host:port refuses connections: the process that listened there is gone.

    Meanwhile it holds an idle connection there and checks again whenever that drops; inconclusive
    checks (timeouts, unreachable networks) are retried, so without a refusal it waits forever.
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            connecting = loop.create_connection(_Watch, host, port)
            transport, watch = await asyncio.wait_for(connecting, PROBE_TIMEOUT)
        except ConnectionRefusedError:
            return
        except (OSError, TimeoutError):
            await asyncio.sleep(RETRY_INTERVAL)  # inconclusive: the session timeout decides
            continue
        try:
            await watch.lost  # an idle connection drops only when the peer goes away
        finally:
            transport.close()
        log.info("connection to %s:%d dropped; checking it", host, port)
