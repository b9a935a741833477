"""Spark SQL against the DataFrame path: `SELECT count(*)` and a selective `SELECT` (one column, a
filter matching 0.1% of the rows) over a 20-column, 2-bucket log table, through the catalog
(`fluss.fluss.wide`) and through `spark.read.format("fluss")` in the same run. SQL prunes columns and
pushes the filter by default; the DataFrame reads every column and has filter pushdown off (its
default). Spark starts once, outside the timing (local[2]); each figure is the median of --runs, after
one warm-up of each path.

    .venv/bin/python bench/spark_sql.py [--rows 1000000] [--large] [--json] [--smoke]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from common import Row, cluster, parser, report, wide_batch
from projection import COLUMNS, write


def timed(runs: int, action: Callable[[], object], check: Callable[[object], None]) -> float:
    def once() -> float:
        started = time.perf_counter()
        result = action()
        seconds = time.perf_counter() - started
        check(result)
        return seconds

    once()  # warm-up: Python workers and imports
    return statistics.median(once() for _ in range(runs))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    if args.smoke:
        args.rows, args.runs = 20_000, 1
    rows = args.rows * (5 if args.large else 1)
    batch = wide_batch(20_000, COLUMNS)
    import strom.spark

    with cluster() as running:
        spark = strom.spark.session(
            app="strom-bench", **{"spark.sql.catalog.fluss.bootstrap.servers": running.bootstrap}
        )
        try:
            asyncio.run(write(running.bootstrap, batch, rows // batch.num_rows))
            total = rows // batch.num_rows * batch.num_rows
            # ids repeat per batch of 20k: c2 = id % 1000 < 1 matches 0.1%
            selective = total // 1000

            def frame() -> object:
                return (
                    spark.read.format("fluss")
                    .option("bootstrap.servers", running.bootstrap)
                    .load("fluss.wide")
                )

            def counted(expected: int) -> Callable[[object], None]:
                def check(result: object) -> None:
                    assert result == expected, f"got {result}, expected {expected}"

                return check

            sql_count = timed(
                args.runs,
                lambda: spark.sql("SELECT count(*) FROM fluss.fluss.wide").collect()[0][0],
                counted(total),
            )
            df_count = timed(args.runs, lambda: frame().count(), counted(total))  # type: ignore[attr-defined]
            sql_select = timed(
                args.runs,
                lambda: len(spark.sql("SELECT c3 FROM fluss.fluss.wide WHERE c2 < 1").collect()),
                counted(selective),
            )
            df_select = timed(
                args.runs,
                lambda: len(frame().where("c2 < 1").select("c3").collect()),  # type: ignore[attr-defined]
                counted(selective),
            )
        finally:
            spark.stop()
    report(
        [
            Row(
                "SELECT count(*), SQL catalog",
                total / sql_count,
                total / df_count,
                "rows/s",
                "DataFrame count()",
            ),
            Row(
                "selective SELECT (1 col, 0.1%), SQL catalog",
                total / sql_select,
                total / df_select,
                "rows/s",
                "DataFrame where/select",
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
