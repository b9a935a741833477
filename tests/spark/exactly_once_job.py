"""The streaming query of test_spark_exactly_once: copies log table `source` into log table `target`
through ``writeStream.format("fluss")``, 100 records a micro-batch, until the source is drained.

Run as a script it is the driver the test SIGKILLs (STROM_TEST_SPARK_CRASH names the batch;
STROM_TEST_SPARK_TASK_CRASH the batch whose tasks' Python workers die first):
    exactly_once_job.py BOOTSTRAP SOURCE TARGET CHECKPOINT EXACTLY_ONCE(true|false) [MASTER EXECUTOR_PYTHON]
"""

from __future__ import annotations

import os
import sys
from typing import Any

from strom.spark.exactly_once import CRASH_ENV, TASK_CRASH_ENV


def run_query(
    spark: Any, bootstrap: str, source: str, target: str, checkpoint: str, once: bool, timeout: float = 120
) -> None:
    query = (
        spark.readStream.format("fluss")
        .option("bootstrap.servers", bootstrap)
        .option("maxOffsetsPerTrigger", "100")
        .load(source)
        .writeStream.format("fluss")
        .option("bootstrap.servers", bootstrap)
        .option("table", target)
        .option("sink.exactly-once", str(once).lower())
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(timeout):
        query.stop()
        raise RuntimeError(f"query did not drain the source within {timeout} s")
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")


def main() -> None:
    import strom.spark

    bootstrap, source, target, checkpoint, once = sys.argv[1:6]
    # local mode, or a standalone master and the executors' Python
    master, executor_python = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, None)
    if CRASH_ENV in os.environ:  # the fault point kills this process's group: the driver and its JVM
        os.environ[CRASH_ENV] += f"@{os.getpgid(0)}"
    conf: dict[str, str] = {}
    if master is not None:
        conf = {
            "spark.pyspark.python": str(executor_python),
            "spark.executor.cores": "1",
            "spark.cores.max": "2",  # one executor on each worker
            "spark.executor.memory": "512m",
        }
        if TASK_CRASH_ENV in os.environ:  # executors do not inherit the driver's environment
            conf[f"spark.executorEnv.{TASK_CRASH_ENV}"] = os.environ[TASK_CRASH_ENV]
    # local mode: one retry per task (a task whose Python worker the fault point kills runs again)
    spark = strom.spark.session(app="strom-exactly-once-test", master=master or "local[2,2]", **conf)
    # a cluster's executors may be lost and started again in a micro-batch: more time
    run_query(spark, bootstrap, source, target, checkpoint, once == "true", 120 if master is None else 480)
    spark.stop()


if __name__ == "__main__":
    main()
