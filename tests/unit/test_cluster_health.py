"""GetClusterHealth's status from the coordinator's bucket view: RED without a live leader, YELLOW
with a replica out of the ISR, GREEN otherwise (Fluss's rule and counts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.cluster_health import get_cluster_health


def _health(buckets: list[tuple[int | None, list[int], list[int]]], live: list[int]) -> Any:
    rows = [SimpleNamespace(leader=leader, replicas=replicas, isr=isr) for leader, replicas, isr in buckets]
    coordinator = SimpleNamespace(
        store=SimpleNamespace(list_buckets=lambda: rows),
        membership=SimpleNamespace(live_ids=lambda: live),
    )
    return asyncio.run(get_cluster_health(coordinator, pb.GetClusterHealthRequest(), None))  # type: ignore[arg-type]


def test_status_and_counts() -> None:
    green = _health([(1, [1, 2], [1, 2]), (2, [2, 1], [2, 1])], live=[1, 2])
    assert (green.status, green.num_replicas, green.in_sync_replicas) == (0, 4, 4)
    assert green.num_leader_replicas == green.active_leader_replicas == 2
    yellow = _health([(1, [1, 2], [1]), (2, [2, 1], [2, 1])], live=[1, 2])
    assert (yellow.status, yellow.in_sync_replicas) == (1, 3)
    # a leader that is not a live server, or none at all, is not active
    red = _health([(3, [3, 1], [3, 1]), (None, [2], [2]), (2, [2], [2])], live=[1, 2])
    assert (red.status, red.num_leader_replicas, red.active_leader_replicas) == (2, 3, 1)
    assert _health([], live=[]).status == 0
