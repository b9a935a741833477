"""Spark SQL over Fluss tables: tables and views made with ``USING fluss``, and (below) the catalog.
One Spark session for all checks; pyfluss is the reference for what landed in Fluss."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from fluss_helpers import create_table, lookup_all, unique
from harness import Cluster

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
        assert count(spark, view) == 3 and count(spark, table) == 3
        # A loaded DataFrame keeps the cut it took when it was loaded (docs/spark.md).
        assert frame.count() == 2
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"DROP VIEW IF EXISTS {view}")
