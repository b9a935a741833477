"""Rack-aware placement on a real cluster: servers registered with `tablet-server.rack` get no bucket
with two replicas in one rack, and the RACK_AWARE rebalance goal is accepted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from failover_workload import create_table
from harness import Cluster

from strom.client import Connection
from strom.common.rebalance import GoalType

RACKS = {0: "rack-a", 1: "rack-a", 2: "rack-b"}


def test_new_buckets_span_racks_and_the_rack_aware_goal_is_accepted(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, tablet_servers=3)
    for server_id, rack in RACKS.items():
        server = cluster.tablet_servers[server_id]
        server.config = {**server.config, "tablet-server.rack": rack}
    cluster.start()
    try:
        # round-robin over sorted ids (the placement before racks counted) gives (0, 1) to a third
        asyncio.run(create_table(cluster.bootstrap, "events", buckets=6, replication=2))

        async def check() -> None:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                admin = conn.get_admin()
                state = await admin.describe_cluster()
                assert {s.id: s.rack for s in state.servers if s.role == "tablet-server"} == RACKS
                buckets = [b for t in state.tables for b in t.buckets]
                assert len(buckets) == 6
                for bucket in buckets:
                    assert {RACKS[r] for r in bucket.replicas} == {"rack-a", "rack-b"}, buckets
                # already rack-aware: the goal is accepted and plans no move
                progress = await admin.list_rebalance_progress(await admin.rebalance([GoalType.RACK_AWARE]))
                assert progress is not None and progress.status == "COMPLETED", progress
                assert progress.buckets == [], progress

        asyncio.run(check())
    finally:
        cluster.stop()
