"""Fluss's virtual tables through the `fluss` Spark data source: `db.t$changelog` (log and PK tables,
batch and streaming) and `db.t$binlog` (PK tables), with Fluss's columns and change-type names."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fluss_helpers import append, apply_changes, create_table, unique
from harness import Cluster

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string())])


def reader(spark: Any, cluster: Cluster) -> Any:
    return spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap)


def pk_table_with_history(cluster: Cluster) -> str:
    """One bucket: insert 1, insert 2, update 1, delete 2, insert 3 (offsets 0, 1, 2-3, 4, 5)."""
    name = unique("virtual_pk")
    create_table(cluster.bootstrap, name, SCHEMA, buckets=1, primary_keys=["id"])
    apply_changes(cluster.bootstrap, name, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], [])
    apply_changes(cluster.bootstrap, name, [{"id": 1, "name": "a2"}], [])
    apply_changes(cluster.bootstrap, name, [], [{"id": 2}])
    apply_changes(cluster.bootstrap, name, [{"id": 3, "name": "c"}], [])
    return name


def test_changelog_and_binlog_of_a_pk_table(spark: Any, shared_cluster: Cluster) -> None:
    name = pk_table_with_history(shared_cluster)
    before = dt.datetime.now()

    changelog = reader(spark, shared_cluster).load(f"fluss.{name}$changelog")
    assert changelog.schema.simpleString() == (
        "struct<_change_type:string,_log_offset:bigint,_commit_timestamp:timestamp,id:int,name:string>"
    )
    rows = changelog.orderBy("_log_offset").collect()
    assert [(r._change_type, r._log_offset, r.id, r.name) for r in rows] == [
        ("insert", 0, 1, "a"),
        ("insert", 1, 2, "b"),
        ("update_before", 2, 1, "a"),
        ("update_after", 3, 1, "a2"),
        ("delete", 4, 2, "b"),
        ("insert", 5, 3, "c"),
    ]
    stamps = [r._commit_timestamp for r in rows]
    assert stamps == sorted(stamps) and stamps[-1] <= before + dt.timedelta(seconds=5)
    assert stamps[2] == stamps[3]  # an update's two halves are committed together
    # SQL over it, as Fluss's docs do
    changelog.createOrReplaceTempView("orders_changelog")
    deleted = spark.sql("SELECT id FROM orders_changelog WHERE _change_type = 'delete'").collect()
    assert [r.id for r in deleted] == [2]

    binlog = reader(spark, shared_cluster).load(f"fluss.{name}$binlog")
    assert binlog.schema.simpleString() == (
        "struct<_change_type:string,_log_offset:bigint,_commit_timestamp:timestamp,"
        "before:struct<id:int,name:string>,after:struct<id:int,name:string>>"
    )
    got = [
        (r._change_type, r._log_offset, r.before and r.before.asDict(), r.after and r.after.asDict())
        for r in binlog.orderBy("_log_offset").collect()
    ]
    assert got == [
        ("insert", 0, None, {"id": 1, "name": "a"}),
        ("insert", 1, None, {"id": 2, "name": "b"}),
        ("update", 3, {"id": 1, "name": "a"}, {"id": 1, "name": "a2"}),
        ("delete", 4, {"id": 2, "name": "b"}, None),
        ("insert", 5, None, {"id": 3, "name": "c"}),
    ]
    assert binlog.select("after.name").where("_change_type = 'update'").first()[0] == "a2"

    # startup modes as for tables: 'latest' reads nothing in a batch
    latest = reader(spark, shared_cluster).option("scan.startup.mode", "latest")
    assert latest.load(f"fluss.{name}$changelog").count() == 0


def test_changelog_of_a_log_table_and_what_is_refused(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("virtual_log")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2)
    append(
        shared_cluster.bootstrap, name, pa.table({"id": [1, 2, 3], "name": ["x", "y", "z"]}, schema=SCHEMA)
    )
    rows = reader(spark, shared_cluster).load(f"fluss.{name}$changelog").collect()
    assert sorted((r._change_type, r.id) for r in rows) == [("insert", 1), ("insert", 2), ("insert", 3)]
    assert all(r._log_offset >= 0 and r._commit_timestamp is not None for r in rows)

    with pytest.raises(Exception, match=r"only available for primary-key tables"):
        reader(spark, shared_cluster).load(f"fluss.{name}$binlog").collect()
    with pytest.raises(Exception, match=r"names no virtual table"):
        reader(spark, shared_cluster).load(f"fluss.{name}$snapshots").collect()
    with pytest.raises(Exception, match=r"read-only"):
        spark.createDataFrame([(9, "n")], "id int, name string").write.format("fluss").option(
            "bootstrap.servers", shared_cluster.bootstrap
        ).mode("append").save(f"fluss.{name}$changelog")


def test_streaming_changelog_and_binlog(spark: Any, shared_cluster: Cluster, tmp_path: Path) -> None:
    name = pk_table_with_history(shared_cluster)
    seen: dict[str, list[tuple[Any, ...]]] = {"changelog": [], "binlog": []}

    def run(kind: str) -> None:
        def collect(df: Any, batch_id: int) -> None:
            for r in df.collect():
                seen[kind].append((r._change_type, r._log_offset))

        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .load(f"fluss.{name}${kind}")
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / kind))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    for kind in seen:
        run(kind)
    # more changes: a restarted stream reads exactly those
    apply_changes(shared_cluster.bootstrap, name, [{"id": 3, "name": "c2"}], [])
    for kind in seen:
        run(kind)
    assert sorted(seen["changelog"], key=lambda x: x[1]) == [
        ("insert", 0),
        ("insert", 1),
        ("update_before", 2),
        ("update_after", 3),
        ("delete", 4),
        ("insert", 5),
        ("update_before", 6),
        ("update_after", 7),
    ]
    assert sorted(seen["binlog"], key=lambda x: x[1]) == [
        ("insert", 0),
        ("insert", 1),
        ("update", 3),
        ("delete", 4),
        ("insert", 5),
        ("update", 7),
    ]
