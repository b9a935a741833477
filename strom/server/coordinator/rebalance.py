"""Cluster rebalance on the active coordinator (Fluss's AddServerTag, RemoveServerTag, Rebalance,
ListRebalanceProgress and CancelRebalance).

A rebalance plans moves with `strom.common.rebalance.plan_rebalance` and executes them bucket by bucket,
a few at a time, as Kafka reassigns partitions: the new replicas join the replica list and catch up as
followers; once they are in the ISR, leadership moves if the old leader is leaving; then the old replicas
leave the list and are deleted. Buckets that only change leader go last. Every step is a compare of the
bucket's current assignment in the metadata store with its plan, so a coordinator that takes over after a
crash resumes the task (stored as a document) exactly where the store says it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from strom.common.errors import (
    NoRebalanceInProgressError,
    RebalanceFailureError,
    ServerNotExistError,
    ServerTagAlreadyExistError,
    ServerTagNotExistError,
)
from strom.common.rebalance import (
    BucketKey,
    BucketMove,
    GoalType,
    Placement,
    RebalanceImpossible,
    RebalanceStatus,
    ServerTag,
    plan_rebalance,
)
from strom.common.supervision import spawn
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.server.store.base import BucketAssignment

if TYPE_CHECKING:
    from strom.server.coordinator.controller import Controller
    from strom.server.coordinator.membership import Membership
    from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

TAGS_DOCUMENT = "rebalance/server-tags"
TASK_DOCUMENT = "rebalance/task"
# buckets moved at once: enough to overlap catching up, few enough not to swamp a new server
CONCURRENT_MOVES = 4
# how long a new replica may take to join the ISR before its bucket's move is given up (TIMEOUT)
CATCH_UP_TIMEOUT = 600.0
POLL_INTERVAL = 0.2

# one step of a move: the bucket's next assignment given its current one (None: nothing to do)
Step = Callable[[BucketAssignment], BucketAssignment | None]


@dataclass
class BucketProgress:
    move: BucketMove
    status: RebalanceStatus = RebalanceStatus.NOT_STARTED

    def to_json(self) -> dict[str, object]:
        m = self.move
        return {
            "key": list(m.key),
            "original_replicas": list(m.original_replicas),
            "new_replicas": list(m.new_replicas),
            "original_leader": m.original_leader,
            "new_leader": m.new_leader,
            "status": int(self.status),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BucketProgress:
        table_id, partition_id, bucket = data["key"]
        move = BucketMove(
            (table_id, partition_id, bucket),
            tuple(data["original_replicas"]),
            tuple(data["new_replicas"]),
            data["original_leader"],
            data["new_leader"],
        )
        return cls(move, RebalanceStatus(data["status"]))


@dataclass
class RebalanceTask:
    rebalance_id: str
    status: RebalanceStatus
    buckets: list[BucketProgress] = field(default_factory=list)
    started_ms: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "rebalance_id": self.rebalance_id,
                "status": int(self.status),
                "started_ms": self.started_ms,
                "buckets": [b.to_json() for b in self.buckets],
            }
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> RebalanceTask:
        data = json.loads(raw)
        return cls(
            data["rebalance_id"],
            RebalanceStatus(data["status"]),
            [BucketProgress.from_json(b) for b in data["buckets"]],
            data.get("started_ms", 0),
        )


class RebalanceManager:
    def __init__(self, store: OrderedStore, membership: Membership, controller: Controller) -> None:
        self.store = store
        self.membership = membership
        self.controller = controller
        self._runner: asyncio.Task[None] | None = None
        # the task the runner executes: a cancel changes this object, which the runner saves as it goes
        self._running: RebalanceTask | None = None
        self._cancelled = False

    # ---- server tags

    def server_tags(self) -> dict[int, ServerTag]:
        raw = self.store.get_document(TAGS_DOCUMENT)
        return {int(k): ServerTag(v) for k, v in json.loads(raw).items()} if raw else {}

    async def _put_tags(self, tags: dict[int, ServerTag]) -> None:
        await self.store.put_document(
            TAGS_DOCUMENT, json.dumps({str(k): int(v) for k, v in tags.items()}).encode()
        )

    def placement_candidates(self) -> list[int]:
        """Live servers that may receive new replicas: tagged ones (going offline) get none."""
        tags = self.server_tags()
        return [s for s in self.membership.live_ids() if s not in tags]

    async def add_server_tag(
        self, request: pb.AddServerTagRequest, ctx: RequestContext
    ) -> pb.AddServerTagResponse:
        tag = _server_tag(request.server_tag)
        tags = self.server_tags()
        known = set(self.membership.live_ids()) | {r for a in self.store.list_buckets() for r in a.replicas}
        for server_id in request.server_ids:
            if server_id not in known:
                raise ServerNotExistError(f"tablet server {server_id} does not exist")
            if tags.get(server_id, tag) != tag:
                raise ServerTagAlreadyExistError(
                    f"tablet server {server_id} already has server tag {tags[server_id].name}"
                )
        tags.update({s: tag for s in request.server_ids})
        await self._put_tags(tags)
        log.info("server tag %s added to tablet servers %s", tag.name, sorted(request.server_ids))
        return pb.AddServerTagResponse()

    async def remove_server_tag(
        self, request: pb.RemoveServerTagRequest, ctx: RequestContext
    ) -> pb.RemoveServerTagResponse:
        tag = _server_tag(request.server_tag)
        tags = self.server_tags()
        for server_id in request.server_ids:
            if tags.get(server_id) != tag:
                raise ServerTagNotExistError(f"tablet server {server_id} has no server tag {tag.name}")
        for server_id in request.server_ids:
            del tags[server_id]
        await self._put_tags(tags)
        return pb.RemoveServerTagResponse()

    # ---- tasks

    def current_task(self) -> RebalanceTask | None:
        raw = self.store.get_document(TASK_DOCUMENT)
        return RebalanceTask.from_bytes(raw) if raw else None

    async def _save(self, task: RebalanceTask) -> None:
        await self.store.put_document(TASK_DOCUMENT, task.to_bytes())

    async def rebalance(self, request: pb.RebalanceRequest, ctx: RequestContext) -> pb.RebalanceResponse:
        current = self.current_task()
        if current is not None and not current.status.final:
            return pb.RebalanceResponse(rebalance_id=current.rebalance_id)  # Fluss: the one in progress
        try:
            goals = [GoalType(g) for g in request.goals] or list(GoalType)[:2]
        except ValueError:
            raise RebalanceFailureError(f"unknown rebalance goal in {list(request.goals)}") from None
        tags = self.server_tags()
        drained = {s for s, t in tags.items() if t == ServerTag.PERMANENT_OFFLINE}
        # temporarily offline servers keep what they have and take nothing new
        servers = [s for s in self.membership.live_ids() if s not in tags]
        placements = [Placement(a.key, a.replicas, a.leader) for a in self.store.list_buckets()]
        try:
            moves = plan_rebalance(
                placements, servers, drained, goals, self.membership.locations(self.membership.live_ids())
            )
        except RebalanceImpossible as e:
            raise RebalanceFailureError(f"cannot rebalance: {e}") from None
        status = RebalanceStatus.REBALANCING if moves else RebalanceStatus.COMPLETED
        task = RebalanceTask(
            uuid.uuid4().hex, status, [BucketProgress(m) for m in moves], int(time.time() * 1000)
        )
        await self._save(task)
        log.info("rebalance %s: %d bucket(s) to move (goals %s)", task.rebalance_id, len(moves), goals)
        self.resume()
        return pb.RebalanceResponse(rebalance_id=task.rebalance_id)

    async def list_progress(
        self, request: pb.ListRebalanceProgressRequest, ctx: RequestContext
    ) -> pb.ListRebalanceProgressResponse:
        task = self._task_for(request.rebalance_id if request.HasField("rebalance_id") else None)
        response = pb.ListRebalanceProgressResponse(
            rebalance_id=task.rebalance_id, rebalance_status=int(task.status)
        )
        tables: dict[int, pb.PbRebalanceProgressForTable] = {}
        for progress in task.buckets:
            m = progress.move
            table = tables.get(m.key[0])
            if table is None:
                table = tables[m.key[0]] = response.table_progress.add(table_id=m.key[0])
            entry = table.buckets_progress.add(rebalance_status=int(progress.status))
            plan = entry.rebalance_plan
            plan.bucket_id = m.key[2]
            if m.key[1] is not None:
                plan.partition_id = m.key[1]
            if m.original_leader is not None:
                plan.original_leader = m.original_leader
            if m.new_leader is not None:
                plan.new_leader = m.new_leader
            plan.original_replicas.extend(m.original_replicas)
            plan.new_replicas.extend(m.new_replicas)
        return response

    async def cancel(
        self, request: pb.CancelRebalanceRequest, ctx: RequestContext
    ) -> pb.CancelRebalanceResponse:
        task = self._task_for(request.rebalance_id if request.HasField("rebalance_id") else None)
        running = self._running
        if running is not None and running.rebalance_id == task.rebalance_id:
            task = running  # else the runner's next save would bring back the old status
        if task.status.final:
            raise NoRebalanceInProgressError(f"rebalance {task.rebalance_id} is already {task.status.name}")
        # buckets in the middle of a move finish it; the others are not started
        self._cancelled = True
        task.status = RebalanceStatus.CANCELED
        for progress in task.buckets:
            if progress.status == RebalanceStatus.NOT_STARTED:
                progress.status = RebalanceStatus.CANCELED
        await self._save(task)
        log.info("rebalance %s cancelled", task.rebalance_id)
        return pb.CancelRebalanceResponse()

    def _task_for(self, rebalance_id: str | None) -> RebalanceTask:
        task = self.current_task()
        if task is None or (rebalance_id and task.rebalance_id != rebalance_id):
            raise NoRebalanceInProgressError(
                f"no rebalance {rebalance_id}" if rebalance_id else "no rebalance has been started"
            )
        return task

    # ---- execution

    def resume(self) -> None:
        """Run the stored task if it is unfinished (called at start and after a new task is saved)."""
        task = self.current_task()
        if task is None or task.status.final or (self._runner is not None and not self._runner.done()):
            return
        self._cancelled = False
        self._running = task
        # not restarted here: a failed run leaves its progress stored, and resume() takes it up again
        self._runner = spawn(self._run(task), name="rebalance")

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)

    async def _run(self, task: RebalanceTask) -> None:
        slots = asyncio.Semaphore(CONCURRENT_MOVES)
        lock = asyncio.Lock()  # progress updates write the whole task document

        async def move_one(progress: BucketProgress) -> None:
            async with slots:
                if self._cancelled or progress.status.final:
                    return
                async with lock:
                    progress.status = RebalanceStatus.REBALANCING
                    await self._save(task)
                status = await self._move(progress.move)
                async with lock:
                    progress.status = status
                    await self._save(task)

        replica_moves = [p for p in task.buckets if p.move.moves_replicas]
        leader_moves = [p for p in task.buckets if not p.move.moves_replicas]
        try:
            for group in (replica_moves, leader_moves):  # leadership moves last
                await asyncio.gather(*(move_one(p) for p in group))
        except Exception:
            log.exception("rebalance %s failed", task.rebalance_id)
            task.status = RebalanceStatus.FAILED
            await self._save(task)
            return
        if self._cancelled:
            return
        statuses = {p.status for p in task.buckets}
        task.status = next(
            (s for s in (RebalanceStatus.FAILED, RebalanceStatus.TIMEOUT) if s in statuses),
            RebalanceStatus.COMPLETED,
        )
        await self._save(task)
        log.info("rebalance %s %s", task.rebalance_id, task.status.name.lower())

    def _assignment(self, key: BucketKey) -> BucketAssignment | None:
        return next((a for a in self.store.list_buckets(key[0]) if a.key == key), None)

    async def _update(self, key: BucketKey, change: Step) -> BucketAssignment | None:
        """Apply one step to the bucket's current assignment under the controller's lock (so it does not
        race AdjustIsr or failover) and push it to the bucket's replicas."""
        async with self.controller.lock:
            current = self._assignment(key)
            if current is None:
                return None
            updated = change(current)
            if updated is None or updated == current:
                return current
            await self.store.put_buckets([updated])
        await self.controller.notify_leadership([updated])
        return updated

    async def _move(self, move: BucketMove) -> RebalanceStatus:
        key, target = move.key, set(move.new_replicas)
        current = self._assignment(key)
        if current is None:
            return RebalanceStatus.COMPLETED  # the table went away meanwhile
        # 1. the new replicas join the replica list and start following
        added = [r for r in move.new_replicas if r not in current.replicas]
        if added:
            current = await self._update(
                key,
                lambda a: _with(
                    a,
                    replicas=a.replicas + tuple(r for r in move.new_replicas if r not in a.replicas),
                    bucket_epoch=a.bucket_epoch + 1,
                ),
            )
            if current is None:
                return RebalanceStatus.COMPLETED
        # 2. ... and catch up until the leader puts them in the ISR
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while True:
            current = self._assignment(key)
            if current is None:
                return RebalanceStatus.COMPLETED
            if target <= set(current.isr):
                break
            if time.monotonic() > deadline:
                log.warning("rebalance: new replicas of bucket %s did not catch up in time", key)
                return RebalanceStatus.TIMEOUT
            await asyncio.sleep(POLL_INTERVAL)
        # 3. leadership moves to the planned leader (an ISR member now)
        if move.new_leader is not None and current.leader != move.new_leader:
            current = await self._update(
                key,
                lambda a: (
                    _with(a, leader=move.new_leader, leader_epoch=a.leader_epoch + 1)
                    if move.new_leader in a.isr
                    else None
                ),
            )
            if current is None:
                return RebalanceStatus.COMPLETED
            if current.leader != move.new_leader:
                return RebalanceStatus.FAILED
        # 4. the old replicas leave the list and delete their copies
        removed = [r for r in current.replicas if r not in target]
        if removed:
            before = current
            current = await self._update(
                key,
                lambda a: _with(
                    a,
                    replicas=tuple(r for r in a.replicas if r in target),
                    isr=tuple(r for r in a.isr if r in target),
                    bucket_epoch=a.bucket_epoch + 1,
                ),
            )
            if current is None:
                return RebalanceStatus.COMPLETED
            gone = _with(before, replicas=tuple(removed), leader_epoch=current.leader_epoch)
            await self.controller.stop_replicas([gone], delete=True)
        log.info("rebalance: bucket %s now on %s led by %s", key, list(current.replicas), current.leader)
        return RebalanceStatus.COMPLETED


def _with(a: BucketAssignment, **changes: object) -> BucketAssignment:
    return replace(a, **changes)  # type: ignore[arg-type]


def _server_tag(value: int) -> ServerTag:
    try:
        return ServerTag(value)
    except ValueError:
        raise ServerTagNotExistError(f"unknown server tag {value}") from None
