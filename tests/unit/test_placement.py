"""Rack- and host-aware replica placement and rebalance, over many server layouts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strom.common.placement import Domains, ServerLocation, place_replicas
from strom.common.rebalance import GoalType, Placement, RebalanceImpossible, plan_rebalance


def layout(rng: random.Random, racked: bool) -> list[ServerLocation]:
    """1-4 racks of 1-3 hosts of 1-3 servers each (a host sits in one rack)."""
    servers: list[ServerLocation] = []
    for rack in range(rng.randint(1, 4)):
        for host in range(rng.randint(1, 3)):
            for _ in range(rng.randint(1, 3)):
                rack_name = f"r{rack}" if racked else None
                servers.append(ServerLocation(len(servers), f"10.0.{rack}.{host}", rack_name))
    return servers


def spread(servers: list[ServerLocation], replicas: tuple[int, ...]) -> tuple[int, int]:
    by_id = {s.server_id: s for s in servers}
    return len({by_id[r].rack for r in replicas}), len({by_id[r].host for r in replicas})


@pytest.mark.parametrize("racked", [True, False])
def test_new_buckets_never_share_a_rack_or_host_when_the_layout_allows(racked: bool) -> None:
    rng = random.Random(25 + racked)
    for _ in range(300):
        servers = layout(rng, racked)
        rf = rng.randint(1, min(4, len(servers)))
        buckets = rng.randint(1, 24)
        placed = place_replicas(buckets, rf, servers, start=rng.randrange(len(servers)))
        racks = len({s.rack for s in servers})
        hosts = len({s.host for s in servers})
        assert len(placed.replicas) == buckets
        for replicas in placed.replicas:
            assert len(set(replicas)) == rf, (servers, replicas)
            rack_count, host_count = spread(servers, replicas)
            if racked:
                assert rack_count == min(rf, racks), (servers, replicas)
            assert host_count == min(rf, hosts), (servers, replicas)
        # leaders go round-robin; every server's replica count stays near the mean
        leaders = Counter(replicas[0] for replicas in placed.replicas)
        if buckets >= len(servers):
            assert max(leaders.values()) - min(leaders[s.server_id] for s in servers) <= 1
        # (uneven racks or hosts cannot be: a rack's only server holds a replica of most buckets)
        even = all(
            len(set(Counter(domain).values())) == 1
            for domain in ([s.rack for s in servers], [s.host for s in servers])
        )
        if even and buckets % len(servers) == 0:
            load = Counter(r for replicas in placed.replicas for r in replicas)
            assert max(load.values()) - min(load[s.server_id] for s in servers) <= rf, (servers, placed)
        # what cannot be kept apart is said
        said = " ".join(placed.warnings)
        assert ("racks" in said) == (racked and rf > racks)
        assert ("hosts" in said) == (rf > hosts > 1)


def test_servers_on_one_host_spread_over_hosts_first() -> None:
    # two hosts running three processes each (one per core): no bucket keeps two replicas on a host
    servers = [ServerLocation(i, f"host{i % 2}") for i in range(6)]
    placed = place_replicas(12, 2, servers, start=0)
    assert all(len({r % 2 for r in replicas}) == 2 for replicas in placed.replicas)
    assert placed.warnings == []
    assert sorted(Counter(r for rs in placed.replicas for r in rs).values()) == [4] * 6


def test_racks_are_ignored_with_a_warning_while_some_servers_have_none() -> None:
    servers = [ServerLocation(0, "a", "r0"), ServerLocation(1, "b", "r0"), ServerLocation(2, "c")]
    assert Domains.of(servers).rack is None
    placed = place_replicas(3, 2, servers, start=0)
    assert any("[2] have no tablet-server.rack" in w for w in placed.warnings)
    assert all(len(set(rs)) == 2 for rs in placed.replicas)


def test_rebalance_separates_replicas_that_share_a_rack_and_keeps_them_apart() -> None:
    servers = [ServerLocation(i, f"h{i}", f"r{i // 2}") for i in range(6)]  # 3 racks of 2
    # placed without regard to racks: every bucket has both replicas in rack r0 or r1
    before = [Placement((1, None, b), (b % 4, b % 4 ^ 1), b % 4) for b in range(8)]
    goals = [GoalType.RACK_AWARE, GoalType.REPLICA_DISTRIBUTION, GoalType.LEADER_DISTRIBUTION]
    moves = plan_rebalance(before, range(6), goals=goals, locations=servers)
    after = {p.key: p.replicas for p in before} | {m.key: m.new_replicas for m in moves}
    for replicas in after.values():
        assert len({r // 2 for r in replicas}) == 2, after
    load = Counter(r for rs in after.values() for r in rs)
    assert max(load.values()) - min(load[s] for s in range(6)) <= 1
    # without RACK_AWARE the shared racks stay, but no move crowds a rack that was spread
    spread_before = [Placement((1, None, b), (b % 3, 3 + b % 3), b % 3) for b in range(9)]
    moves = plan_rebalance(spread_before, range(6), locations=servers)
    for m in moves:
        assert len({r // 2 for r in m.new_replicas}) >= len({r // 2 for r in m.original_replicas})


def test_rebalance_always_separates_replicas_sharing_a_host() -> None:
    servers = [ServerLocation(i, f"h{i // 2}") for i in range(4)]  # two hosts, two servers each
    before = [Placement((1, None, b), (0, 1), 0) for b in range(2)] + [
        Placement((1, None, 2 + b), (2, 3), 2) for b in range(2)
    ]
    moves = plan_rebalance(before, range(4), locations=servers)
    after = {p.key: p.replicas for p in before} | {m.key: m.new_replicas for m in moves}
    assert all(len({r // 2 for r in rs}) == 2 for rs in after.values()), after
    # one host, every server holding a replica: nothing to separate, nothing to do
    one_host = [ServerLocation(i, "h") for i in range(3)]
    assert plan_rebalance([Placement((1, None, 0), (0, 1, 2), 0)], range(3), locations=one_host) == []


def test_rack_aware_goal_is_refused_when_racks_are_too_few_or_missing() -> None:
    before = [Placement((1, None, 0), (0, 1, 2), 0)]
    two_racks = [ServerLocation(i, f"h{i}", f"r{i % 2}") for i in range(3)]
    with pytest.raises(RebalanceImpossible, match=r"racks .*current: 2, needed: 3"):
        plan_rebalance(before, range(3), goals=[GoalType.RACK_AWARE], locations=two_racks)
    unracked = [ServerLocation(i, f"h{i}", "r0" if i else None) for i in range(3)]
    with pytest.raises(RebalanceImpossible, match=r"\[0\] have none"):
        plan_rebalance(before, range(3), goals=[GoalType.RACK_AWARE], locations=unracked)
