"""A local SparkSession ready for Strom, and registration of the `fluss` data source.

Spark runs Python workers with ``PYSPARK_PYTHON`` (``python3`` from PATH by default, which is not
our virtualenv unless it is activated), so both worker variables are pinned to this interpreter
before the JVM starts. Pushed filters need ``spark.sql.python.filterPushdown.enabled``: a reader
that implements ``pushFilters`` fails without it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.spark.shipping import with_package

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What the data source itself needs on any session.
REQUIRED_CONF = {"spark.sql.python.filterPushdown.enabled": "true"}

# Defaults for every master: quiet console, UTC, a bounded wait for streams to stop.
COMMON_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
    **REQUIRED_CONF,
}

# Local defaults: no UI, loopback only, few shuffle partitions for a small machine.
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    **COMMON_CONF,
}


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _prepare_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers must import strom even when it runs from a source tree rather than an install.
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def register(spark: SparkSession) -> SparkSession:
    """Register format ``fluss`` on `spark` and set the flags it needs; returns `spark`."""
    from strom.spark.datasource import FlussDataSource

    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    spark.dataSource.register(FlussDataSource)
    return spark


def session(app: str = "strom", master: str = "local[2]", **conf: Any) -> SparkSession:
    """A SparkSession configured for Strom with format ``fluss`` registered.

    Extra Spark settings go in `conf` (``session(**{"spark.driver.memory": "2g"})``); they win over
    the defaults. An already running session is reused, and still gets the data source registered.
    With a cluster master (``spark://``, ``yarn``, ``k8s://``) the `strom` package is shipped to the
    executors as a zip in ``spark.submit.pyFiles`` (strom.spark.shipping), and the web UI is on.
    """
    _prepare_environment()
    from pyspark.sql import SparkSession

    settings = {**LOCAL_CONF, **conf} if is_local(master) else with_package({**COMMON_CONF, **conf})
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return register(spark)
