"""Coordinator-epoch fencing on a tablet server.

Every coordinator -> tablet-server request (NotifyLeaderAndIsr, StopReplica, UpdateMetadata,
NotifyLakeTableOffset...) carries the sender's coordinator epoch. As in Fluss, a request from an older
epoch than the newest this server knows is refused with InvalidCoordinatorException: it comes from a
coordinator that has been replaced, and must not undo what its successor decided. A request without an
epoch counts as Fluss's initial epoch 0.

A newer epoch is adopted, but only once the source of truth confirms it (ZooKeeper's
/coordinators/epoch, or in the embedded mode the coordinator this server registers with): a request
claiming an epoch nobody has reached would otherwise fence the real coordinator out of this server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf.message import Message

from strom.common.errors import FlussError, InvalidCoordinatorError
from strom.rpc.server import Handler, RequestContext

log = logging.getLogger(__name__)

INITIAL_COORDINATOR_EPOCH = 0  # Fluss's CoordinatorContext.INITIAL_COORDINATOR_EPOCH


class CoordinatorEpochFence:
    def __init__(self, current_epoch: Callable[[], Awaitable[int]]) -> None:
        """`current_epoch` asks the source of truth for the cluster's coordinator epoch now."""
        self._current_epoch = current_epoch
        self.epoch = -1  # the newest epoch a request of which was accepted
        self._confirmed = -1  # the newest epoch the source of truth reported

    def observe(self, epoch: int) -> None:
        """An epoch reported by the source of truth itself (a registration or heartbeat answer)."""
        self._confirmed = max(self._confirmed, epoch)

    async def admit(self, epoch: int, request_name: str) -> None:
        """Raises InvalidCoordinatorError unless a request of this epoch may act on this server."""
        if epoch < self.epoch:
            raise InvalidCoordinatorError(
                f"coordinator epoch {epoch} in {request_name} is older than the latest known coordinator "
                f"epoch {self.epoch}: it comes from a coordinator that has been replaced"
            )
        if epoch == self.epoch:
            return
        if epoch > self._confirmed:
            try:
                self.observe(await self._current_epoch())
            except FlussError as e:
                raise InvalidCoordinatorError(
                    f"cannot confirm coordinator epoch {epoch} of {request_name}: {e.message}"
                ) from None
            if epoch > self._confirmed:
                raise InvalidCoordinatorError(
                    f"coordinator epoch {epoch} in {request_name} is newer than the cluster's coordinator "
                    f"epoch {self._confirmed}"
                )
        if epoch > self.epoch:
            if self.epoch >= 0:
                log.info("coordinator epoch %d -> %d (%s)", self.epoch, epoch, request_name)
            self.epoch = epoch

    def guard(self, handler: Handler) -> Handler:
        """The handler, run only for requests whose coordinator epoch is admitted."""

        async def fenced(request: Any, ctx: RequestContext) -> Message:
            epoch = (
                request.coordinator_epoch
                if request.HasField("coordinator_epoch")
                else INITIAL_COORDINATOR_EPOCH
            )
            await self.admit(epoch, type(request).__name__.removesuffix("Request"))
            return await handler(request, ctx)

        return fenced
