"""A SparkSession ready for Strom, and registration of the `fluss` data source.

Local masters get local defaults (loopback, no UI); cluster masters get `strom` shipped to their
executors (strom.spark.shipping). Environment variables Spark reads at start-up get defaults only where
they are right (`prepare_environment`). Pushed filters need ``spark.sql.python.filterPushdown.enabled``:
a reader that implements ``pushFilters`` fails without it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from strom.spark.shipping import add_package, with_package

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
# The catalog `session()` sets up when its cluster is given (spark.sql.catalog.fluss.bootstrap.servers).
CATALOG_KEY = "spark.sql.catalog.fluss"
CATALOG_CLASS = "strom.spark.FlussCatalog"
BOOTSTRAP_SERVERS = "bootstrap.servers"
# A class of the glue jar, to check that the driver can load it.
GLUE_CLASS = "strom.spark.FlussSource"

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


def is_loopback(master: str) -> bool:
    """A standalone master on this machine's loopback (the test cluster, `strom local --spark-master
    standalone`): its executors run here, next to the driver."""
    host = urlsplit(master).hostname if master.startswith("spark://") else None
    return host is not None and (host == "localhost" or host == "::1" or host.startswith("127."))


def prepare_environment(master: str, conf: Mapping[str, Any]) -> None:
    """Environment variables read when the JVM and Python workers start; set before the session.

    - ``spark.pyspark.python`` / ``spark.pyspark.driver.python`` in `conf` become ``PYSPARK_PYTHON`` /
      ``PYSPARK_DRIVER_PYTHON``, as spark-submit does: PySpark reads the executors' interpreter from the
      variable only, so the setting given to the builder would otherwise be ignored.
    - ``PYSPARK_DRIVER_PYTHON`` (the driver-side Python workers that plan data source reads) defaults to
      this interpreter: it runs here and has Strom.
    - Local and loopback masters, whose executors run on this machine: ``PYSPARK_PYTHON`` defaults to this
      interpreter (Spark's default, ``python3`` from PATH, is not our virtualenv unless it is activated)
      and ``SPARK_LOCAL_IP`` to 127.0.0.1 (no host name lookup, nothing bound beyond loopback).
      On a real cluster neither is touched: executors use their own Python, and the driver must bind an
      address they reach.

    A variable the user already set is never overridden (except by the explicit settings above).
    """
    for key, variable in (
        ("spark.pyspark.python", "PYSPARK_PYTHON"),
        ("spark.pyspark.driver.python", "PYSPARK_DRIVER_PYTHON"),
    ):
        if conf.get(key):
            os.environ[variable] = str(conf[key])
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master) or is_loopback(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers this driver starts on this machine import strom even when it runs from a source
    # tree rather than an install (executors elsewhere get the shipped zip, see strom.spark.shipping).
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def submitted_master() -> str | None:
    """The master spark-submit was given, when this driver was launched by it (else None)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, whose properties hold the conf
    return SparkConf().get("spark.master", None)


def with_sql_glue(conf: Mapping[str, Any]) -> dict[str, Any]:
    """`conf` with Strom's JVM glue (strom.spark.jvm) on the driver's class path, built if missing.

    Only the driver needs it: SQL resolves tables and catalogs there, and executors run the Python
    data source through Spark's own classes."""
    from strom.spark.jvm import JvmBuildError, ensure_jar

    try:
        jar = str(ensure_jar())
    except JvmBuildError as e:
        # A JRE without javac still runs DataFrames; `register` warns that SQL lacks its glue.
        log.warning("Spark SQL over Fluss is unavailable: %s", e)
        return dict(conf)
    existing = [p for p in str(conf.get(DRIVER_CLASS_PATH) or "").split(os.pathsep) if p]
    return {**conf, DRIVER_CLASS_PATH: os.pathsep.join([*existing, jar] if jar not in existing else existing)}


def has_sql_glue(spark: SparkSession) -> bool:
    """Whether the driver JVM can load Strom's glue (``USING fluss`` and the catalog need it)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        jvm.java.lang.Class.forName(GLUE_CLASS, False, jvm.Thread.currentThread().getContextClassLoader())
    except Exception:
        return False
    return True


def register(spark: SparkSession) -> SparkSession:
    """Register format ``fluss`` on `spark` and set the flags it needs; returns `spark`.

    SQL over Fluss (``CREATE TABLE/VIEW ... USING fluss``) needs Strom's glue jar on the driver's class
    path, which `session()` puts there; a session built otherwise gets a warning naming the setting."""
    from strom.spark.datasource import FlussDataSource, JvmBackedFlussDataSource

    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    if has_sql_glue(spark):
        from strom.spark.catalog import install

        # ``fluss`` is the glue's JVM class, which hands the work to this Python source
        spark.dataSource.register(JvmBackedFlussDataSource)
        install(spark)
    else:
        spark.dataSource.register(FlussDataSource)
        from strom.spark.jvm import JAR

        log.warning(
            "Strom's Spark SQL glue is not on this driver's class path: DataFrames work, but tables "
            "and views created with USING fluss lose their options and keep stale offsets. Start "
            "the session with %s=%s (python -m strom.spark.jvm builds it), or use "
            "strom.spark.session().",
            DRIVER_CLASS_PATH,
            JAR,
        )
    return spark


def session(app: str = "strom", master: str | None = None, **conf: Any) -> SparkSession:
    """A SparkSession configured for Strom with format ``fluss`` registered.

    `master` defaults to the one spark-submit was given (when it launched this driver), else
    ``local[2]``. Extra Spark settings go in `conf` (``session(**{"spark.driver.memory": "2g"})``); they
    win over the defaults. An already running session is reused, and still gets the data source
    registered. With a cluster master (``spark://``, ``yarn``, ``k8s://``) the `strom` package is shipped
    to the executors as a zip in ``spark.submit.pyFiles`` (strom.spark.shipping), and the web UI is on.
    Environment defaults: see `prepare_environment`.
    """
    submitted = submitted_master() if master is None else None
    master = master or submitted or "local[2]"
    prepare_environment(master, conf)
    from pyspark.sql import SparkSession

    if is_local(master):
        settings = {**LOCAL_CONF, **conf}
    elif submitted:
        settings = {**COMMON_CONF, **conf}  # spark-submit's JVM runs already: the zip is added below
    else:
        settings = with_package({**COMMON_CONF, **conf})
    if not submitted:
        # spark-submit's JVM runs already; its users pass --driver-class-path (docs/spark.md)
        settings = with_sql_glue(settings)
    if f"{CATALOG_KEY}.{BOOTSTRAP_SERVERS}" in settings:
        settings.setdefault(CATALOG_KEY, CATALOG_CLASS)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if submitted and not is_local(master):
        # spark.submit.pyFiles reaches executors only when the JVM starts with it
        add_package(spark.sparkContext)
    return register(spark)
