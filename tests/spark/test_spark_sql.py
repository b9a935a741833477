"""Spark SQL over Fluss tables: tables and views made with ``USING fluss``, and (below) the catalog.
One Spark session for all checks; pyfluss is the reference for what landed in Fluss."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sql_lake_scenario
from fluss_helpers import create_table, lookup_all, unique
from harness import Cluster
from pyspark.errors import AnalysisException, IllegalArgumentException

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def count(spark: Any, relation: str) -> int:
    return int(spark.sql(f"SELECT count(*) FROM {relation}").collect()[0][0])


def test_using_fluss_tables_and_views_read_their_options_and_the_latest_data(
    spark: Any, shared_cluster: Cluster
) -> None:
    bootstrap = shared_cluster.bootstrap
    name = unique("sql_using")
    create_table(bootstrap, name, SCHEMA, buckets=2, primary_keys=["id"])
    options = f"OPTIONS (`bootstrap.servers` '{bootstrap}', `table` 'fluss.{name}')"
    view, table = unique("v"), unique("t")
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING fluss {options}")
    spark.sql(f"INSERT INTO {view} VALUES (1, 'cup')")
    assert count(spark, view) == 1

    # A catalog table's options reach the data source, for reads and writes alike.
    spark.sql(f"CREATE TABLE {table} USING fluss {options}")
    try:
        assert [tuple(r) for r in spark.sql(f"SELECT id, name FROM {table}").collect()] == [(1, "cup")]
        spark.sql(f"INSERT INTO {table} VALUES (2, 'pen')")
        assert lookup_all(bootstrap, name, [{"id": 2}]) == [{"id": 2, "name": "pen"}]

        # Each query reads up to the offsets that are latest when it starts: the view sees the insert.
        assert count(spark, view) == 2
        frame = spark.read.format("fluss").option("bootstrap.servers", bootstrap).load(f"fluss.{name}")
        assert frame.count() == 2
        spark.sql(f"INSERT INTO {view} VALUES (3, 'ink')")
        assert count(spark, table) == 3
        # A loaded DataFrame keeps the cut it took when it was loaded (docs/spark.md).
        assert frame.count() == 2
        assert spark.table(table).count() == 3  # a DataFrame of the table gets its options too
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"DROP VIEW IF EXISTS {view}")


def test_catalog_ddl_insert_select_alter_and_drop_through_sql_only(
    spark: Any, shared_cluster: Cluster
) -> None:
    bootstrap = shared_cluster.bootstrap
    catalog, db = unique("fl"), unique("shop")
    spark.conf.set(f"spark.sql.catalog.{catalog}", "strom.spark.FlussCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.bootstrap.servers", bootstrap)

    def sql(statement: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in spark.sql(statement.replace("CAT", catalog).replace("DB", db)).collect()]

    sql("CREATE DATABASE CAT.DB COMMENT 'orders and such'")
    assert (db,) in sql("SHOW NAMESPACES IN CAT")
    sql(
        "CREATE TABLE CAT.DB.orders (id BIGINT, item STRING, amount DOUBLE) "
        "TBLPROPERTIES ('primary.key' = 'id', 'bucket.num' = '4', 'table.log.ttl' = '3d')"
    )
    sql("CREATE TABLE CAT.DB.events (id BIGINT, region STRING) PARTITIONED BY (region)")

    # Fluss's errors reach Spark's exceptions with their Fluss name and code
    with pytest.raises(AnalysisException) as dropped:
        sql("DROP DATABASE CAT.DB")  # not empty
    assert dropped.value.getCondition() == "SCHEMA_NOT_EMPTY"  # Spark's, from NonEmptyNamespaceException
    with pytest.raises(IllegalArgumentException, match=r"\[Fluss INVALID_CONFIG_EXCEPTION \(39\)\]"):
        sql("CREATE TABLE CAT.DB.bad (id BIGINT) TBLPROPERTIES ('table.log.ttl' = 'banana')")
    assert sorted(t[1] for t in sql("SHOW TABLES IN CAT.DB")) == ["events", "orders"]
    described = {row[0]: row[1] for row in sql("DESCRIBE TABLE EXTENDED CAT.DB.orders")}
    for prop in ("primary.key=id", "bucket.num=4", "table.log.ttl=3d"):
        assert prop in described["Table Properties"]
    assert [r[0] for r in sql("DESCRIBE TABLE CAT.DB.events")][-1] == "region"  # the partition column

    # INSERT upserts by key; every query sees what the statements before it wrote
    sql("INSERT INTO CAT.DB.orders VALUES (1, 'cup', 2.5), (2, 'pen', 1.0)")
    assert sql("SELECT id, item, amount FROM CAT.DB.orders ORDER BY id") == [(1, "cup", 2.5), (2, "pen", 1.0)]
    sql(
        "INSERT INTO CAT.DB.orders SELECT id + 2, concat(item, '!'), amount * 2 FROM CAT.DB.orders "
        "UNION ALL SELECT 1, 'mug', 3.0"
    )
    # filters go to the reader, and only the columns the query needs are read (server-side projection)
    selective = spark.sql(f"SELECT id, item FROM {catalog}.{db}.orders WHERE amount > 2.6")
    plan = selective._jdf.queryExecution().executedPlan().toString()
    assert re.search(r"BatchScan \S+\[id#\d+L, item#\d+, amount#\d+\]", plan), plan
    assert sorted(tuple(r) for r in selective.collect()) == [(1, "mug"), (3, "cup!")]
    # count(*) without a filter comes from GetTableStats: a one-row local scan, no Fluss read
    counted = spark.sql(f"SELECT count(*), count(1) FROM {catalog}.{db}.orders")
    plan = counted._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" in plan and "BatchScan" not in plan, plan
    assert [tuple(r) for r in counted.collect()] == [(4, 4)]

    # ALTER TABLE, $changelog, union reads and pyfluss: test_lake_table_through_sql_only

    # partitions: added, listed, written, pruned, dropped
    sql("ALTER TABLE CAT.DB.events ADD PARTITION (region = 'eu')")
    sql("ALTER TABLE CAT.DB.events ADD PARTITION (region = 'us')")
    assert sql("SHOW PARTITIONS CAT.DB.events") == [("region=eu",), ("region=us",)]
    sql("INSERT INTO CAT.DB.events VALUES (1, 'eu'), (2, 'us'), (3, 'eu')")
    assert sql("SELECT count(*) FROM CAT.DB.events WHERE region = 'eu'") == [(2,)]
    assert sql("SELECT count(*) FROM CAT.DB.events") == [(3,)]  # stats summed over the partitions
    sql("ALTER TABLE CAT.DB.events DROP PARTITION (region = 'us')")
    assert sql("SHOW PARTITIONS CAT.DB.events") == [("region=eu",)]

    sql("DROP TABLE CAT.DB.orders")
    assert [t[1] for t in sql("SHOW TABLES IN CAT.DB")] == ["events"]
    sql("DROP DATABASE CAT.DB CASCADE")
    assert (db,) not in sql("SHOW NAMESPACES IN CAT")


def test_lake_table_through_sql_only(spark: Any, cluster_factory: Any, tmp_path: Path) -> None:
    """Issue 23's Done-when scenario in local mode (sql_lake_scenario; its standalone-cluster run is
    tests/lake/test_spark_cluster_sql.py)."""
    lake = {
        "datalake.format": "iceberg",
        "datalake.iceberg.type": "sql",
        "datalake.iceberg.uri": f"sqlite:///{tmp_path}/iceberg_catalog.db",
        "datalake.iceberg.warehouse": f"file://{tmp_path}/warehouse",
    }
    cluster: Cluster = cluster_factory(config=lake)
    catalog = unique("lakecat")
    spark.conf.set(f"spark.sql.catalog.{catalog}", "strom.spark.FlussCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.bootstrap.servers", cluster.bootstrap)
    sql_lake_scenario.run(spark, cluster.bootstrap, lake, catalog, unique("shop"))
