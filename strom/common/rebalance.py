"""Cluster rebalance: Fluss's vocabulary (goals, server tags, statuses) and the planner that decides
which replicas and leaders move.

The planner is a pure function of the current placement, so the coordinator (which executes a plan)
and `strom rebalance --dry-run` (which only shows it) compute the same thing. It keeps moves few:
replicas leave drained servers first, then the fullest server hands replicas to the emptiest until
every count is within one of the mean; leaders stay where they are unless their server is over its
share, in which case leadership goes to the least-loaded in-plan replica.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from strom.common.placement import Domains, ServerLocation


class GoalType(enum.IntEnum):
    """Fluss's rebalance goals (wire values of RebalanceRequest.goals)."""

    REPLICA_DISTRIBUTION = 0
    LEADER_DISTRIBUTION = 1
    RACK_AWARE = 2


class ServerTag(enum.IntEnum):
    """Fluss's server tags: a PERMANENT_OFFLINE server is drained by the next rebalance and gets no new
    replicas; a TEMPORARY_OFFLINE one keeps its replicas but gets no new ones."""

    PERMANENT_OFFLINE = 0
    TEMPORARY_OFFLINE = 1


class RebalanceStatus(enum.IntEnum):
    """Fluss's rebalance statuses, for a whole task and for each bucket in it."""

    NOT_STARTED = 0
    REBALANCING = 1
    FAILED = 2
    COMPLETED = 3
    CANCELED = 4
    TIMEOUT = 5

    @property
    def final(self) -> bool:
        return self not in (RebalanceStatus.NOT_STARTED, RebalanceStatus.REBALANCING)


BucketKey = tuple[int, int | None, int]  # table id, partition id, bucket id


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one bucket lives now."""

    key: BucketKey
    replicas: tuple[int, ...]
    leader: int | None


@dataclass(frozen=True, slots=True)
class BucketMove:
    """The plan for one bucket (Fluss's RebalancePlanForBucket): its first new replica is the
    preferred leader."""

    key: BucketKey
    original_replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    original_leader: int | None
    new_leader: int | None

    @property
    def moves_replicas(self) -> bool:
        return set(self.original_replicas) != set(self.new_replicas)

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(r for r in self.new_replicas if r not in self.original_replicas)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(r for r in self.original_replicas if r not in self.new_replicas)


class RebalanceImpossible(ValueError):
    """The goals cannot be met with the servers there are (e.g. more replicas than eligible servers)."""


def plan_rebalance(
    placements: Iterable[Placement],
    servers: Sequence[int],
    drained: Iterable[int] = (),
    goals: Iterable[GoalType] = (GoalType.REPLICA_DISTRIBUTION, GoalType.LEADER_DISTRIBUTION),
    locations: Iterable[ServerLocation] = (),
) -> list[BucketMove]:
    """The moves that balance replicas and leaders over `servers` (the live tablet servers) and empty
    the `drained` ones. Buckets whose placement does not change are left out; replica moves come
    before leader-only moves, so leadership moves last.

    With `locations` (racks and hosts of the servers), no move puts a second replica of a bucket in a
    rack or on a host that already has one; replicas sharing a host are separated whenever the hosts
    allow; with the RACK_AWARE goal, replicas sharing a rack are separated too (and too few racks for
    the largest replication factor makes the goal impossible, as in Fluss)."""
    goals = set(goals)
    domains = Domains.of(locations)
    drained = set(drained)
    eligible = sorted(set(servers) - drained)
    placements = sorted(
        placements, key=lambda p: (p.key[0], p.key[1] if p.key[1] is not None else -1, p.key[2])
    )
    if not eligible:
        raise RebalanceImpossible("no tablet server is left to hold replicas")
    replicas = {p.key: list(p.replicas) for p in placements}
    for p in placements:
        if len(set(p.replicas)) > len(eligible):
            raise RebalanceImpossible(
                f"bucket {p.key} has {len(p.replicas)} replicas but only {len(eligible)} tablet server(s) "
                "may hold them"
            )
    rack_aware = GoalType.RACK_AWARE in goals
    if rack_aware:
        _check_racks(domains, eligible, max((len(p.replicas) for p in placements), default=0))
    load = Counter({s: 0 for s in eligible})
    for rs in replicas.values():
        load.update(r for r in rs if r in load)
    # a bucket without a leader has nobody to copy from: it stays where it is until it has one
    placements = [p for p in placements if p.leader is not None]

    def no_worse(before: Sequence[int], after: Sequence[int]) -> bool:
        old, new = domains.crowding(before), domains.crowding(after)
        return new[0] <= old[0] and new[1] <= old[1]

    def best_target(rs: list[int], i: int) -> int | None:
        """The server to take replica `i` of `rs`: a new rack, a new host, then the least loaded (None
        when every eligible server already holds one)."""
        others = rs[:i] + rs[i + 1 :]
        racks, hosts = domains.racks(others), domains.hosts(others)
        return min(
            (s for s in eligible if s not in rs),
            default=None,
            key=lambda s: (
                domains.rack is not None and domains.rack_of(s) in racks,
                domains.host_of(s) in hosts,
                load[s],
                s,
            ),
        )

    # 1. replicas leave drained servers
    for p in placements:
        rs = replicas[p.key]
        for i, r in enumerate(rs):
            if r in drained:
                target = best_target(rs, i)
                assert target is not None  # eligible servers outnumber every bucket's replicas
                rs[i] = target
                load[target] += 1
    # 1b. replicas that share a host (always) or a rack (RACK_AWARE) move apart where servers allow
    if domains.host:
        for p in placements:
            rs = replicas[p.key]
            for _ in range(len(rs)):
                crowded = _crowded_replica(domains, rs, p.leader, racks=rack_aware)
                if crowded is None:
                    break
                target = best_target(rs, crowded)
                if target is None:
                    break
                candidate = [*rs[:crowded], target, *rs[crowded + 1 :]]
                if not _spreads(domains.crowding(rs), domains.crowding(candidate), rack_aware):
                    break  # no server would spread it further
                if rs[crowded] in load:
                    load[rs[crowded]] -= 1
                rs[crowded] = target
                load[target] += 1
    # 2. the fullest server hands replicas to the emptiest until all are within one of each other
    if GoalType.REPLICA_DISTRIBUTION in goals:
        for _ in range(sum(len(rs) for rs in replicas.values())):
            found = _distribution_move(eligible, load, placements, replicas, no_worse)
            if found is None:
                break
            key, fullest, emptiest = found
            rs = replicas[key]
            rs[rs.index(fullest)] = emptiest
            load[fullest] -= 1
            load[emptiest] += 1
    # 3. leaders: keep the current one when it stays, otherwise the first remaining replica
    leaders: dict[BucketKey, int] = {}
    for p in placements:
        rs = replicas[p.key]
        leaders[p.key] = p.leader if p.leader in rs else rs[0]
    if GoalType.LEADER_DISTRIBUTION in goals:
        led = Counter({s: 0 for s in eligible})
        led.update(leaders.values())
        ceiling = -(-len(placements) // len(eligible))
        for _ in range(len(placements)):
            over = max(eligible, key=lambda s: (led[s], -s))
            if led[over] <= ceiling and led[over] - min(led[s] for s in eligible) <= 1:
                break
            best: tuple[BucketKey, int] | None = None
            for p in placements:
                if leaders[p.key] != over:
                    continue
                for r in replicas[p.key]:
                    if r != over and led[r] + 1 < led[over] and (best is None or led[r] < led[best[1]]):
                        best = (p.key, r)
            if best is None:
                break
            leaders[best[0]] = best[1]
            led[over] -= 1
            led[best[1]] += 1
    moves: list[BucketMove] = []
    for p in placements:
        leader = leaders[p.key]
        new = (leader, *(r for r in replicas[p.key] if r != leader))
        if set(new) != set(p.replicas) or leader != p.leader:
            moves.append(BucketMove(p.key, p.replicas, new, p.leader, leader))
    moves.sort(key=lambda m: not m.moves_replicas)
    return moves


def _check_racks(domains: Domains, eligible: Sequence[int], replication_factor: int) -> None:
    if domains.rack is None:
        missing = list(domains.unracked) or list(eligible)
        raise RebalanceImpossible(
            f"the RACK_AWARE goal needs tablet-server.rack on every tablet server; {missing} have none"
        )
    racks = len(domains.racks(eligible))
    if replication_factor > racks:
        raise RebalanceImpossible(
            f"insufficient number of racks to distribute each replica (current: {racks}, needed: "
            f"{replication_factor})"
        )


def _spreads(before: tuple[int, int], after: tuple[int, int], racks: bool) -> bool:
    """Whether a replica move spreads a bucket: fewer replicas sharing a rack (with RACK_AWARE), or
    sharing a host without crowding a rack more."""
    if racks and after[0] != before[0]:
        return after[0] < before[0]
    return after[1] < before[1] and after[0] <= before[0]


def _crowded_replica(domains: Domains, rs: list[int], leader: int | None, racks: bool) -> int | None:
    """The index of a replica sharing a rack (when `racks`) or host with an earlier one, followers
    first so that leadership stays put; None when the bucket is spread."""
    seen_racks: set[str] = set()
    seen_hosts: set[str] = set()
    crowded = []
    order = sorted(range(len(rs)), key=lambda i: rs[i] != leader)  # the leader keeps its place
    for i in order:
        rack = domains.rack_of(rs[i]) if racks and domains.rack is not None else None
        host = domains.host_of(rs[i])
        if (rack is not None and rack in seen_racks) or host in seen_hosts:
            crowded.append(i)
        if rack is not None:
            seen_racks.add(rack)
        seen_hosts.add(host)
    return crowded[0] if crowded else None


def _distribution_move(
    eligible: Sequence[int],
    load: Counter[int],
    placements: Sequence[Placement],
    replicas: dict[BucketKey, list[int]],
    allowed: Callable[[Sequence[int], Sequence[int]], bool],
) -> tuple[BucketKey, int, int] | None:
    """One replica from a fuller server to an emptier one (more than one apart), the most unequal pair
    first, that does not crowd a rack or host; None when there is none."""
    by_load = sorted(eligible, key=lambda s: (load[s], s))
    for fullest in reversed(by_load):
        for emptiest in by_load:
            if load[fullest] - load[emptiest] <= 1:
                break
            # prefer a bucket the fullest server follows, so the move does not take a leader away
            candidates = sorted(
                (p for p in placements if fullest in replicas[p.key] and emptiest not in replicas[p.key]),
                key=lambda p: p.leader == fullest,
            )
            for p in candidates:
                rs = replicas[p.key]
                moved = [emptiest if r == fullest else r for r in rs]
                if allowed(rs, moved):
                    return p.key, fullest, emptiest
    return None
