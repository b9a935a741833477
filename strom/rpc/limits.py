"""Resource limits of an RPC server, so that no client can exhaust it.

- A frame larger than `max_frame_size` is answered with an error as soon as its header is read, and
  its bytes are skipped, never buffered.
- A connection stops being read while it has `max_pending_requests` requests unanswered, or while
  its answers pile up unread (the transport's write buffer is over its high-water mark): a client that
  pipelines requests but does not read the answers holds at most that much server memory.
- All connections of a server together hold at most `max_buffered_bytes` of request bytes (partial
  frames and requests being handled); a connection that would go over stops being read until others
  finish.
- A connection with no complete request for `idle_timeout` is closed, and so is one whose started
  frame makes no progress for `frame_timeout` (half-open and trickling connections).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strom.common import config as options
from strom.common.config import Configuration


@dataclass(frozen=True, slots=True)
class RpcLimits:
    max_frame_size: int = 32 << 20
    max_pending_requests: int = 128
    max_buffered_bytes: int = 256 << 20
    idle_timeout: float = 600.0
    frame_timeout: float = 60.0

    @classmethod
    def from_config(cls, config: Configuration) -> RpcLimits:
        return cls(
            max_frame_size=int(config.get(options.RPC_MAX_FRAME_SIZE)),
            max_pending_requests=int(config.get(options.RPC_CONNECTION_MAX_PENDING_REQUESTS)),
            max_buffered_bytes=int(config.get(options.RPC_MAX_BUFFERED_BYTES)),
            idle_timeout=config.get(options.NETTY_CONNECTION_MAX_IDLE_TIME).total_seconds(),
            frame_timeout=config.get(options.RPC_FRAME_TIMEOUT).total_seconds(),
        )


class MemoryBudget:
    """Request bytes held by one server's connections; over the limit, connections wait to be read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: dict[object, Callable[[], None]] = {}

    def take(self, size: int) -> None:
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        if self._waiting and self.used < self.limit:
            waiting, self._waiting = self._waiting, {}
            for resume in waiting.values():
                resume()

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    def wait(self, owner: object, resume: Callable[[], None]) -> None:
        self._waiting[owner] = resume

    def forget(self, owner: object) -> None:
        self._waiting.pop(owner, None)
