"""The rebalance planner: fair replica and leader counts, drained servers emptied, few moves."""

from __future__ import annotations

from collections import Counter

import pytest

from strom.common.rebalance import BucketKey, BucketMove, Placement, RebalanceImpossible, plan_rebalance


def placements(layout: list[tuple[int, ...]], table_id: int = 1) -> list[Placement]:
    return [Placement((table_id, None, b), replicas, replicas[0]) for b, replicas in enumerate(layout)]


def after(
    before: list[Placement], moves: list[BucketMove]
) -> dict[BucketKey, tuple[tuple[int, ...], int | None]]:
    result = {p.key: (p.replicas, p.leader) for p in before}
    for m in moves:
        assert result[m.key] == (m.original_replicas, m.original_leader)
        result[m.key] = (m.new_replicas, m.new_leader)
    return result


def counts(
    result: dict[BucketKey, tuple[tuple[int, ...], int | None]],
) -> tuple[Counter[int], Counter[int | None]]:
    replicas = Counter(r for rs, _ in result.values() for r in rs)
    leaders = Counter(leader for _, leader in result.values())
    return replicas, leaders


def test_a_new_server_gets_its_share_of_replicas_and_leaders() -> None:
    before = placements([(0, 1), (1, 0)] * 6)  # 12 buckets, RF 2, on servers 0 and 1
    moves = plan_rebalance(before, [0, 1, 2])
    result = after(before, moves)
    replicas, leaders = counts(result)
    assert sorted(replicas.values()) == [8, 8, 8]
    assert sorted(leaders.values()) == [4, 4, 4]
    for rs, leader in result.values():
        assert len(set(rs)) == 2 and rs[0] == leader  # distinct replicas, the leader first
    # only what must move moves: server 2 receives 8 replicas, so 8 replica moves at most
    assert sum(len(m.added) for m in moves) == 8
    # replica moves come before leader-only moves
    kinds = [m.moves_replicas for m in moves]
    assert kinds == sorted(kinds, reverse=True)


def test_a_balanced_cluster_needs_no_moves() -> None:
    before = placements([(0, 1), (1, 2), (2, 0)] * 3)
    assert plan_rebalance(before, [0, 1, 2]) == []


def test_a_drained_server_is_emptied() -> None:
    before = placements([(0, 1), (1, 2), (2, 0), (2, 1)])
    result = after(before, plan_rebalance(before, [0, 1, 2], drained=[2]))
    replicas, leaders = counts(result)
    assert 2 not in replicas and 2 not in leaders
    assert sorted(replicas.values()) == [4, 4]


def test_a_leaderless_bucket_stays_where_it_is() -> None:
    before = [Placement((1, None, 0), (0, 1), None), *placements([(0, 1)] * 3)[1:]]
    moves = plan_rebalance(before, [0, 1, 2], drained=[0])
    assert all(m.key != (1, None, 0) for m in moves)


def test_partitions_are_buckets_of_their_own() -> None:
    before = [Placement((1, p, b), (0,), 0) for p in (10, 11) for b in range(2)]
    result = after(before, plan_rebalance(before, [0, 1]))
    replicas, leaders = counts(result)
    assert replicas == Counter({0: 2, 1: 2}) and leaders == Counter({0: 2, 1: 2})


def test_too_few_servers_for_the_replication_factor_is_refused() -> None:
    with pytest.raises(RebalanceImpossible, match="only 1 tablet server"):
        plan_rebalance(placements([(0, 1)]), [0, 1], drained=[1])
