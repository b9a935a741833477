"""Issue 23's Done-when scenario: a lake-enabled primary-key table driven through `spark.sql` only.

Create a database and a table with 4 buckets and a lake, insert, select, insert again and see it,
let the tiering service (one round, in process) copy it to the lake, ALTER ADD COLUMN, write rows
only Fluss holds, read `$changelog`, read the union of lake and live rows, and drop; pyfluss reads
the same rows first.

Run in the test process (local mode, tests/spark/test_spark_sql.py) and as a driver process of its
own on the standalone cluster (tests/lake/test_spark_cluster_sql.py):
    sql_lake_scenario.py '<json settings>'   (bootstrap, lake, work_dir, master, executor_python, ui_port)
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# Written by the two INSERTs before tiering, then by the one after ALTER ADD COLUMN.
FIRST = [(i, f"item{i}", i * 1.5) for i in range(20)]
SECOND = [(3, "cup", 9.0), (20, "pen", 1.0)]
THIRD = [(4, "ink", 2.0, "blue"), (21, "pad", 3.0, "red")]


def expected(after_alter: bool = True) -> list[tuple[Any, ...]]:
    """The table's rows by id: (id, item, amount, note)."""
    rows: dict[int, tuple[Any, ...]] = {r[0]: (*r, None) for r in FIRST}
    rows.update({r[0]: (*r, None) for r in SECOND})
    if after_alter:
        rows.update({r[0]: r for r in THIRD})
    return [rows[k] for k in sorted(rows)]


def tier_once(bootstrap: str, lake: dict[str, str]) -> None:
    """One round of the tiering service, in this process (`strom tiering` runs the same service)."""
    from strom.spark.tiering.runner import LocalSplitRunner
    from strom.spark.tiering.service import TieringService, TieringSettings

    lake_format = lake["datalake.format"]
    prefix = f"datalake.{lake_format}."
    properties = {k.removeprefix(prefix): v for k, v in lake.items() if k.startswith(prefix)}
    settings = TieringSettings(bootstrap, lake_format, properties, poll_interval=0.2)
    asyncio.run(asyncio.wait_for(TieringService(settings, LocalSplitRunner()).run(max_rounds=1), 90))


def lake_records(bootstrap: str, database: str, table: str) -> int:
    """Records of the table's log that its newest lake snapshot covers (0 before the first one)."""
    from strom.common.table_path import TablePath
    from strom.spark import bridge
    from strom.spark.lake_source import latest_cut
    from strom.spark.options import ConnectionOptions, resolve_lake

    info = bridge.table_info(ConnectionOptions(bootstrap, TablePath(database, table), ()))
    cut = latest_cut(resolve_lake((), info), info)  # the lake the table's properties name
    return 0 if cut is None else sum(cut.bucket_offsets.values())


def lake_rows_planned(bootstrap: str, database: str, table: str) -> int:
    """Rows a union read of the table plans to take from the lake."""
    from strom.common.table_path import TablePath
    from strom.spark import bridge
    from strom.spark.batch_reader import plan_ranges
    from strom.spark.options import ConnectionOptions, ReadOptions

    connection = ConnectionOptions(bootstrap, TablePath(database, table), ())
    ranges = plan_ranges(
        connection, bridge.table_info(connection), ReadOptions.parse({"scan.union-read": "true"})
    )
    return sum(r.lake_records for r in ranges)


def pyfluss_rows(bootstrap: str, database: str, keys: list[int]) -> list[tuple[Any, ...] | None]:
    import fluss

    async def lookup() -> list[tuple[Any, ...] | None]:
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        try:
            table = await connection.get_table(fluss.TablePath(database, "orders"))
            lookuper = table.new_lookup().create_lookuper()
            found = [await lookuper.lookup({"id": k}) for k in keys]
        finally:
            await connection.close()
        return [None if r is None else (r["id"], r["item"], r["amount"], r["note"]) for r in found]

    return asyncio.run(lookup())


def run(spark: Any, bootstrap: str, lake: dict[str, str], catalog: str, database: str) -> None:
    """The scenario; `catalog` must be a Fluss catalog of `spark` for the cluster at `bootstrap`,
    whose configuration names the lake `lake`."""

    def sql(statement: str) -> list[tuple[Any, ...]]:
        text = statement.replace("CAT", catalog).replace("DB", database)
        return [tuple(r) for r in spark.sql(text).collect()]

    sql("CREATE DATABASE CAT.DB")
    sql(
        "CREATE TABLE CAT.DB.orders (id BIGINT, item STRING, amount DOUBLE) TBLPROPERTIES ("
        "'primary.key' = 'id', 'bucket.num' = '4', "
        "'table.datalake.enabled' = 'true', 'table.datalake.freshness' = '1s')"
    )
    values = ", ".join(f"({i}, '{item}', {amount})" for i, item, amount in FIRST)
    sql(f"INSERT INTO CAT.DB.orders VALUES {values}")
    assert sql("SELECT id, item, amount FROM CAT.DB.orders ORDER BY id") == FIRST
    sql("INSERT INTO CAT.DB.orders VALUES " + ", ".join(f"({i}, '{t}', {a})" for i, t, a in SECOND))
    now = sql("SELECT id, item, amount FROM CAT.DB.orders ORDER BY id")
    assert now == [r[:3] for r in expected(after_alter=False)], now

    # The tiering service copies everything written so far to the lake; what follows lives in
    # Fluss only.
    written = 20 + 2 + 1  # log records: 20 inserts; an update (-U, +U) and an insert
    tier_once(bootstrap, lake)
    assert lake_records(bootstrap, database, "orders") == written

    sql("ALTER TABLE CAT.DB.orders ADD COLUMN note STRING")
    sql("INSERT INTO CAT.DB.orders VALUES " + ", ".join(f"({i}, '{t}', {a}, '{n}')" for i, t, a, n in THIRD))
    changes = Counter(r[0] for r in sql("SELECT _change_type FROM CAT.DB.`orders$changelog`"))
    assert changes == {"insert": 22, "update_before": 2, "update_after": 2}, changes

    # The union read takes the tiered rows from the lake (which has no `note` column yet) and the
    # rest from Fluss: the rows of the table, the new column NULL in rows written before the ALTER.
    assert lake_rows_planned(bootstrap, database, "orders") == written
    union = sql(
        "SELECT id, item, amount, note FROM CAT.DB.orders WITH ('scan.union-read' = 'true') ORDER BY id"
    )
    assert union == expected(), union

    # pyfluss finds the same rows
    keys = [r[0] for r in expected()]
    assert pyfluss_rows(bootstrap, database, keys) == expected()

    sql("DROP TABLE CAT.DB.orders")
    assert sql("SHOW TABLES IN CAT.DB") == []
    sql("DROP DATABASE CAT.DB")
    assert (database,) not in sql("SHOW NAMESPACES IN CAT")


def main() -> None:
    import strom.spark

    settings = json.loads(sys.argv[1])
    spark = strom.spark.session(
        app="strom-sql-lake",
        master=settings["master"],
        **{
            "spark.pyspark.python": settings["executor_python"],  # cannot import strom: shipped
            "spark.sql.catalog.fluss.bootstrap.servers": settings["bootstrap"],
            "spark.ui.port": str(settings["ui_port"]),
            "spark.executor.cores": "1",
            "spark.cores.max": "2",  # one executor on each worker
            "spark.executor.memory": "512m",
            "spark.local.dir": str(Path(settings["work_dir"]) / "spark-local"),
        },
    )
    try:
        run(spark, settings["bootstrap"], settings["lake"], "fluss", settings["database"])
        # the statements' tasks ran on the standalone cluster's executors, not in the driver
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
        Path(settings["work_dir"], "executors").write_text(str(executors))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
