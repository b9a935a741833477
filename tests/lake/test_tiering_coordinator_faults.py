"""The tiering service keeps tiering when its coordinator goes away: through a proxy that cuts the
connection right after every lake commit's answer (so the round's report finds no coordinator), and
through ten coordinator SIGKILLs while rounds run. The lake catches up and holds each row once, read
back with pyiceberg (and DuckDB). Both tests share one cluster and one workload."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
from coordinator_proxy import CuttingProxy
from harness import Cluster
from test_tiering_service import Workload, create_tables, lake_config, session, wait_until_lake_matches

from strom.common.supervision import FATAL_EXIT_CODE
from strom.rpc.api import ApiKey
from strom.server.launcher import free_port


class Setup:
    def __init__(self, cluster: Cluster, config: dict[str, str], base: Path) -> None:
        self.cluster = cluster
        self.config = config
        self.base = base
        self.workload = Workload(events_per_write=200)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("tiering-coordinator-faults")
    config = lake_config(base)
    # a job whose report was lost is fenced after 3 s, and its table queued again
    cluster = Cluster(
        base, config={**config, "lake.tiering.job-timeout": "3s", "kv.snapshot.interval": "1s"}
    ).start()
    try:
        session(cluster, create_tables)
        yield Setup(cluster, config, base)
    finally:
        cluster.stop()


def start_tiering(bootstrap: str, config: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "strom", "tiering", "--bootstrap", bootstrap, "--runner", "local"]
    args += ["--poll-interval", "0.3"]
    for key, value in config.items():
        args += ["--config", f"{key}={value}"]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def stop(service: subprocess.Popen[bytes]) -> None:
    service.send_signal(signal.SIGTERM)
    try:
        service.wait(30)
    except subprocess.TimeoutExpired:
        service.kill()
        service.wait()


def lake_commits(base: Path) -> list[tuple[str, str]]:
    """Each lake table's current metadata file, from the SQLite Iceberg catalog (changes on a commit)."""
    with contextlib.closing(sqlite3.connect(f"file:{base}/iceberg_catalog.db?mode=ro", uri=True)) as db:
        return sorted(db.execute("SELECT table_name, metadata_location FROM iceberg_tables").fetchall())


def took_a_table(log: Path) -> Callable[[], bool]:
    taken = log.read_text().count("tiering fluss.")
    return lambda: log.read_text().count("tiering fluss.") > taken


def committed_to_the_lake(base: Path) -> Callable[[], bool]:
    before = lake_commits(base)
    return lambda: lake_commits(base) != before


def wait_for(condition: Callable[[], bool], service: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the tiering service made no progress"
        assert service.poll() is None, log.read_text()[-3000:]
        time.sleep(0.02)


class Proxies:
    """A proxy in front of each server, on an event loop of its own (the test's calls block); the one in
    front of the coordinator cuts after every CommitLakeTableSnapshot answer."""

    def __init__(self, cluster: Cluster) -> None:
        rewrite: dict[tuple[str, int], int] = {}
        c = cluster.coordinator
        self.coordinator = CuttingProxy(c.host, c.port, ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT, 1.0, rewrite)
        self.all = [self.coordinator] + [
            CuttingProxy(s.host, s.port, rewrite=rewrite) for s in cluster.tablet_servers.values()
        ]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self.thread.start()
        for proxy in self.all:
            asyncio.run_coroutine_threadsafe(proxy.start(), self.loop).result(10)
        return self.coordinator

    def __exit__(self, *exc: object) -> None:
        for proxy in self.all:
            asyncio.run_coroutine_threadsafe(proxy.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_tiering_goes_on_when_every_commit_answer_is_followed_by_a_cut(
    setup: Setup, duck: duckdb.DuckDBPyConnection
) -> None:
    log = setup.base / "tiering-proxy.log"
    with Proxies(setup.cluster) as proxy:
        service = start_tiering(proxy.address, setup.config, log)
        try:
            for _ in range(3):
                session(setup.cluster, setup.workload.write)
                wait_until_lake_matches(setup.config, duck, setup.workload, timeout=60)
            assert service.poll() is None, log.read_text()[-3000:]
        finally:
            stop(service)
    text = log.read_text()
    # every round that committed had its connection cut after the answer, and the report that
    # followed found no coordinator
    assert proxy.cuts >= 3
    assert proxy.refused >= 1
    assert "LAKE_TIERING_HEARTBEAT: coordinator unreachable" in text


def test_tiering_goes_on_through_ten_coordinator_kills(setup: Setup, duck: duckdb.DuckDBPyConnection) -> None:
    cluster = setup.cluster
    log = setup.base / "tiering-kills.log"
    log.touch()
    service = start_tiering(cluster.bootstrap, setup.config, log)
    try:
        for kill in range(10):
            session(cluster, setup.workload.write)
            # even kills: while a round runs (it took a table, then a little more); odd kills: the
            # moment a lake commit lands, between it and the round's reports to the coordinator
            if kill % 2 == 0:
                wait_for(took_a_table(log), service, log)
                time.sleep((kill % 4) * 0.1)
            else:
                wait_for(committed_to_the_lake(setup.base), service, log)
            cluster.restart_coordinator(kill=True)
            cluster.wait_for_tablet_servers()
        session(cluster, setup.workload.write)
        wait_until_lake_matches(setup.config, duck, setup.workload, timeout=90)
        assert service.poll() is None, log.read_text()[-3000:]
    finally:
        stop(service)
    assert "coordinator unreachable" in log.read_text()


def test_strom_tiering_exits_non_zero_when_it_cannot_go_on(tmp_path: Path) -> None:
    """With no cluster to reach at all, run() ends with the error: the process exits 70 (not a process
    that stays up and tiers nothing), so that whatever runs it starts it again."""
    log = tmp_path / "tiering.log"
    service = start_tiering(f"127.0.0.1:{free_port()}", lake_config(tmp_path), log)
    try:
        assert service.wait(60) == FATAL_EXIT_CODE
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
    text = log.read_text()
    assert "tiering service cannot go on" in text
    assert "Failed to initialize the connection to the bootstrap servers" in text
