"""What append and upsert writers share: their writes go into the connection's shared queues, and
each writer's ``flush()`` reports the failures of its own writes only."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable
from types import TracebackType
from typing import Protocol, Self

from strom.client.writer.accumulator import RecordAccumulator
from strom.client.writer.write_batch import WriteBatch

__all__ = ["QueuedWriter"]


class _SharedQueues(Protocol):
    @property
    def accumulator(self) -> RecordAccumulator: ...  # read-only: a client may hold a subclass

    def flush(self) -> Awaitable[object]: ...


class QueuedWriter:
    _client: _SharedQueues

    def __init__(self) -> None:
        # Batches this writer wrote to, so that flush() reports this writer's failures only.
        self._mine: set[int] = set()
        self._errors: list[BaseException] = []

    def route_staged(self) -> None:
        """Queue rows the writer still holds back; a writer that holds nothing back has nothing to do."""

    def _track(self, batch: WriteBatch) -> asyncio.Future[int]:
        """The batch's future, watched for a failure to report at the next flush."""
        if batch.batch_id not in self._mine:
            self._mine.add(batch.batch_id)
            batch.future.add_done_callback(functools.partial(self._batch_done, batch.batch_id))
        return batch.future

    def _batch_done(self, batch_id: int, future: asyncio.Future[int]) -> None:
        self._mine.discard(batch_id)
        if not future.cancelled() and future.exception() is not None:
            self._errors.append(future.exception())  # type: ignore[arg-type]

    async def flush(self) -> None:
        """Send everything queued and wait for it; raises the first failure of this writer's writes
        since the previous flush."""
        self.route_staged()
        await self._client.flush()
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first

    async def wait_for_capacity(self) -> None:
        """Wait while the connection's writer buffers ``client.writer.buffer.memory-size`` or more
        (raises BufferExhaustedError after ``client.writer.buffer.wait-timeout``)."""
        await self._client.accumulator.wait_for_space()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.flush()
        else:
            self.route_staged()
            await self._client.flush()  # still deliver what was written; the original error wins
