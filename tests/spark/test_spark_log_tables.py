"""The `fluss` Spark data source against a real cluster: log tables read, streamed and written by
Spark and compared with what the official pyfluss client sees."""

from __future__ import annotations

import datetime as dt
import decimal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fluss_helpers import add_partition, append, create_table, read_log, unique
from harness import Cluster

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("tag", pa.int32())])


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name-{i}" for i in ids],
            "score": [i * 0.5 for i in ids],
            "tag": pa.array([i % 7 for i in ids], pa.int32()),
        },
        schema=SCHEMA,
    )


def reader(spark: Any, cluster: Cluster, table: str, **options: str) -> Any:
    read = spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load(table)


def test_batch_read_equals_pyfluss(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_log")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=3)
    append(shared_cluster.bootstrap, name, rows(0, 3000))
    append(shared_cluster.bootstrap, name, rows(3000, 2000))

    df = reader(spark, shared_cluster, f"fluss.{name}")
    assert df.schema.simpleString() == "struct<id:bigint,name:string,score:double,tag:int>"
    got = df.toArrow()
    expected = read_log(shared_cluster.bootstrap, name, 3)
    assert got.num_rows == 5000
    assert got.sort_by("id").equals(expected.sort_by("id"))

    # projection and filters, checked by Spark
    projected = df.select("name", "tag").where("id >= 4990").toArrow()
    assert projected.sort_by("name").equals(rows(4990, 10).select(["name", "tag"]).sort_by("name"))
    matching = len([i for i in range(5000) if str(i).startswith("49") and i % 7 == 3])
    assert df.where("name like 'name-49%' and tag = 3").count() == matching

    # pushed to the server too (it skips batches that cannot match; Spark still checks the rows)
    pushed = reader(spark, shared_cluster, name, **{"scan.filter-pushdown": "true"})
    assert pushed.where("name like 'name-49%' and tag = 3").count() == matching


def test_batch_read_is_bounded_by_planning_offsets_and_time(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_bounds")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2)
    append(shared_cluster.bootstrap, name, rows(0, 100))
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    append(shared_cluster.bootstrap, name, rows(100, 50))

    since = reader(
        spark,
        shared_cluster,
        name,
        **{"scan.startup.mode": "timestamp", "scan.startup.timestamp": str(between)},
    )
    assert sorted(since.toArrow()["id"].to_pylist()) == list(range(100, 150))
    before = reader(spark, shared_cluster, name, **{"scan.incremental.end.timestamp": str(between)})
    assert sorted(before.toArrow()["id"].to_pylist()) == list(range(100))
    assert reader(spark, shared_cluster, name, **{"scan.startup.mode": "latest"}).count() == 0

    # a DataFrame reads the cut taken when it was loaded; a new load sees the new rows
    loaded = reader(spark, shared_cluster, name)
    append(shared_cluster.bootstrap, name, rows(150, 10))
    assert loaded.count() == 150
    assert loaded.where("id >= 100").count() == 50
    assert reader(spark, shared_cluster, name).count() == 160

    with_meta = reader(spark, shared_cluster, name, **{"scan.include-metadata": "true"}).toArrow()
    assert with_meta.column_names[-3:] == ["__bucket", "__offset", "__timestamp"]
    per_bucket: dict[int, list[int]] = {}
    for bucket, offset in zip(
        with_meta["__bucket"].to_pylist(), with_meta["__offset"].to_pylist(), strict=True
    ):
        per_bucket.setdefault(bucket, []).append(offset)
    assert all(sorted(o) == list(range(len(o))) for o in per_bucket.values())


def test_partitioned_table_with_partition_pruning(spark: Any, shared_cluster: Cluster) -> None:
    from strom.spark.batch_reader import FlussPushdownReader
    from strom.spark.datasource import FlussDataSource
    from strom.spark.read_splits import SplitGroup

    name = unique("spark_parted")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.int32())])
    regions = ["eu", "us", "ap"]
    create_table(
        shared_cluster.bootstrap,
        name,
        schema,
        buckets=2,
        partition_keys=["region"],
        partitions=[{"region": r} for r in regions],
    )
    data = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "region": [regions[i % 3] for i in range(300)],
            "v": pa.array([i % 11 for i in range(300)], pa.int32()),
        }
    )
    for region in regions:
        # pyfluss routes a whole Arrow table to one partition: write each partition's rows apart
        append(shared_cluster.bootstrap, name, data.filter(pc.equal(data["region"], region)))

    df = reader(spark, shared_cluster, name)
    assert (
        df.toArrow()
        .sort_by("id")
        .equals(read_log(shared_cluster.bootstrap, name, 2, partitioned=True).sort_by("id"))
    )
    eu = df.where("region = 'eu'").toArrow()
    assert sorted(eu["id"].to_pylist()) == list(range(0, 300, 3))
    assert df.count() == 300  # the same DataFrame after a filtered query: still everything

    # opt-in pruning by pushed filters: one query per loaded DataFrame
    pruned = reader(spark, shared_cluster, name, **{"scan.filter-pushdown": "true"})
    assert pruned.where("region in ('us', 'ap') and v = 1").count() == len(
        [i for i in range(300) if i % 3 and i % 11 == 1]
    )

    # the plan itself only holds the partitions the filter can match
    from pyspark.sql.datasource import EqualTo, In

    source = FlussDataSource(
        {"bootstrap.servers": shared_cluster.bootstrap, "table": name, "scan.filter-pushdown": "true"}
    )
    source.schema()
    batch = source.reader(df.schema)
    assert isinstance(batch, FlussPushdownReader)
    back = list(batch.pushFilters([EqualTo(("region",), "eu"), In(("v",), (1, 2))]))
    assert back == [In(("v",), (1, 2))]
    groups = batch.partitions()
    assert all(isinstance(g, SplitGroup) for g in groups)
    planned = [r for group in groups if isinstance(group, SplitGroup) for r in group.ranges]
    assert {r.partition_name for r in planned} == {"eu"}
    assert sum(r.records for r in planned) == 100


def test_stream_available_now_restarts_without_gaps_or_repeats(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    name = unique("spark_stream")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=3)
    append(shared_cluster.bootstrap, name, rows(0, 1000))
    seen: list[pa.Table] = []
    batches: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.append(df.toArrow())  # one action per micro-batch
        batches.append(batch_id)

    def run_stream() -> None:
        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .option("table", name)
            .option("scan.startup.mode", "earliest")
            .option("maxRowsPerTrigger", "400")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_stream()
    first = pa.concat_tables(seen)
    assert sorted(first["id"].to_pylist()) == list(range(1000))
    assert len([t for t in seen if t.num_rows]) == 3  # 400 + 400 + 200: admission control

    seen.clear()
    append(shared_cluster.bootstrap, name, rows(1000, 500))
    run_stream()
    second = pa.concat_tables(seen)
    assert sorted(second["id"].to_pylist()) == list(range(1000, 1500))


def test_spark_writes_are_visible_to_pyfluss(spark: Any, shared_cluster: Cluster, tmp_path: Path) -> None:
    name = unique("spark_sink")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2)
    df = spark.createDataFrame(rows(0, 2000).to_pandas()).repartition(2)
    df.write.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).mode("append").save(name)
    assert read_log(shared_cluster.bootstrap, name, 2).sort_by("id").equals(rows(0, 2000))

    # a stream from one table into another, through the streaming Arrow writer
    target = unique("spark_sink_stream")
    create_table(shared_cluster.bootstrap, target, SCHEMA, buckets=2)
    query = (
        spark.readStream.format("fluss")
        .option("bootstrap.servers", shared_cluster.bootstrap)
        .option("table", name)
        .load()
        .where("tag = 0")
        .writeStream.format("fluss")
        .option("bootstrap.servers", shared_cluster.bootstrap)
        .option("table", target)
        .option("checkpointLocation", str(tmp_path / "sink-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = read_log(shared_cluster.bootstrap, target, 2)
    expected = rows(0, 2000).filter(pc.equal(rows(0, 2000)["tag"], 0))
    assert copied.sort_by("id").equals(expected)


def test_clear_errors(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_errors")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=1)
    with pytest.raises(Exception, match="does not exist"):
        reader(spark, shared_cluster, f"fluss.{unique('missing')}").count()
    good = spark.createDataFrame(rows(0, 3).to_pandas())
    write = (
        good.write.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).option("table", name)
    )
    with pytest.raises(Exception, match="cannot be overwritten"):
        write.mode("overwrite").save()
    bad = good.withColumnRenamed("score", "points")
    with pytest.raises(Exception, match=r"\['points'\] do not exist"):
        bad.write.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).mode("append").save(
            name
        )


def test_every_type_round_trips_and_a_schema_projects(spark: Any, shared_cluster: Cluster) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("b", pa.bool_()),
            ("i8", pa.int8()),
            ("i16", pa.int16()),
            ("f", pa.float32()),
            ("d", pa.decimal128(10, 2)),
            ("day", pa.date32()),
            ("t", pa.time32("ms")),
            ("ts", pa.timestamp("us")),
            ("ltz", pa.timestamp("us", tz="UTC")),
            ("bin", pa.binary()),
            ("arr", pa.list_(pa.int32())),
            ("s", pa.string()),
        ]
    )
    first = {
        "id": 1,
        "b": True,
        "i8": 1,
        "i16": 2,
        "f": 1.5,
        "d": decimal.Decimal("1.25"),
        "day": dt.date(2024, 1, 2),
        "t": dt.time(1, 2, 3, 4000),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        "ltz": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "bin": b"xy",
        "arr": [1, 2],
        "s": "a",
    }
    data = pa.Table.from_pylist([first, {"id": 2}], schema=schema)
    source, target = unique("spark_types"), unique("spark_types_copy")
    for name in (source, target):
        create_table(shared_cluster.bootstrap, name, schema, buckets=1)
    append(shared_cluster.bootstrap, source, data)

    df = reader(spark, shared_cluster, source)
    assert df.schema.simpleString() == (
        "struct<id:bigint,b:boolean,i8:tinyint,i16:smallint,f:float,d:decimal(10,2),day:date,t:time(3),"
        "ts:timestamp_ntz,ltz:timestamp,bin:binary,arr:array<int>,s:string>"
    )
    assert not df.schema["id"].nullable
    assert df.toArrow().to_pylist() == data.to_pylist()
    df.write.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).mode("append").save(target)
    assert read_log(shared_cluster.bootstrap, target, 1).equals(data)

    # a schema naming some columns is a projection fetched from the server
    projected = (
        spark.read.format("fluss")
        .schema("s string, id bigint")
        .option("bootstrap.servers", shared_cluster.bootstrap)
        .load(source)
    )
    assert projected.toArrow().to_pylist() == [{"s": "a", "id": 1}, {"s": None, "id": 2}]


def test_stream_picks_up_new_partitions(spark: Any, shared_cluster: Cluster, tmp_path: Path) -> None:
    name = unique("spark_stream_parted")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    create_table(
        shared_cluster.bootstrap,
        name,
        schema,
        buckets=2,
        partition_keys=["region"],
        partitions=[{"region": "eu"}],
    )

    def batch(ids: range, region: str) -> pa.Table:
        return pa.table({"id": pa.array(ids, pa.int64()), "region": [region] * len(ids)})

    append(shared_cluster.bootstrap, name, batch(range(0, 50), "eu"))
    seen: list[pa.Table] = []

    def run_stream() -> None:
        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .load(name)
            .writeStream.foreachBatch(lambda df, _: seen.append(df.toArrow()))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_stream()
    add_partition(shared_cluster.bootstrap, name, {"region": "us"})
    append(shared_cluster.bootstrap, name, batch(range(50, 80), "us"))
    append(shared_cluster.bootstrap, name, batch(range(80, 90), "eu"))
    run_stream()
    ids = pa.concat_tables(seen)["id"].to_pylist()
    assert sorted(ids) == list(range(90))
