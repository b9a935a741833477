"""More tiering on the Spark standalone cluster of `test_spark_cluster` (the same session-wide master and
2 workers; executors whose Python cannot import `strom`):

- Paimon: a log table and a primary-key table tiered by splits on the workers, a worker SIGKILLed while
  its executor runs a split of a big round, and the lake (read back with pypaimon) ends equal to Fluss,
  every record once.
- Two tiering services as two Spark applications on the cluster (each capped at 2 of its 4 cores, so
  both run at once) share four lake-enabled tables, each table held by one job at a time; `strom status`
  names the job — name, Spark application id, address — that holds each table; one service's driver
  SIGKILLed → its tables go to the other within the job timeout and the lake (pyiceberg and DuckDB)
  ends equal to Fluss, exactly once.

Both are `long` (`make test-long`): `make test` keeps the Iceberg kill test on the standalone cluster
(test_spark_cluster) and the Paimon and two-service runs in local mode (test_tiering_service,
test_tiering_jobs), which cover the same code in a third of the time.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import fluss
import pyarrow as pa
import pytest
from harness import Cluster
from test_spark_cluster import executors, get_json, kill_workers_mid_round, start_cluster_tiering
from test_tiering_service import (
    LOG_SCHEMA,
    Workload,
    create_tables,
    lake_config,
    lake_matches,
    lake_rows,
    session,
)

from strom.server.launcher import free_port
from strom.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.long

TAKEN = re.compile(r"tiering (\S+) \(table id (\d+), tiering epoch (\d+)\): taken by job (\S+)")
RELEASED = re.compile(r"released (\S+) \(table id (\d+), tiering epoch (\d+)\) by job (\S+): (\w+)")


def paimon_config(base: Path) -> dict[str, str]:
    return {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(base / "paimon"),
    }


def paimon_rows(config: dict[str, str], name: str, columns: list[str]) -> list[dict[str, Any]]:
    from pypaimon import CatalogFactory

    catalog = CatalogFactory.create(
        {"metastore": "filesystem", "warehouse": config["datalake.paimon.warehouse"]}
    )
    builder = catalog.get_table(f"fluss.{name}").new_read_builder().with_projection(columns)
    result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    return [] if result is None else result.to_pylist()


def paimon_matches(config: dict[str, str], workload: Workload) -> bool:
    events = sorted(r["id"] for r in paimon_rows(config, "events", ["id"]))
    accounts = paimon_rows(config, "accounts", ["id", "balance"])
    return (
        events == list(range(workload.next_id))
        and {r["id"]: r["balance"] for r in accounts} == workload.balances
        and len(accounts) == len(workload.balances)
    )


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def lake_offsets(cluster: Cluster, name: str) -> dict[int, int]:
    """Per-bucket offsets of the table's newest lake snapshot, as the coordinator records them."""

    async def read(connection: Any) -> dict[int, int]:
        snapshot = await connection.get_admin().get_latest_lake_snapshot(fluss.TablePath("fluss", name))
        return {b.bucket_id: o for b, o in snapshot.table_buckets_offset.items()}

    return session(cluster, read)


def test_paimon_log_and_pk_tables_on_standalone_survive_a_killed_worker(
    cluster_factory: Any, spark_standalone: StandaloneCluster, python_without_strom: Path, tmp_path: Path
) -> None:
    config = paimon_config(tmp_path)
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={**config, "lake.tiering.job-timeout": "5s", "kv.snapshot.interval": "1s"}
    )
    session(cluster, create_tables)
    workload = Workload()
    session(cluster, workload.write)
    log = tmp_path / "tiering.log"
    ui_port = free_port()
    service = start_cluster_tiering(
        cluster, config, spark_standalone.master_url, python_without_strom, ui_port, log, "tiering-paimon"
    )
    try:
        wait_for(lambda: paimon_matches(config, workload), 120, "the Paimon lake to equal Fluss")
        # both tables' splits ran on executors on the workers
        assert sum(e["totalTasks"] for e in executors(ui_port)) > 0
        text = log.read_text()
        assert "tiering fluss.events (" in text and "tiering fluss.accounts (" in text

        # SIGKILL a worker while its executor runs a split of a big round of the log table
        kill_workers_mid_round(
            spark_standalone,
            cluster,
            workload,
            log,
            ui_port,
            "tiering-paimon",
            lambda: wait_for(lambda: paimon_matches(config, workload), 120, "the Paimon lake to equal Fluss"),
        )
        # every record once: the lake's offsets cover exactly what was written
        assert sum(lake_offsets(cluster, "events").values()) == workload.next_id
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(60)
        while len(spark_standalone.workers) < 2:
            spark_standalone.add_worker(cores=2)
        spark_standalone.wait_for_workers(2)


EXTRA_TABLES = ("clicks", "views")


async def create_extra_tables(connection: Any) -> None:
    lake = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
    for name in EXTRA_TABLES:
        await connection.get_admin().create_table(
            fluss.TablePath("fluss", name),
            fluss.TableDescriptor(fluss.Schema(LOG_SCHEMA), bucket_count=2, properties=lake),
        )


class FourTables(Workload):
    """The events/accounts workload plus two more log tables, each with as many rows as events."""

    async def write(self, connection: Any) -> None:
        first = self.next_id
        await super().write(connection)
        ids = list(range(first, self.next_id))
        for name in EXTRA_TABLES:
            writer = (await connection.get_table(fluss.TablePath("fluss", name))).new_append().create_writer()
            writer.write_arrow(
                pa.table({"id": pa.array(ids, pa.int64()), "name": [f"{name}{i}" for i in ids]})
            )
            await writer.flush()


def four_tables_match(config: dict[str, str], duck: duckdb.DuckDBPyConnection, workload: Workload) -> bool:
    if not lake_matches(config, duck, workload):
        return False
    for name in EXTRA_TABLES:
        for rows in lake_rows(config, duck, name, ["id"])[:2]:  # pyiceberg, DuckDB
            if sorted(r["id"] for r in rows) != list(range(workload.next_id)):
                return False
    return True


def strom_status(cluster: Cluster) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "strom", "status", "--bootstrap", cluster.bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO strom\.tiering: "


def held_spans(log: Path, table: str) -> list[tuple[str, str]]:
    """(taken, released) log times of each round of `table` the job finished (times sort as text)."""
    text = log.read_text()
    taken = {int(m[4]): m[1] for m in re.finditer(STAMP + TAKEN.pattern, text, re.M) if m[2] == table}
    released = {int(m[4]): m[1] for m in re.finditer(STAMP + RELEASED.pattern, text, re.M) if m[2] == table}
    return [(taken[epoch], released[epoch]) for epoch in sorted(taken.keys() & released.keys())]


def held(log: Path) -> set[tuple[str, int]]:
    """(table, epoch) a service took and has not released, by its log."""
    text = log.read_text()
    taken = {(m[1], int(m[3])) for m in TAKEN.finditer(text)}
    return taken - {(m[1], int(m[3])) for m in RELEASED.finditer(text)}


def test_two_tiering_applications_on_standalone_share_tables_and_take_over(
    cluster_factory: Any,
    spark_standalone: StandaloneCluster,
    python_without_strom: Path,
    tmp_path: Path,
    duck: duckdb.DuckDBPyConnection,
) -> None:
    job_timeout = 6.0
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(
        tablet_servers=1,
        config={**config, "lake.tiering.job-timeout": f"{job_timeout:g}s", "kv.snapshot.interval": "1s"},
    )
    session(cluster, create_tables)
    session(cluster, create_extra_tables)
    workload = FourTables()
    names = ("tiering-a", "tiering-b")
    logs = {name: tmp_path / f"{name}.log" for name in names}
    services = {
        name: start_cluster_tiering(
            cluster, config, spark_standalone.master_url, python_without_strom, free_port(), logs[name], name
        )
        for name in names
    }
    try:
        # both applications run at once, each with its 2 cores: one executor on each worker
        def both_running() -> bool:
            apps = {a["name"]: a for a in spark_standalone.state()["activeapps"]}
            return all(n in apps and apps[n]["cores"] == 2 and apps[n]["state"] == "RUNNING" for n in names)

        wait_for(both_running, 120, "both tiering applications to get their cores")
        app_ids = {a["name"]: a["id"] for a in spark_standalone.state()["activeapps"] if a["name"] in names}
        for worker in spark_standalone.alive_workers():  # the master's view of them (and their UIs)
            running = {e["appid"] for e in get_json(f"{worker['webuiaddress']}/json/")["executors"]}
            assert set(app_ids.values()) <= running, (worker["id"], running)

        # `strom status` names each job with its Spark application id and address, and the table it
        # holds (or last held); both jobs take tables
        seen_holders: dict[str, set[str]] = {name: set() for name in names}
        held_now = 0
        for _ in range(2):
            session(cluster, workload.write)
            deadline = time.monotonic() + 120
            while not four_tables_match(config, duck, workload):
                assert time.monotonic() < deadline, "the lake never caught up with Fluss"
                for t in strom_status(cluster)["tiering"]:
                    if t["job"] is not None:  # the holder, or the last holder once the round ended
                        assert t["job"]["application_id"] == app_ids[t["job"]["name"]], t
                        assert t["job"]["address"].startswith("127.0.0.1:"), t
                        seen_holders[t["job"]["name"]].add(t["table"])
                    if t["state"] == "tiering":
                        assert t["job"] is not None and t["last_heartbeat_ms"], t
                        assert t["heartbeat_age_ms"] is not None, t
                        held_now += 1
                time.sleep(0.2)
        assert held_now, "never saw a table held by a job"
        status = strom_status(cluster)
        jobs = {j["name"]: j for j in status["tiering_jobs"]}
        assert set(jobs) == set(names), status["tiering_jobs"]
        assert {n: j["application_id"] for n, j in jobs.items()} == app_ids
        assert all(t["job"] is not None and t["job"]["name"] in names for t in status["tiering"])
        assert all(seen_holders.values()), seen_holders
        # the same for people: the Tiering table names each table's job, the jobs table lists both
        table = subprocess.run(
            [sys.executable, "-m", "strom", "status", "--bootstrap", cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "COLUMNS": "300"},
        ).stdout
        assert "Tiering jobs" in table
        assert re.search(r"tiering-[ab] \(app-[\d-]+\) at 127\.0\.0\.1:\d+", table), table
        for name in names:
            assert re.search(rf"{name} +│ {app_ids[name]} +│ 127\.0\.0\.1:\d+", table), table
        # each job logged what it took and released under its name; no (table, epoch) went to both
        rounds = {n: {(m[1], int(m[3])) for m in TAKEN.finditer(logs[n].read_text())} for n in names}
        assert all(rounds.values()) and not rounds["tiering-a"] & rounds["tiering-b"], rounds
        for name in names:
            text = logs[name].read_text()
            assert {m[4] for m in TAKEN.finditer(text)} == {name}
            assert {m[4] for m in RELEASED.finditer(text)} == {name}
            assert f"tiering service started as job {name} (Spark application {app_ids[name]})" in text
        # and one job at a time per table: the rounds of a table, from both logs, never overlap in time
        for table in {t for r in rounds.values() for t, _ in r}:
            spans = sorted(span for n in names for span in held_spans(logs[n], table))
            assert all(end < start for (_, end), (start, _) in itertools.pairwise(spans)), (table, spans)

        # SIGKILL the driver of the job that holds fluss.events in a big round
        workload.events_per_write = 200_000
        session(cluster, workload.write)
        workload.events_per_write = 500
        deadline = time.monotonic() + 60
        while not (
            victim := next((n for n in names if "fluss.events" in {t for t, _ in held(logs[n])}), None)
        ):
            assert time.monotonic() < deadline, "no job took the big round of fluss.events"
            time.sleep(0.02)
        survivor = next(n for n in names if n != victim)
        services[victim].send_signal(signal.SIGKILL)
        services[victim].wait()
        killed_at = time.monotonic()
        lost = held(logs[victim])
        assert "fluss.events" in {t for t, _ in lost}
        session(cluster, workload.write)

        # the survivor takes every table the victim held, under a newer epoch, within the job timeout
        # (plus the coordinator's sweep and the survivor's poll)
        def taken_over() -> bool:
            took = {(m[1], int(m[3])) for m in TAKEN.finditer(logs[survivor].read_text())}
            return all(any(t == table and e > epoch for t, e in took) for table, epoch in lost)

        deadline = time.monotonic() + 60
        while not taken_over():
            assert time.monotonic() < deadline, f"{survivor} never took {lost}"
            time.sleep(0.1)
        assert time.monotonic() - killed_at < job_timeout * 1.25 + 5, time.monotonic() - killed_at
        coordinator_log = "".join(p.read_text() for p in (cluster.base_dir / "logs").glob("coordinator*.log"))
        assert re.search(
            rf"tiering job {victim} \(127\.0\.0\.1:\d+, {app_ids[victim]}\) of table", coordinator_log
        )
        wait_for(lambda: four_tables_match(config, duck, workload), 180, "the lake to equal Fluss")
        # every record once: the lake's offsets cover exactly what was written
        for name in ("events", *EXTRA_TABLES):
            assert sum(lake_offsets(cluster, name).values()) == workload.next_id, name
        # the coordinator forgot the dead job; the survivor holds or last held the victim's tables
        wait_for(
            lambda: [j["name"] for j in strom_status(cluster)["tiering_jobs"]] == [survivor],
            job_timeout * 2,
            f"the coordinator to forget {victim}",
        )
        last = {t["table"]: t["job"]["name"] for t in strom_status(cluster)["tiering"]}
        assert all(last[table] == survivor for table, _ in lost), last
    finally:
        for service in services.values():
            if service.poll() is None:
                service.send_signal(signal.SIGTERM)
                service.wait(60)
