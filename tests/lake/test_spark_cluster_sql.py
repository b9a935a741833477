"""Issue 23's Done-when scenario (tests/spark/sql_lake_scenario.py: a lake-enabled primary-key table
driven through `spark.sql` only) with its driver a process of its own on the Spark standalone cluster,
its executors on the workers with a Python that cannot import `strom`. `long` (`make test-long`): its
local-mode sibling is test_spark_sql.py::test_lake_table_through_sql_only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster

from strom.server.launcher import free_port
from strom.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]

SCENARIO = Path(__file__).parents[1] / "spark" / "sql_lake_scenario.py"


def test_lake_table_through_sql_only_on_the_standalone_cluster(
    cluster_factory: Any, spark_standalone: StandaloneCluster, python_without_strom: Path, tmp_path: Path
) -> None:
    lake = {
        "datalake.format": "iceberg",
        "datalake.iceberg.type": "sql",
        "datalake.iceberg.uri": f"sqlite:///{tmp_path}/iceberg_catalog.db",
        "datalake.iceberg.warehouse": f"file://{tmp_path}/warehouse",
    }
    cluster: Cluster = cluster_factory(config=lake)
    settings = {
        "bootstrap": cluster.bootstrap,
        "lake": lake,
        "database": "shop",
        "work_dir": str(tmp_path),
        "master": spark_standalone.master_url,
        "executor_python": str(python_without_strom),
        "ui_port": free_port(),
    }
    log = tmp_path / "driver.log"
    with open(log, "ab") as out:
        # its own process group: a driver that hangs is killed with its JVM
        driver = subprocess.Popen(
            [sys.executable, str(SCENARIO), json.dumps(settings)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        assert driver.wait(420) == 0, log.read_text()[-6000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    # the driver and an executor on each worker
    assert int((tmp_path / "executors").read_text()) == 3
