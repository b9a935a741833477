"""Who the tiering jobs are: the identity a LakeTieringHeartbeat carries, and the jobs seen lately.

Fluss's heartbeat says nothing about the job that sends it, so the coordinator takes what it knows of
the request — the connection's address and authenticated principal — plus the job name and Spark
application id that Strom's tiering service sends in extension fields (1000, 1001; absent from Fluss's
own tiering job, which then shows by address and principal alone).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.rpc.gen import fluss_api_pb2 as pb
    from strom.rpc.server import RequestContext


@dataclass(frozen=True, slots=True)
class TieringJob:
    name: str  # "" when the job did not say
    application_id: str  # the Spark application id, "" when unknown
    address: str  # host:port of the job's connection to the coordinator
    principal: str  # e.g. User:tiering after SASL, User:ANONYMOUS on PLAINTEXT

    @classmethod
    def of(cls, request: pb.LakeTieringHeartbeatRequest, ctx: RequestContext | None) -> TieringJob:
        principal = ctx.session.principal if ctx is not None else None
        return cls(
            request.tiering_job_name,
            request.tiering_job_application_id,
            ctx.peer if ctx is not None else "",
            "" if principal is None else str(principal),
        )

    def __str__(self) -> str:
        name = self.name or "unnamed job"
        app = f", {self.application_id}" if self.application_id else ""
        return f"{name} ({self.address}{app})"


class TieringJobRegistry:
    """The jobs that sent any heartbeat (busy or asking for work) within the job timeout."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._last_seen: dict[TieringJob, float] = {}  # monotonic

    def seen(self, job: TieringJob) -> None:
        self._last_seen[job] = time.monotonic()

    def active(self) -> list[tuple[TieringJob, float]]:
        """(job, seconds since its last heartbeat), oldest first; forgets jobs silent for too long."""
        now = time.monotonic()
        for job, seen in list(self._last_seen.items()):
            if now - seen >= self.timeout:
                del self._last_seen[job]
        return sorted(((job, now - seen) for job, seen in self._last_seen.items()), key=lambda x: -x[1])

    def age(self, job: TieringJob) -> float | None:
        seen = self._last_seen.get(job)
        return None if seen is None else time.monotonic() - seen
