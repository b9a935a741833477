"""Kafka consumer groups, classic protocol: membership, rebalances and committed offsets.

The broker is the referee, not the assignor: members send JoinGroup with the assignment protocols
they support (range, cooperative-sticky, ...), the coordinator picks one every member supports and a
leader, hands the leader every member's metadata, and relays the leader's assignment through
SyncGroup. A rebalance starts when a member joins, leaves, or misses heartbeats for its session
timeout; it completes once every known member has joined again or the rebalance timeout expired
(members that did not rejoin are dropped).

Each group lives on the tablet server that leads its bucket of the offsets topic (`offsets.py`),
where its commits are stored.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from dataclasses import dataclass, field

from strom.server.kafka import errors as kafka

log = logging.getLogger(__name__)

# the delay before an empty group's first rebalance completes, so members that start together join
# one generation (Kafka's group.initial.rebalance.delay.ms, shortened)
INITIAL_REBALANCE_DELAY = 0.5


class GroupState(enum.StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"Kafka error {code}")
        self.code = code


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[bytes] | None = None


@dataclass
class JoinResult:
    generation: int
    protocol_name: str
    protocol_type: str
    leader: str
    member_id: str
    members: list[tuple[str, bytes]]  # for the leader: every member's metadata


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], tuple[int, str | None]] = field(default_factory=dict)
    join_not_before: float = 0.0  # the initial delay of an empty group's first rebalance
    rebalance_timer: asyncio.TimerHandle | None = None


class GroupCoordinator:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    def group(self, group_id: str) -> Group:
        if not group_id:
            raise GroupError(kafka.INVALID_GROUP_ID, "empty group id")
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    # ---- membership

    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout: float,
        rebalance_timeout: float,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        group = self.group(group_id)
        if not protocols:
            raise GroupError(kafka.INCONSISTENT_GROUP_PROTOCOL, "no protocols")
        if group.members and group.protocol_type not in (None, protocol_type):
            raise GroupError(kafka.INCONSISTENT_GROUP_PROTOCOL, "protocol type differs from the group's")
        names = {name for name, _ in protocols}
        for other in group.members.values():
            if other.member_id != member_id and not names & {n for n, _ in other.protocols}:
                raise GroupError(kafka.INCONSISTENT_GROUP_PROTOCOL, "no protocol in common with the group")
        if member_id and member_id not in group.members:
            raise GroupError(kafka.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}")
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = group.members.get(member_id)
        if (
            member is not None
            and member.protocols == protocols
            and (
                group.state is GroupState.COMPLETING_REBALANCE
                or (group.state is GroupState.STABLE and member_id != group.leader)
            )
        ):
            # nothing changed (a retried join, a follower rejoining): the current generation stands,
            # as in Kafka; only the leader's rejoin or new metadata starts a rebalance
            member.last_heartbeat = time.monotonic()
            return self._join_result(group, member)
        if member is None:
            member = Member(
                member_id,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                protocol_type,
                protocols,
            )
            group.members[member_id] = member
        else:
            member.protocols = protocols
            member.session_timeout = session_timeout
            member.rebalance_timeout = rebalance_timeout
        member.last_heartbeat = time.monotonic()
        group.protocol_type = protocol_type
        if member.join is not None and not member.join.done():
            member.join.cancel()  # a repeated join replaces the pending one
        member.join = asyncio.get_running_loop().create_future()
        future = member.join
        if group.state is not GroupState.PREPARING_REBALANCE:
            log.info("group %s: member %s joins; rebalancing", group.group_id, member_id)
            self._prepare_rebalance(group, INITIAL_REBALANCE_DELAY if len(group.members) == 1 else 0.0)
        else:
            self._maybe_complete_join(group)
        return await future

    def _prepare_rebalance(self, group: Group, delay: float) -> None:
        """Start a rebalance: every member must join again (they learn it from Heartbeat)."""
        group.state = GroupState.PREPARING_REBALANCE
        for member in group.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_exception(GroupError(kafka.REBALANCE_IN_PROGRESS))
        timeout = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
        loop = asyncio.get_running_loop()
        group.join_not_before = time.monotonic() + delay
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        group.rebalance_timer = loop.call_later(timeout, self._complete_join, group)
        if delay:
            loop.call_later(delay + 0.01, self._maybe_complete_join, group)
        else:
            self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or time.monotonic() < group.join_not_before:
            return
        if all(m.join is not None and not m.join.done() for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop members that did not rejoin, pick protocol and leader, answer."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for member_id, member in list(group.members.items()):
            if member.join is None or member.join.done():
                log.info(
                    "group %s: member %s did not rejoin in time and is removed", group.group_id, member_id
                )
                del group.members[member_id]
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.leader = group.protocol_name = None
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol_name = _choose_protocol(list(group.members.values()))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info(
            "group %s: generation %d with %d member(s), protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader,
        )
        for member in group.members.values():
            assert member.join is not None
            member.join.set_result(self._join_result(group, member))
            member.join = None

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        assert group.protocol_name is not None and group.leader is not None
        everyone = [(m.member_id, dict(m.protocols)[group.protocol_name]) for m in group.members.values()]
        return JoinResult(
            generation=group.generation,
            protocol_name=group.protocol_name,
            protocol_type=group.protocol_type or "",
            leader=group.leader,
            member_id=member.member_id,
            members=everyone if member.member_id == group.leader else [],
        )

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> tuple[bytes, Group]:
        group = self.group(group_id)
        member = self._member(group, member_id, generation)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(kafka.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return member.assignment, group
        member.last_heartbeat = time.monotonic()
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result(other.assignment)
            group.state = GroupState.STABLE
            return member.assignment, group
        member.sync = asyncio.get_running_loop().create_future()
        return await member.sync, group

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        group = self.group(group_id)
        member = self._member(group, member_id, generation)
        member.last_heartbeat = time.monotonic()
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(kafka.REBALANCE_IN_PROGRESS)

    def leave(self, group_id: str, member_id: str) -> None:
        group = self.group(group_id)
        member = group.members.pop(member_id, None)
        if member is None:
            raise GroupError(kafka.UNKNOWN_MEMBER_ID)
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(kafka.UNKNOWN_MEMBER_ID))
        self._after_departure(group)

    def expire_sessions(self) -> None:
        """Drop members whose heartbeats stopped for longer than their session timeout."""
        now = time.monotonic()
        for group in list(self.groups.values()):
            gone = [
                m.member_id
                for m in group.members.values()
                if now - m.last_heartbeat > m.session_timeout and (m.join is None or m.join.done())
            ]
            for member_id in gone:
                log.info("group %s: member %s missed its session timeout", group.group_id, member_id)
                del group.members[member_id]
            if gone:
                self._after_departure(group)

    def _after_departure(self, group: Group) -> None:
        if not group.members:
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
                group.rebalance_timer = None
            group.state = GroupState.EMPTY
            group.leader = None
            group.generation += 1
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, 0.0)

    def _member(self, group: Group, member_id: str, generation: int) -> Member:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(kafka.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group.group_id}")
        if generation != group.generation:
            raise GroupError(
                kafka.ILLEGAL_GENERATION, f"generation {generation}, the group is at {group.generation}"
            )
        return member

    # ---- offsets

    def check_commit(self, group_id: str, generation: int, member_id: str) -> None:
        """A member's commit counts only in its current generation; simple consumers' (-1, "") always."""
        group = self.group(group_id)
        if generation >= 0 or member_id:
            self._member(group, member_id, generation)

    def commit(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> None:
        self.group(group_id).offsets.update(offsets)

    def load(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> None:
        """Committed offsets read from the offsets topic replace what this server held."""
        group = self.group(group_id)
        group.offsets.clear()
        group.offsets.update(offsets)

    def committed(self, group_id: str) -> dict[tuple[str, int], tuple[int, str | None]]:
        group = self.groups.get(group_id)
        return dict(group.offsets) if group is not None else {}


def _choose_protocol(members: list[Member]) -> str:
    """The first protocol of the first member's preference list that every member supports."""
    common = set.intersection(*({n for n, _ in m.protocols} for m in members))
    for name, _ in members[0].protocols:
        if name in common:
            return name
    raise GroupError(kafka.INCONSISTENT_GROUP_PROTOCOL)
