"""Exactly-once streaming appends on the Spark standalone cluster: in micro-batch 1 the executor JVM
running each task is SIGKILLed after the task staged its rows (Spark runs the task again on an
executor the workers start anew), then the driver is SIGKILLed half-way through writing the batch
and started again from its checkpoint, on the cluster. The log table then holds every source row
once. `long` (`make test-long`): its local-mode sibling, which kills the task's Python worker, is
tests/spark/test_spark_exactly_once.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import fluss
import pytest
from harness import Cluster, run_pyfluss
from test_spark_cluster_connector import create_table, read_log, rows

from strom.spark.exactly_once import CRASH_ENV, TASK_CRASH_ENV
from strom.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.long, pytest.mark.timeout(1200)]  # two Spark drivers, one after the other

JOB = Path(__file__).parents[1] / "spark" / "exactly_once_job.py"
ROWS = 300  # 3 micro-batches of 100


def run_driver(args: list[str], env: dict[str, str], log: Path) -> int:
    with open(log, "ab") as out:
        # its own process group: the commit's fault point kills the Python driver and its JVM together
        proc = subprocess.Popen(
            [sys.executable, str(JOB), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        return proc.wait(timeout=540)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_executor_and_driver_killed_mid_batch_on_the_standalone_cluster(
    spark_standalone: StandaloneCluster, python_without_strom: Path, shared_cluster: Cluster, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap
    source, target = (f"eo_{k}_{tmp_path.name[-12:]}".replace("-", "_") for k in ("src", "dst"))
    create_table(bootstrap, source, buckets=1)
    create_table(bootstrap, target, buckets=2)

    async def write(connection: Any) -> None:
        writer = (await connection.get_table(fluss.TablePath("fluss", source))).new_append().create_writer()
        writer.write_arrow(rows(range(ROWS)))
        await writer.flush()

    run_pyfluss(bootstrap, write)
    marker, log = tmp_path / "killed-tasks", tmp_path / "driver.log"
    args = [bootstrap, f"fluss.{source}", f"fluss.{target}", str(tmp_path / "ckpt"), "true"]
    args += [spark_standalone.master_url, str(python_without_strom)]
    faults = {CRASH_ENV: "1", TASK_CRASH_ENV: f"1@{marker}@executor"}
    assert run_driver(args, {**os.environ, **faults}, log) == -signal.SIGKILL, log.read_text()[-5000:]
    assert marker.read_text().strip(), "no executor was killed in batch 1"
    assert read_log(bootstrap, target, buckets=2).num_rows == 150  # batch 0, half of batch 1

    # the driver again, on the cluster, from the checkpoint: batch 1 again, then batch 2
    assert run_driver(args, dict(os.environ), log) == 0, log.read_text()[-5000:]
    copies = Counter(read_log(bootstrap, target, buckets=2).column("id").to_pylist())
    assert copies == Counter(range(ROWS))
