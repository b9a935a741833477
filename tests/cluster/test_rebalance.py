"""Rebalance as an operator runs it: a third tablet server joins a running cluster, `strom rebalance`
moves replicas and leaders to it while the official client writes with acks=all, nothing is lost; a
rebalance interrupted by a SIGKILLed coordinator finishes under the next one; `--remove-server` drains."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from failover_workload import AckedWriter, create_table, lookup_missing, read_log_ids, rows, wait_for
from harness import Cluster, run_pyfluss

from strom.client import Connection
from strom.common.errors import RebalanceFailureError
from strom.common.rebalance import GoalType

LOG_TABLE, PK_TABLE = "events", "accounts"
BUCKETS = 4
# Server 2 is frozen while `strom rebalance` plans: its session must outlast the CLI's start on a loaded
# machine, or the coordinator drops it and the plan has no moves (the harness's 2 s did not always).
FROZEN_SESSION_TIMEOUT = "20s"


def strom(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "strom", *args], capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"strom {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def status(cluster: Cluster) -> dict[str, Any]:
    return json.loads(strom("status", "--bootstrap", cluster.bootstrap, "--json").stdout)


def tablet_servers(state: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {s["id"]: s for s in state["servers"] if s["role"] == "tablet-server"}


def two_servers_then_a_third(tmp_path: Path, session_timeout: str | None = None) -> Cluster:
    config = {"tablet-server.session.timeout": session_timeout} if session_timeout else None
    cluster = Cluster(tmp_path, tablet_servers=3, config=config)
    cluster.start_coordinator()
    for server_id in (0, 1):
        cluster.tablet_servers[server_id].start()
    cluster.wait_for_tablet_servers({0, 1})
    return cluster


def test_a_new_server_takes_its_share_while_pyfluss_writes_and_a_drained_one_gives_it_back(
    tmp_path: Path,
) -> None:
    cluster = two_servers_then_a_third(tmp_path)
    try:
        asyncio.run(create_table(cluster.bootstrap, LOG_TABLE, buckets=BUCKETS, replication=2))
        asyncio.run(
            create_table(cluster.bootstrap, PK_TABLE, primary_key=True, buckets=BUCKETS, replication=2)
        )
        log_writer = AckedWriter(cluster.bootstrap, LOG_TABLE).start()
        pk_writer = AckedWriter(cluster.bootstrap, PK_TABLE, primary_key=True).start()

        cluster.start_tablet_server(2)
        cluster.wait_for_tablet_servers({0, 1, 2})
        assert tablet_servers(status(cluster))[2]["replicas"] == 0  # a new server gets nothing by itself

        plan = json.loads(strom("rebalance", "--bootstrap", cluster.bootstrap, "--dry-run", "--json").stdout)
        assert plan and any(2 in move["new_replicas"] for move in plan)
        assert tablet_servers(status(cluster))[2]["replicas"] == 0  # a dry run changes nothing

        acks_before = len(log_writer.acks)
        done = json.loads(strom("rebalance", "--bootstrap", cluster.bootstrap, "--json").stdout)
        assert done["status"] == "COMPLETED", done
        assert all(b["status"] == "COMPLETED" for b in done["buckets"])
        assert len(log_writer.acks) > acks_before  # the writers kept going during the moves

        state = status(cluster)
        servers = tablet_servers(state)
        assert {s["replicas"] for s in servers.values()} == {2 * 2 * BUCKETS // 3, 2 * 2 * BUCKETS // 3 + 1}
        assert servers[2]["leaders"] >= 2 and all(s["leaders"] >= 2 for s in servers.values())
        for table in state["tables"]:
            for bucket in table["buckets"]:
                assert len(bucket["replicas"]) == 2 and bucket["leader"] in bucket["replicas"]
        assert state["rebalance"]["status"] == "COMPLETED"

        # drain server 2 again: it ends with no replicas and no bucket directories
        log_writer.wait_for_acks(len(log_writer.acks) + 5)
        done = json.loads(
            strom("rebalance", "--bootstrap", cluster.bootstrap, "--remove-server", "2", "--json").stdout
        )
        assert done["status"] == "COMPLETED", done
        servers = tablet_servers(status(cluster))
        assert servers[2]["replicas"] == 0 and servers[2]["tag"] == "PERMANENT_OFFLINE"
        assert not list((tmp_path / "tablet-server-2").rglob("bucket-*"))

        log_writer.wait_for_acks(len(log_writer.acks) + 5)
        acked_log, acked_pk = log_writer.stop(), pk_writer.stop()
        ids = asyncio.run(read_log_ids(cluster.bootstrap, LOG_TABLE, BUCKETS))
        assert set(acked_log) <= set(ids), f"lost {sorted(set(acked_log) - set(ids))[:20]}"
        assert len(ids) == len(set(ids)), "rows were written twice"
        assert asyncio.run(lookup_missing(cluster.bootstrap, PK_TABLE, acked_pk)) == []
    finally:
        cluster.stop()


def test_a_rebalance_interrupted_by_a_coordinator_kill_finishes_under_the_next_one(tmp_path: Path) -> None:
    cluster = two_servers_then_a_third(tmp_path, FROZEN_SESSION_TIMEOUT)
    try:
        asyncio.run(create_table(cluster.bootstrap, LOG_TABLE, buckets=BUCKETS, replication=2))

        async def write(conn: Any) -> None:
            import fluss

            table = await conn.get_table(fluss.TablePath("fluss", LOG_TABLE))
            writer = table.new_append().create_writer()
            writer.write_arrow(rows(0, 5000))
            await writer.flush()

        run_pyfluss(cluster.bootstrap, write)
        cluster.start_tablet_server(2)
        cluster.wait_for_tablet_servers({0, 1, 2})
        # Server 2 is frozen, so its new replicas cannot catch up: the rebalance stays in progress
        new_server = cluster.tablet_servers[2].process
        assert new_server is not None
        os.kill(new_server.pid, signal.SIGSTOP)
        try:
            strom("rebalance", "--bootstrap", cluster.bootstrap, "--no-wait")

            async def progress() -> Any:
                async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                    return await conn.get_admin().list_rebalance_progress()

            started = asyncio.run(progress())
            assert started.status == "REBALANCING"
            time.sleep(1)
            cluster.restart_coordinator(kill=True)
        finally:
            os.kill(new_server.pid, signal.SIGCONT)
        wait_for(lambda: asyncio.run(progress()).finished, timeout=90, what="the rebalance to finish")
        finished = asyncio.run(progress())
        assert finished.rebalance_id == started.rebalance_id and finished.status == "COMPLETED"
        servers = tablet_servers(status(cluster))
        assert servers[2]["leaders"] >= 1 and servers[2]["replicas"] >= 2
        assert asyncio.run(read_log_ids(cluster.bootstrap, LOG_TABLE, BUCKETS)) == list(range(5000))
    finally:
        cluster.stop()


def test_replacing_a_dead_server_with_remove_server(tmp_path: Path) -> None:
    """The runbook for a server that is gone for good: start a replacement, drain the dead one."""
    cluster = two_servers_then_a_third(tmp_path)
    try:
        asyncio.run(create_table(cluster.bootstrap, LOG_TABLE, buckets=BUCKETS, replication=2))
        writer = AckedWriter(cluster.bootstrap, LOG_TABLE).start()
        writer.wait_for_acks(20)
        cluster.kill_tablet_server(1)
        cluster.wait_for_tablet_servers({0})
        cluster.start_tablet_server(2)
        cluster.wait_for_tablet_servers({0, 2})
        dead = tablet_servers(status(cluster))[1]
        assert not dead["alive"] and dead["replicas"] == BUCKETS

        async def rack_aware() -> None:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                await conn.get_admin().rebalance([GoalType.RACK_AWARE])

        with pytest.raises(RebalanceFailureError, match=r"RACK_AWARE goal needs tablet-server\.rack"):
            asyncio.run(rack_aware())

        done = json.loads(
            strom("rebalance", "--bootstrap", cluster.bootstrap, "--remove-server", "1", "--json").stdout
        )
        assert done["status"] == "COMPLETED", done
        state = status(cluster)
        for bucket in state["tables"][0]["buckets"]:
            assert sorted(bucket["replicas"]) == [0, 2] and sorted(bucket["isr"]) == [0, 2]
        acked = writer.stop()
        ids = asyncio.run(read_log_ids(cluster.bootstrap, LOG_TABLE, BUCKETS))
        assert acked <= set(ids) and len(ids) == len(set(ids))
    finally:
        cluster.stop()


def test_a_cancelled_rebalance_stays_cancelled(tmp_path: Path) -> None:
    cluster = two_servers_then_a_third(tmp_path, FROZEN_SESSION_TIMEOUT)
    try:
        asyncio.run(create_table(cluster.bootstrap, LOG_TABLE, buckets=BUCKETS, replication=2))
        cluster.start_tablet_server(2)
        cluster.wait_for_tablet_servers({0, 1, 2})
        new_server = cluster.tablet_servers[2].process
        assert new_server is not None
        os.kill(new_server.pid, signal.SIGSTOP)  # its new replicas cannot catch up: moves stay in flight
        try:
            strom("rebalance", "--bootstrap", cluster.bootstrap, "--no-wait")
            strom("rebalance", "--bootstrap", cluster.bootstrap, "--cancel")
        finally:
            os.kill(new_server.pid, signal.SIGCONT)

        async def progress() -> Any:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                return await conn.get_admin().list_rebalance_progress()

        # the moves that had started finish; the task, and the buckets never started, stay cancelled
        wait_for(lambda: all(b.status != "REBALANCING" for b in asyncio.run(progress()).buckets), timeout=60)
        time.sleep(1)
        cancelled = asyncio.run(progress())
        assert cancelled.status == "CANCELED"
        assert {b.status for b in cancelled.buckets} <= {"CANCELED", "COMPLETED"}
    finally:
        cluster.stop()
