"""The handle an append returns: awaitable until the cluster acknowledged the appended rows."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from typing import Any

__all__ = ["WriteResult"]


class WriteResult:
    """Completion of one ``append`` / ``write_arrow*`` call.

    Ignore it for fire-and-forget writes (``await writer.flush()`` later), or ``await`` it (or its
    ``wait()``, pyfluss's name) to wait until every batch holding the call's rows was acknowledged;
    it raises the error of a batch that failed. Rows of one call may land in several batches.
    """

    __slots__ = ("_futures",)

    def __init__(self, futures: Sequence[asyncio.Future[Any]] = ()) -> None:
        # Shared with the other rows of the same batches, so they are only ever awaited shielded.
        self._futures = tuple(futures)

    def done(self) -> bool:
        return all(f.done() for f in self._futures)

    def exception(self) -> BaseException | None:
        """The first failure among finished batches, or None."""
        for f in self._futures:
            if f.done() and not f.cancelled() and f.exception() is not None:
                return f.exception()
        return None

    async def wait(self) -> None:
        if len(self._futures) == 1:
            await asyncio.shield(self._futures[0])
        elif self._futures:
            await asyncio.gather(*(asyncio.shield(f) for f in self._futures))

    def __await__(self) -> Generator[Any, None, None]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"WriteResult({len(self._futures)} batches, {state})"
