"""The tiering service on a Spark standalone cluster (a master and 2 worker JVMs): splits run on the
workers' executors, whose Python cannot import `strom` (the driver ships it as a zip); a worker
SIGKILLed while its executor runs tiering tasks, and then the driver SIGKILLed, still end with the lake
exactly equal to Fluss (pyiceberg and DuckDB); `strom local --spark-master standalone` runs it all."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pytest
from harness import Cluster
from test_tiering_service import Workload, create_tables, lake_config, session, wait_until_lake_matches

from strom.server.launcher import free_port
from strom.spark.standalone import SPARK_MASTER, SPARK_WORKER, StandaloneCluster


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def start_cluster_tiering(
    cluster: Cluster,
    config: dict[str, str],
    master: str,
    python: Path,
    ui_port: int,
    log: Path,
    job_name: str = "strom-tiering",
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "strom", "tiering", "--bootstrap", cluster.bootstrap]
    args += ["--master", master, "--poll-interval", "0.3", "--work-dir", str(log.parent / "tiering-work")]
    args += ["--job-name", job_name]
    spark = {
        "spark.pyspark.python": str(python),  # the executors' Python: no strom on its path
        "spark.ui.port": str(ui_port),
        "spark.executor.cores": "1",
        "spark.cores.max": "2",  # one executor on each worker, and cores left for a second application
        "spark.executor.memory": "512m",
        # the REST API shows a task as soon as it starts (rounds of a million rows last under a second)
        "spark.ui.liveUpdate.period": "0ms",
    }
    args += [a for k, v in spark.items() for a in ("--spark-conf", f"{k}={v}")]
    args += [a for k, v in config.items() for a in ("--config", f"{k}={v}")]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def executors(ui_port: int, which: str = "executors") -> list[dict[str, Any]]:
    """The tiering application's executors (not the driver), from its REST API."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    app = get_json(base)[0]["id"]
    return [e for e in get_json(f"{base}/{app}/{which}") if e["id"] != "driver"]


def failed_tasks(ui_port: int) -> int:
    """Task attempts the tiering application's stages lost (to a killed executor, here)."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    app = get_json(base)[0]["id"]
    return sum(s["numFailedTasks"] for s in get_json(f"{base}/{app}/stages"))


def worker_running(spark: StandaloneCluster, app_name: str, executor_id: str) -> int:
    """Index of the worker whose JVM runs that executor of the (only active) app named `app_name`."""
    app_id = next(a["id"] for a in spark.state()["activeapps"] if a["name"] == app_name)
    for worker in spark.workers:
        for executor in get_json(f"http://{worker.ui}/json/").get("executors", []):
            if executor["appid"] == app_id and str(executor["id"]) == executor_id:
                return worker.index
    raise AssertionError(f"no worker runs executor {executor_id} of {app_id}")


def rounds_with_records(log: Path) -> int:
    """Tiering rounds of fluss.events that wrote records to the lake, so far."""
    return len(re.findall(r"tiered fluss\.events: \d+ record", log.read_text()))


def kill_workers_mid_round(
    spark: StandaloneCluster,
    cluster: Cluster,
    workload: Workload,
    log: Path,
    ui_port: int,
    app_name: str,
    wait_until_lake_matches_fluss: Callable[[], None],
) -> int:
    """SIGKILL a worker (and its executors) while one of them runs a tiering task of a big round of
    fluss.events (Spark counts the task failed and runs it again on the other worker), start a
    replacement, write more and wait for the lake; a kill that came just after the task ended is tried
    again. Returns how many workers were killed."""
    kills = misses = 0
    while not failed_tasks(ui_port):
        assert kills + misses < 6, "never caught an executor running a tiering task"
        tiered = rounds_with_records(log)
        workload.events_per_write = 2_000_000  # a round long enough to be caught in
        # watched from the start of the write: the round may begin (and end) before the writing
        # session has closed its connection
        with ThreadPoolExecutor(1) as pool:
            writing = pool.submit(session, cluster, workload.write)
            deadline = time.monotonic() + 150  # under a loaded machine the round can start late
            busy: list[str] = []
            while not busy:
                assert time.monotonic() < deadline, "no tiering task ran"
                busy = [e["id"] for e in executors(ui_port) if e["activeTasks"] > 0]
                if not busy and writing.done() and rounds_with_records(log) > tiered:
                    break  # the round came and went between two looks: write again
                time.sleep(0.02)
            if busy:
                spark.kill_worker(worker_running(spark, app_name, busy[0]))
            writing.result()
        workload.events_per_write = 500
        if not busy:
            misses += 1
            continue
        kills += 1
        spark.add_worker(cores=2)  # the cluster gets a replacement
        spark.wait_for_workers(2)
        session(cluster, workload.write)
        wait_until_lake_matches_fluss()
    return kills


def test_worker_python_cannot_import_strom(python_without_strom: Path, tmp_path: Path) -> None:
    """The premise of the shipping test: that Python has the dependencies, but not strom."""
    check = [str(python_without_strom), "-c", "import pyarrow, pyiceberg, pyspark"]
    assert subprocess.run(check, cwd=tmp_path).returncode == 0
    no_strom = [str(python_without_strom), "-c", "import strom"]
    assert subprocess.run(no_strom, cwd=tmp_path, capture_output=True).returncode != 0


# long (make test-long): 140 s; the tiering kill loops of tests/lake/test_tiering_service.py and
# test_strom_local_with_a_standalone_spark_cluster below keep both sides in make test
@pytest.mark.long
def test_tiering_on_standalone_survives_a_killed_worker_and_a_killed_driver(
    cluster_factory: Any,
    spark_standalone: StandaloneCluster,
    python_without_strom: Path,
    tmp_path: Path,
    duck: duckdb.DuckDBPyConnection,
) -> None:
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={**config, "lake.tiering.job-timeout": "5s", "kv.snapshot.interval": "1s"}
    )
    session(cluster, create_tables)
    workload = Workload()
    session(cluster, workload.write)
    log = tmp_path / "tiering.log"
    ui_port = free_port()
    service = start_cluster_tiering(
        cluster, config, spark_standalone.master_url, python_without_strom, ui_port, log
    )
    try:
        wait_until_lake_matches(config, duck, workload, timeout=120)
        # the splits ran on executors on the workers (the driver runs none: it has no task slots)
        apps = [a["name"] for a in spark_standalone.state()["activeapps"]]
        assert "strom-tiering" in apps
        ran = {e["id"]: e["totalTasks"] for e in executors(ui_port)}
        assert ran and sum(ran.values()) > 0, ran

        kills = kill_workers_mid_round(
            spark_standalone,
            cluster,
            workload,
            log,
            ui_port,
            "strom-tiering",
            lambda: wait_until_lake_matches(config, duck, workload, timeout=120),
        )
        assert len([e for e in executors(ui_port, "allexecutors") if not e["isActive"]]) >= kills

        # SIGKILL the driver; a new service resumes from the lake's offsets
        service.send_signal(signal.SIGKILL)
        service.wait()
        session(cluster, workload.write)
        service = start_cluster_tiering(
            cluster, config, spark_standalone.master_url, python_without_strom, free_port(), log
        )
        wait_until_lake_matches(config, duck, workload, timeout=120)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(60)
        while len(spark_standalone.workers) < 2:
            spark_standalone.add_worker(cores=2)
        spark_standalone.wait_for_workers(2)


def test_strom_local_with_a_standalone_spark_cluster(tmp_path: Path, duck: duckdb.DuckDBPyConnection) -> None:
    data_dir = tmp_path / "data"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom",
            "local",
            "--data-dir",
            str(data_dir),
            "--port",
            str(free_port()),
            "--spark-master",
            "standalone",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "cluster ready" in line:
                break
        cluster_json = json.loads((data_dir / "cluster.json").read_text())
        roles = [s["role"] for s in cluster_json["servers"]]
        assert roles.count(SPARK_MASTER) == 1 and roles.count(SPARK_WORKER) == 2
        master = next(s for s in cluster_json["servers"] if s["role"] == SPARK_MASTER)
        assert master["host"] == "127.0.0.1" and master["ui"].startswith("127.0.0.1:")
        state = get_json(f"http://{master['ui']}/json/")
        assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == 2
        config = {f"datalake.iceberg.{k}": v for k, v in cluster_json["datalake"]["properties"].items()}

        class Local:
            bootstrap = cluster_json["bootstrap"]

        workload = Workload()
        session(Local, create_tables)  # type: ignore[arg-type]
        session(Local, workload.write)  # type: ignore[arg-type]
        wait_until_lake_matches(config, duck, workload, timeout=180)
        # the master ran the tiering application, with executors on both workers
        state = get_json(f"http://{master['ui']}/json/")
        assert [a["name"] for a in state["activeapps"]] == ["strom-tiering"]
        workers = [s for s in cluster_json["servers"] if s["role"] == SPARK_WORKER]
        running = [get_json(f"http://{w['ui']}/json/")["executors"] for w in workers]
        assert all(running), running
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert not (data_dir / "cluster.json").exists()
