"""Primary-key tables through the `fluss` Spark data source: a batch read is the table's current
rows, a stream is its changelog, and both agree with pyfluss lookups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fluss_helpers import apply_changes, create_table, lookup_all, unique
from harness import Cluster

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])


def row(i: int, version: int = 0) -> dict[str, Any]:
    return {"id": i, "name": f"v{version}-{i}", "score": float(i * 10 + version)}


def as_dict(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in rows}


# pyfluss lookups cost ~0.1 s each here: check every row against a model of the changes applied,
# and a sample of keys (updated, deleted, untouched, never written) against lookups.
SAMPLE = [{"id": i} for i in (0, 1, 2, 3, 6, 11, 42, 99, 250, 297, 299, 333, 399, 1000)]


def change(
    cluster: Cluster,
    name: str,
    model: dict[int, dict[str, Any]],
    upserts: list[dict[str, Any]],
    deletes: list[int],
) -> None:
    apply_changes(cluster.bootstrap, name, upserts, [{"id": i} for i in deletes])
    model.update({r["id"]: r for r in upserts})
    for i in deletes:
        model.pop(i, None)


def fill(cluster: Cluster, name: str) -> dict[int, dict[str, Any]]:
    model: dict[int, dict[str, Any]] = {}
    change(cluster, name, model, [row(i) for i in range(300)], [])
    change(cluster, name, model, [row(i, 1) for i in range(0, 300, 3)], list(range(1, 300, 5)))
    return model


def check_sample(cluster: Cluster, name: str, rows: dict[int, dict[str, Any]]) -> None:
    found = as_dict(lookup_all(cluster.bootstrap, name, SAMPLE))
    assert found == {k["id"]: rows[k["id"]] for k in SAMPLE if k["id"] in rows}


def load(spark: Any, cluster: Cluster, name: str, **options: str) -> Any:
    read = spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap).option("table", name)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_batch_read_is_the_current_rows(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_pk")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=3, primary_keys=["id"])
    expected = fill(shared_cluster, name)
    assert len(expected) == 300 - 60

    df = load(spark, shared_cluster, name)
    assert df.schema.simpleString() == "struct<id:int,name:string,score:double>"
    got = df.toArrow().to_pylist()
    assert len(got) == len(expected) and as_dict(got) == expected
    check_sample(shared_cluster, name, as_dict(got))
    assert df.where("id < 10").count() == len([i for i in expected if i < 10])

    # the changes themselves: 300 inserts, 100 updates (-U and +U), 60 deletes
    changes = load(spark, shared_cluster, name, **{"scan.include-change-type": "true"}).toArrow()
    counts = {k: changes["_change_type"].to_pylist().count(k) for k in ("+I", "-U", "+U", "-D")}
    assert counts == {"+I": 300, "-U": 100, "+U": 100, "-D": 60}


def test_stream_changelog_applied_to_a_dict_equals_lookups(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    name = unique("spark_pk_stream")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2, primary_keys=["id"])
    model = fill(shared_cluster, name)
    state: dict[int, dict[str, Any]] = {}

    def apply(df: Any, batch_id: int) -> None:
        for change in df.toArrow().to_pylist():
            kind = change.pop("_change_type")
            if kind in ("+I", "+U"):
                state[change["id"]] = change
            elif kind == "-D":
                del state[change["id"]]

    def run_stream() -> None:
        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .option("table", name)
            .option("scan.startup.mode", "earliest")
            .option("scan.include-change-type", "true")
            .option("maxRowsPerTrigger", "300")
            .load()
            .writeStream.foreachBatch(apply)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_stream()
    assert state == model

    # more changes between runs: the restarted stream picks up exactly those
    change(shared_cluster, name, model, [row(i, 2) for i in range(250, 400)], [0, 3])
    run_stream()
    assert state == model
    check_sample(shared_cluster, name, state)


def test_stream_of_a_primary_key_table_needs_the_change_type(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_pk_plain")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=1, primary_keys=["id"])
    stream = spark.readStream.format("fluss").option("bootstrap.servers", shared_cluster.bootstrap).load(name)
    with pytest.raises(Exception, match=r"scan\.include-change-type"):
        stream.writeStream.foreachBatch(lambda df, i: None).trigger(
            availableNow=True
        ).start().awaitTermination()


def test_spark_writes_upserts_deletes_and_partial_updates(spark: Any, shared_cluster: Cluster) -> None:
    name = unique("spark_pk_sink")
    create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2, primary_keys=["id"])

    def write(table: pa.Table, **options: str) -> None:
        out = spark.createDataFrame(table.to_pandas()).write.format("fluss")
        for key, value in {"bootstrap.servers": shared_cluster.bootstrap, **options}.items():
            out = out.option(key, value)
        out.mode("append").save(name)

    model = {i: row(i) for i in range(100)}
    write(pa.Table.from_pylist(list(model.values()), schema=SCHEMA))
    # a changelog: updates, deletes (only the key matters) and -U rows that are skipped
    changes = [
        {**row(5), "_change_type": "-U"},
        {**row(5, 1), "_change_type": "+U"},
        {"id": 6, "name": None, "score": None, "_change_type": "-D"},
        {**row(200, 1), "_change_type": "+I"},
        {"id": 200, "name": None, "score": None, "_change_type": "-D"},
        {**row(201, 1), "_change_type": "+I"},
    ]
    write(pa.Table.from_pylist(changes, schema=SCHEMA.append(pa.field("_change_type", pa.string()))))
    model[5] = row(5, 1)
    del model[6]
    model[201] = row(201, 1)
    # a partial update of one column keeps the others
    write(
        pa.table({"id": pa.array([1, 2], pa.int32()), "score": [-1.0, -2.0]}),
        **{"sink.partial-update.columns": "id,score"},
    )
    model[1] = {**model[1], "score": -1.0}
    model[2] = {**model[2], "score": -2.0}

    assert as_dict(load(spark, shared_cluster, name).toArrow().to_pylist()) == model
    check_sample(shared_cluster, name, model)


def test_changelog_stream_replicates_a_primary_key_table(
    spark: Any, shared_cluster: Cluster, tmp_path: Path
) -> None:
    source, target = unique("spark_pk_src"), unique("spark_pk_dst")
    for name in (source, target):
        create_table(shared_cluster.bootstrap, name, SCHEMA, buckets=2, primary_keys=["id"])
    model = fill(shared_cluster, source)

    def replicate() -> None:
        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .option("scan.include-change-type", "true")
            .load(source)
            .writeStream.format("fluss")
            .option("bootstrap.servers", shared_cluster.bootstrap)
            .option("table", target)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    replicate()
    assert as_dict(load(spark, shared_cluster, target).toArrow().to_pylist()) == model
    change(shared_cluster, source, model, [row(i, 3) for i in range(0, 50)], [9, 12, 297])
    replicate()
    assert as_dict(load(spark, shared_cluster, target).toArrow().to_pylist()) == model


def test_batch_read_starts_from_kv_snapshots(spark: Any, cluster_factory: Any) -> None:
    """With KV snapshots, a read takes each bucket's snapshot and only the changelog after it."""
    import asyncio

    from strom.client import Connection

    cluster: Cluster = cluster_factory(tablet_servers=1, config={"kv.snapshot.interval": "1s"})
    name = unique("spark_snap")
    create_table(cluster.bootstrap, name, SCHEMA, buckets=2, primary_keys=["id"])
    expected = fill(cluster, name)

    async def snapshots() -> dict[int, int]:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as client:
            for _ in range(100):
                found = await client.get_admin().get_latest_kv_snapshots(f"fluss.{name}")
                if len(found.snapshot_ids) == 2 and min(found.log_offsets.values()) > 0:
                    return dict(found.log_offsets)
                await asyncio.sleep(0.2)
        raise AssertionError("no KV snapshots were taken")

    covered = asyncio.run(snapshots())
    change(cluster, name, expected, [row(i, 2) for i in range(0, 300, 7)], list(range(2, 300, 11)))

    got = load(spark, cluster, name).toArrow().to_pylist()
    assert len(got) == len(expected) and as_dict(got) == expected
    # the changes a read of the changelog only returns start where the snapshots end
    changes = load(
        spark, cluster, name, **{"scan.include-change-type": "true", "scan.include-metadata": "true"}
    ).toArrow()
    offsets = [o for o in changes["__offset"].to_pylist() if o is not None and o >= 0]
    snapshot_rows = [o for o in changes["__offset"].to_pylist() if o is not None and o < 0]
    assert snapshot_rows, "no rows came from a KV snapshot"
    # (a newer snapshot may already cover the later changes too: snapshots run every second here)
    assert not offsets or min(offsets) >= min(covered.values())
    assert len(offsets) < 300 + 200 + 60  # far less than the whole changelog was read
