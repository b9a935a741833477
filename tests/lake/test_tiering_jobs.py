"""Several tiering services against one cluster, as Fluss runs several tiering jobs: the coordinator
hands each lake-enabled table to one job at a time (a new tiering epoch per hand-over), and a job
SIGKILLed in the middle of a round loses its table to the other job once the job timeout passes."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import duckdb
from harness import Cluster
from test_tiering_service import (
    Workload,
    create_tables,
    lake_config,
    session,
    start_tiering,
    wait_until_lake_matches,
)

ROUND_START = re.compile(r"tiering (\S+) \(table id (\d+), tiering epoch (\d+)\)")


def rounds(log: Path) -> list[tuple[str, int]]:
    """(table, epoch) of every round a service's log says it started."""
    return [(m[1], int(m[3])) for m in ROUND_START.finditer(log.read_text())]


def test_two_tiering_services_share_tables_and_take_over_from_a_killed_one(
    cluster_factory: Any, tmp_path: Path, duck: duckdb.DuckDBPyConnection
) -> None:
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={**config, "lake.tiering.job-timeout": "3s", "kv.snapshot.interval": "1s"}
    )
    session(cluster, create_tables)
    workload = Workload()
    logs = [tmp_path / "tiering-a.log", tmp_path / "tiering-b.log"]
    services = [
        start_tiering(cluster, config, log, name) for log, name in zip(logs, ("job-a", "job-b"), strict=True)
    ]
    try:
        for _ in range(3):
            session(cluster, workload.write)
            wait_until_lake_matches(config, duck, workload)
        # both jobs tiered, and no (table, epoch) was ever handed to both: one job per table at a time
        a, b = rounds(logs[0]), rounds(logs[1])
        assert a and b, (a, b)
        assert not set(a) & set(b)
        # each names itself in what it took and released
        assert "taken by job job-a" in logs[0].read_text() and "by job job-b: finished" in logs[1].read_text()

        # SIGKILL job A in the middle of a big round of fluss.events
        workload.events_per_write = 1_000_000
        session(cluster, workload.write)
        workload.events_per_write = 500
        deadline = time.monotonic() + 60
        while True:
            text = logs[0].read_text()
            started, ended = text.rfind("tiering fluss.events ("), text.rfind("tiered fluss.events")
            if started > ended:
                break
            assert time.monotonic() < deadline, "job A never started a round of fluss.events"
            time.sleep(0.01)
        services[0].send_signal(signal.SIGKILL)
        services[0].wait()
        held_by_a = rounds(logs[0])[-1]
        killed_at = time.monotonic()
        session(cluster, workload.write)
        wait_until_lake_matches(config, duck, workload, timeout=90)
        # the coordinator fenced A's round after the job timeout, and B tiered the table after it
        coordinator_log = "".join(p.read_text() for p in (cluster.base_dir / "logs").glob("coordinator*.log"))
        assert re.search(r"tiering job job-a \(127\.0\.0\.1:\d+\) of table 0 timed out", coordinator_log)
        later = [r for r in rounds(logs[1]) if r[0] == "fluss.events" and r[1] > held_by_a[1]]
        assert later, rounds(logs[1])
        assert time.monotonic() - killed_at < 90
    finally:
        for service in services:
            if service.poll() is None:
                service.send_signal(signal.SIGTERM)
                service.wait(30)
