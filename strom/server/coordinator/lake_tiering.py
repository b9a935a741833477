"""The coordinator's lake-tiering state machine: which lake-enabled table is due for tiering, which job
tiers it (tiering epochs), and fencing of jobs that stop heartbeating.

Per table: NEW/INITIALIZED -> SCHEDULED (waits `table.datalake.freshness` after the last round)
-> PENDING (queued; the epoch is bumped) -> TIERING (handed to a job by a heartbeat asking for work)
-> TIERED -> SCHEDULED again, or FAILED -> PENDING when the job reports failure or goes silent.
A job's heartbeat, finish, failure and commit must carry the table's current epoch; anything older
is fenced with FENCED_TIERING_EPOCH, so a job that lost its table can never commit it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from dataclasses import dataclass

from strom.common.errors import FencedTieringEpochError, TableNotExistError
from strom.common.table_path import TablePath
from strom.server.coordinator.tiering_jobs import TieringJob, TieringJobRegistry

log = logging.getLogger(__name__)


class TieringState(enum.Enum):
    NEW = "new"
    INITIALIZED = "initialized"
    SCHEDULED = "scheduled"
    PENDING = "pending"
    TIERING = "tiering"
    TIERED = "tiered"
    FAILED = "failed"


_VALID_PREVIOUS: dict[TieringState, set[TieringState]] = {
    TieringState.SCHEDULED: {TieringState.NEW, TieringState.INITIALIZED, TieringState.TIERED},
    TieringState.PENDING: {TieringState.SCHEDULED, TieringState.FAILED, TieringState.TIERED},
    TieringState.TIERING: {TieringState.PENDING},
    TieringState.TIERED: {TieringState.TIERING},
    TieringState.FAILED: {TieringState.TIERING},
}


@dataclass
class _Table:
    table_id: int
    path: TablePath
    freshness: float  # seconds
    last_tiered: float  # wall-clock seconds of the last finished round (or registration)
    state: TieringState
    epoch: int = 0
    last_heartbeat: float = 0.0  # monotonic, while TIERING
    last_heartbeat_wall: float = 0.0  # the same, wall-clock seconds (for people)
    job: TieringJob | None = None  # the job that holds the table (TIERING) or held it last
    timer: asyncio.TimerHandle | None = None
    round_started: float = 0.0
    last_round_seconds: float = -1.0
    last_record_count: int = -1
    last_file_size: int = -1


@dataclass(frozen=True, slots=True)
class TieringAssignment:
    table_id: int
    path: TablePath
    epoch: int


class LakeTieringManager:
    def __init__(self, job_timeout: float = 120.0) -> None:
        self.job_timeout = job_timeout
        self.tables: dict[int, _Table] = {}
        self.pending: deque[int] = deque()
        # tables no job gets: a bucket's log ends below what the lake holds (lake_service.check_truncation)
        self.held: set[int] = set()
        self.jobs = TieringJobRegistry(job_timeout)

    # ---- registration

    def add_new_table(self, table_id: int, path: TablePath, freshness: float) -> None:
        """A table created (or switched) lake-enabled: first round after one freshness interval."""
        self._register(table_id, path, freshness, time.time(), TieringState.NEW)

    def add_existing_table(
        self, table_id: int, path: TablePath, freshness: float, last_tiered: float
    ) -> None:
        """After a coordinator restart: due at once if the last lake snapshot is older than freshness."""
        self._register(table_id, path, freshness, last_tiered, TieringState.INITIALIZED)

    def _register(
        self, table_id: int, path: TablePath, freshness: float, last_tiered: float, state: TieringState
    ) -> None:
        if table_id in self.tables:
            return
        self.tables[table_id] = _Table(table_id, path, freshness, last_tiered, state)
        self._transition(table_id, TieringState.SCHEDULED)

    def set_freshness(self, table_id: int, freshness: float) -> None:
        """An altered `table.datalake.freshness`: used when the table is next scheduled."""
        table = self.tables.get(table_id)
        if table is not None:
            table.freshness = freshness

    def remove_table(self, table_id: int) -> None:
        self.held.discard(table_id)
        table = self.tables.pop(table_id, None)
        if table is not None and table.timer is not None:
            table.timer.cancel()

    # ---- state machine

    def _transition(self, table_id: int, target: TieringState) -> None:
        table = self.tables.get(table_id)
        if table is None or table.state not in _VALID_PREVIOUS.get(target, set()):
            log.error(
                "invalid tiering transition of table %s: %s -> %s",
                table_id,
                table.state if table else None,
                target,
            )
            return
        table.state = target
        if target == TieringState.SCHEDULED:
            delay = max(0.0, table.freshness - (time.time() - table.last_tiered))
            if table.timer is not None:
                table.timer.cancel()
            table.timer = asyncio.get_running_loop().call_later(delay, self._due, table_id)
        elif target == TieringState.PENDING:
            table.epoch += 1
            self.pending.append(table_id)
        elif target == TieringState.TIERING:
            table.last_heartbeat = time.monotonic()
            table.round_started = table.last_heartbeat_wall = time.time()

    def _due(self, table_id: int) -> None:
        table = self.tables.get(table_id)
        if table is not None and table.state == TieringState.SCHEDULED:
            table.timer = None
            self._transition(table_id, TieringState.PENDING)

    def _check_epoch(self, table_id: int, epoch: int) -> _Table:
        table = self.tables.get(table_id)
        if table is None:
            raise TableNotExistError(f"table {table_id} does not exist or is not lake-enabled")
        if epoch != table.epoch:
            raise FencedTieringEpochError(
                f"tiering epoch {epoch} of table {table_id} is stale: "
                f"the coordinator's epoch is {table.epoch}"
            )
        return table

    # ---- requests from tiering jobs

    def hold(self, table_id: int) -> None:
        """Hand the table to no tiering job (its lake is ahead of a bucket's log: lake_service.py); a
        round already running finishes, and its bucket, with nothing new below the lake's offset, adds
        nothing to the lake."""
        self.held.add(table_id)

    def request_table(self, job: TieringJob | None = None) -> TieringAssignment | None:
        skipped: list[int] = []
        try:
            return self._next_table(job, skipped)
        finally:
            self.pending.extend(skipped)  # held tables keep their place in the queue

    def _next_table(self, job: TieringJob | None, skipped: list[int]) -> TieringAssignment | None:
        while self.pending:
            table_id = self.pending.popleft()
            table = self.tables.get(table_id)
            if table is None or table.state != TieringState.PENDING:
                continue
            if table_id in self.held:
                skipped.append(table_id)
                continue
            self._transition(table_id, TieringState.TIERING)
            table.job = job
            log.info(
                "table %s (%d) handed to tiering job %s with epoch %d",
                table.path,
                table_id,
                job or "(unknown)",
                table.epoch,
            )
            return TieringAssignment(table_id, table.path, table.epoch)
        return None

    def heartbeat(self, table_id: int, epoch: int, job: TieringJob | None = None) -> None:
        table = self._check_epoch(table_id, epoch)
        if table.state != TieringState.TIERING:
            raise FencedTieringEpochError(f"table {table_id} is not being tiered (state {table.state.value})")
        table.last_heartbeat = time.monotonic()
        table.last_heartbeat_wall = time.time()
        if job is not None:
            table.job = job  # the holder's epoch, maybe from a new connection (a reconnect)

    def finish(
        self,
        table_id: int,
        epoch: int,
        force: bool = False,
        record_count: int | None = None,
        file_size: int | None = None,
    ) -> None:
        table = self._check_epoch(table_id, epoch)
        if table.state != TieringState.TIERING:
            raise FencedTieringEpochError(f"table {table_id} is not being tiered (state {table.state.value})")
        table.last_tiered = time.time()
        table.last_round_seconds = table.last_tiered - table.round_started
        if record_count is not None:
            table.last_record_count = record_count
        if file_size is not None:
            table.last_file_size = file_size
        self._transition(table_id, TieringState.TIERED)
        # a force-finished round (the job hit its time budget) is queued again at once
        self._transition(table_id, TieringState.PENDING if force else TieringState.SCHEDULED)

    def fail(self, table_id: int, epoch: int) -> None:
        table = self._check_epoch(table_id, epoch)
        if table.state != TieringState.TIERING:
            raise FencedTieringEpochError(f"table {table_id} is not being tiered (state {table.state.value})")
        self._transition(table_id, TieringState.FAILED)
        self._transition(table_id, TieringState.PENDING)

    def check_commit(self, table_id: int, epoch: int) -> None:
        """A lake snapshot commit must come from the job that currently tiers the table."""
        table = self._check_epoch(table_id, epoch)
        if table.state != TieringState.TIERING:
            raise FencedTieringEpochError(f"table {table_id} is not being tiered (state {table.state.value})")

    def expire_silent_jobs(self) -> list[int]:
        """Tables whose job stopped heartbeating go back to the queue under a new epoch."""
        now = time.monotonic()
        expired = [
            t.table_id
            for t in self.tables.values()
            if t.state == TieringState.TIERING and now - t.last_heartbeat >= self.job_timeout
        ]
        for table_id in expired:
            log.warning(
                "tiering job %s of table %d timed out; the table is queued again",
                self.tables[table_id].job or "(unknown)",
                table_id,
            )
            self._transition(table_id, TieringState.FAILED)
            self._transition(table_id, TieringState.PENDING)
        return expired
