"""Spark batch reads: `spark.read.format("fluss")` counting and summing a 2-bucket log table, against
the official pyfluss client reading the same table in the same run. Spark starts once, outside the
timing (local[2]); each figure is the median of --runs.

    .venv/bin/python bench/spark_read.py [--rows 2000000] [--large] [--json] [--smoke]
"""

from __future__ import annotations

import asyncio
import statistics
import time

import fluss
from common import Row, cluster, parser, report, wide_batch
from projection import BUCKETS, COLUMNS, write


async def pyfluss_read(bootstrap: str) -> tuple[float, int]:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    table = await connection.get_table(fluss.TablePath("fluss", "wide"))
    scanner = await table.new_scan().create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(BUCKETS)})
    started = time.perf_counter()
    rows = (await scanner.to_arrow()).num_rows
    seconds = time.perf_counter() - started
    await connection.close()
    return seconds, rows


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=2_000_000)
    args = p.parse_args()
    if args.smoke:
        args.rows, args.runs = 20_000, 1
    rows = args.rows * (5 if args.large else 1)
    batch = wide_batch(20_000, COLUMNS)
    import strom.spark

    spark = strom.spark.session(app="strom-bench")
    try:
        with cluster() as running:
            asyncio.run(write(running.bootstrap, batch, rows // batch.num_rows))
            total = rows // batch.num_rows * batch.num_rows
            reader = spark.read.format("fluss").option("bootstrap.servers", running.bootstrap)

            def spark_read() -> float:
                started = time.perf_counter()
                result = reader.load("fluss.wide").selectExpr("count(*)", "sum(c2)").collect()[0]
                seconds = time.perf_counter() - started
                assert result[0] == total, f"Spark counted {result[0]} rows of {total}"
                return seconds

            spark_read()  # warm-up: the first job loads the data source and starts Python workers
            spark_s = statistics.median(spark_read() for _ in range(args.runs))
            fluss_runs = [asyncio.run(pyfluss_read(running.bootstrap)) for _ in range(args.runs)]
            assert all(n == total for _, n in fluss_runs)
            fluss_s = statistics.median(s for s, _ in fluss_runs)
    finally:
        spark.stop()
    report(
        [
            Row(
                'Spark batch read, format("fluss"), local[2]',
                total / spark_s,
                total / fluss_s,
                "rows/s",
                "pyfluss reading the same table",
            )
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
