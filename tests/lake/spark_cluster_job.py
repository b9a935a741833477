"""A Spark application using the `fluss` data source, run by the cluster connector tests as its own
driver process (the way a user runs a job with `spark-submit` or `python job.py`) against the
standalone cluster: its executors run on the workers with a Python that cannot import `strom`.

    python spark_cluster_job.py '<json settings>'
    spark-submit --master spark://... --conf spark.pyspark.python=... spark_cluster_job.py '<json settings>'

Settings: `master` and `executor_python` (both left out under spark-submit), `ui_port`, `work_dir`,
`bootstrap`, `mode` and what the mode needs. Modes:

- ``batch``: read log table `source` into parquet at `out` (written by the executors); append
  `rows` generated rows to log table `log_sink`; upsert them into primary-key table `pk_sink`, then
  upsert the even ids again with `value` + 1000.
- ``stream``: stream log table `log_table` into parquet at `<sink>/log` and the changelog of
  primary-key table `pk_table` into `<sink>/pk` (Spark's file sink, exactly once with its
  `_spark_metadata` log), checkpoints under `checkpoints`, until file `stop` appears; each task
  pauses `seconds_per_row` per row it passes on.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import strom.spark


def start_session(settings: dict[str, Any]) -> Any:
    """Under spark-submit, its --master and --conf stand; else the settings name them."""
    submitted = settings.get("master") is None
    return strom.spark.session(
        app=f"strom-connector-{settings['mode']}",
        master=settings.get("master"),
        **({} if submitted else {"spark.pyspark.python": settings["executor_python"]}),  # no strom there
        **{
            "spark.ui.port": str(settings["ui_port"]),
            "spark.executor.cores": "1",
            "spark.cores.max": "2",  # one executor on each worker
            "spark.executor.memory": "512m",
            "spark.local.dir": settings["work_dir"],
            "spark.sql.shuffle.partitions": "2",
        },
    )


def fluss(reader: Any, settings: dict[str, Any], table: str, **options: str) -> Any:
    reader = reader.format("fluss").option("bootstrap.servers", settings["bootstrap"]).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def executor_python() -> tuple[str, str]:
    """Run in an executor: its interpreter and where it imported `strom` from."""
    import sys

    import strom

    return sys.executable, strom.__file__


def batch(spark: Any, settings: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    seen = spark.sparkContext.parallelize(range(2), 2).map(lambda _: executor_python()).collect()
    Path(settings["executors"]).write_text(json.dumps(seen))

    fluss(spark.read, settings, settings["source"]).load().write.parquet(settings["out"])
    rows = spark.range(settings["rows"]).select(
        F.col("id"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("name"),
        (F.col("id") * 10).alias("value"),
    )
    fluss(rows.repartition(2).write, settings, settings["log_sink"]).mode("append").save()
    fluss(rows.repartition(2).write, settings, settings["pk_sink"]).mode("append").save()
    updates = rows.where(F.col("id") % 2 == 0).withColumn("value", F.col("value") + 1000)
    fluss(updates.repartition(2).write, settings, settings["pk_sink"]).mode("append").save()


def stream(spark: Any, settings: dict[str, Any]) -> None:
    sink, checkpoints = Path(settings["sink"]), Path(settings["checkpoints"])
    sources = {
        "log": fluss(spark.readStream, settings, settings["log_table"]),
        "pk": fluss(
            spark.readStream,
            settings,
            settings["pk_table"],
            **{"scan.startup.mode": "earliest", "scan.include-change-type": "true"},
        ),
    }
    pace = float(settings.get("seconds_per_row", 0))

    def paced(batches: Any) -> Any:
        """The rows as they are, after a pause that grows with their number: a big micro-batch's tasks
        run for seconds, long enough to kill a worker under them."""
        for batch in batches:
            time.sleep(batch.num_rows * pace)
            yield batch

    def load(source: Any) -> Any:
        df = source.load()
        return df.mapInArrow(paced, df.schema)

    queries = [
        load(source)
        .writeStream.format("parquet")
        .option("path", str(sink / name))
        .option("checkpointLocation", str(checkpoints / name))
        .trigger(processingTime="500 milliseconds")
        .queryName(name)
        .start()
        for name, source in sources.items()
    ]
    stop = Path(settings["stop"])
    while not stop.exists():
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"query {query.name} failed: {query.exception()}")
        time.sleep(0.2)
    for query in queries:
        query.stop()


def main() -> None:
    settings = json.loads(sys.argv[1])
    spark = start_session(settings)
    try:
        {"batch": batch, "stream": stream}[settings["mode"]](spark, settings)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
