"""The Spark connector's pure parts, without a SparkSession: options, types, filters, offsets,
bin-packing, changelog folding and write planning."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyspark.sql import datasource as ds
from pyspark.sql import types as st

from strom.common import types as ft
from strom.common.predicate import Compound, Leaf, LeafFunction
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.record.change_type import ChangeType
from strom.spark.changelog import change_type_labels, change_types_from_labels, fold_by_key
from strom.spark.filters import Condition, Op, partition_matches, push
from strom.spark.offsets import BucketKey, OffsetsError, Position, StreamOffsets, admit
from strom.spark.options import ConnectionOptions, ReadOptions, SparkOptionError, StartupMode, WriteOptions
from strom.spark.read_splits import BucketRange, bin_pack
from strom.spark.sink import SchemaMismatchError, SinkPlan, WriteKind
from strom.spark.types import arrow_schema_for, conform, spark_schema


def table_info(schema: Schema, partition_keys: list[str] | None = None, buckets: int = 2) -> TableInfo:
    descriptor = TableDescriptor(schema, partition_keys=partition_keys or [], bucket_count=buckets)
    return TableInfo(TablePath("db", "t"), 7, 1, descriptor, 0, 0)


LOG_SCHEMA = Schema(
    [
        Column("id", ft.BIGINT().copy(False)),
        Column("name", ft.STRING()),
        Column("score", ft.DOUBLE()),
        Column("region", ft.STRING()),
        Column("year", ft.INT()),
    ]
)
PK_SCHEMA = Schema(
    [Column("id", ft.INT()), Column("region", ft.STRING()), Column("v", ft.STRING())],
    primary_key=["id", "region"],
)


# ------------------------------------------------------------------------------ options


def test_read_options_defaults_and_modes() -> None:
    assert ReadOptions.parse({}) == ReadOptions()
    assert ReadOptions.parse({"scan.startup.mode": "EARLIEST"}).startup_mode is StartupMode.EARLIEST
    ts = ReadOptions.parse(
        {"scan.startup.mode": "timestamp", "scan.startup.timestamp": "2023-12-09 23:09:12"}
    )
    assert ts.startup_timestamp_ms == int(
        dt.datetime(2023, 12, 9, 23, 9, 12, tzinfo=dt.UTC).timestamp() * 1000
    )
    # the incremental (time range) options of Fluss's Spark connector imply timestamp mode
    window = ReadOptions.parse(
        {"scan.incremental.start.timestamp": "1000", "scan.incremental.end.timestamp": "2000"}
    )
    assert (window.startup_mode, window.startup_timestamp_ms, window.end_timestamp_ms) == (
        StartupMode.TIMESTAMP,
        1000,
        2000,
    )
    assert ReadOptions.parse({"maxOffsetsPerTrigger": "40"}).max_rows_per_trigger == 40
    assert ReadOptions.parse({"maxRowsPerTrigger": "7", "scan.splits": "3"}).splits == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scan.startup.mode": "newest"}, "'full', 'earliest', 'latest', 'timestamp'"),
        ({"scan.startup.mode": "timestamp"}, "'scan.startup.timestamp' is not set"),
        ({"scan.startup.mode": "latest", "scan.startup.timestamp": "5"}, "needs 'scan.startup.mode'"),
        ({"scan.startup.timestamp": "yesterday"}, "epoch milliseconds"),
        ({"scan.incremental.start.timestamp": "5", "scan.incremental.end.timestamp": "5"}, "strictly before"),
        ({"maxRowsPerTrigger": "0"}, "positive integer"),
        ({"scan.include-change-type": "maybe"}, "'true' or 'false'"),
    ],
)
def test_bad_read_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(SparkOptionError, match=message):
        ReadOptions.parse(options)


def test_connection_options() -> None:
    parsed = ConnectionOptions.parse(
        {"bootstrap.servers": "h:1", "path": "t", "client.request-timeout": "5s"}
    )
    assert parsed.table_path == TablePath("fluss", "t")
    assert parsed.client_config() == {"bootstrap.servers": "h:1", "client.request-timeout": "5s"}
    with pytest.raises(SparkOptionError, match=r"bootstrap\.servers"):
        ConnectionOptions.parse({"table": "a.b"})
    with pytest.raises(SparkOptionError, match="'table'"):
        ConnectionOptions.parse({"bootstrap.servers": "h:1"})
    assert WriteOptions.parse({"sink.partial-update.columns": "id, v"}).partial_update_columns == ("id", "v")


# ------------------------------------------------------------------------------ types


def test_arrow_batches_conform_to_sparks_exact_schema() -> None:
    schema = Schema(
        [
            Column("i8", ft.TINYINT()),
            Column("i", ft.INT().copy(False)),
            Column("s", ft.STRING()),
            Column("c", ft.CHAR(3)),
            Column("d", ft.DECIMAL(10, 2)),
            Column("day", ft.DATE()),
            Column("ts", ft.TIMESTAMP(3)),
            Column("ltz", ft.TIMESTAMP_LTZ(9)),
            Column("b", ft.BINARY(2)),
            Column("arr", ft.ARRAY(ft.BIGINT())),
            Column("m", ft.MAP(ft.STRING().copy(False), ft.INT())),
            Column("row", ft.ROW([ft.DataField("x", ft.INT())])),
        ]
    )
    spark = spark_schema(schema)
    assert spark["i"].nullable is False and spark["ltz"].dataType == st.TimestampType()
    assert spark["ts"].dataType == st.TimestampNTZType() and spark["c"].dataType == st.StringType()
    fluss_arrow = schema.to_arrow_schema()
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "i8": 1,
                "i": 2,
                "s": "x",
                "c": "abc",
                "d": decimal.Decimal("1.25"),
                "day": dt.date(2024, 1, 1),
                "ts": dt.datetime(2024, 1, 1, 1, 2, 3, 4000),
                "ltz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
                "b": b"ab",
                "arr": [1, 2],
                "m": [("k", 1)],
                "row": {"x": 5},
            }
        ],
        schema=fluss_arrow,
    )
    target = arrow_schema_for(spark)
    out = conform(batch, target)
    assert out.schema.equals(target)
    assert out.to_pylist()[0]["ts"] == dt.datetime(2024, 1, 1, 1, 2, 3, 4000)


# ------------------------------------------------------------------------------ filters


def test_filters_prune_partitions_and_become_a_server_predicate() -> None:
    filters = [
        ds.EqualTo(("region",), "eu"),
        ds.GreaterThan(("id",), 10),
        ds.In(("name",), ("a", "b")),
        ds.Not(ds.LessThan(("score",), 1)),
        ds.EqualTo(("nested", "x"), 1),
        ds.StringStartsWith(("name",), "n"),
    ]
    pushed, back = push(filters, LOG_SCHEMA, ["region"], server_side=True)
    # the partition filter is fully handled; everything else Spark checks again
    assert pushed.partition_conditions == (Condition("region", Op.EQ, "eu"),)
    assert back == filters[1:]
    assert isinstance(pushed.predicate, Compound)
    leaves = pushed.predicate.children
    assert leaves[0] == Leaf(LeafFunction.GREATER_THAN, 0, (10,))
    assert leaves[1] == Leaf(LeafFunction.IN, 1, ("a", "b"))
    assert leaves[2] == Leaf(LeafFunction.GREATER_OR_EQUAL, 2, (1.0,))
    assert leaves[3] == Leaf(LeafFunction.STARTS_WITH, 1, ("n",))
    no_server, _ = push(filters, LOG_SCHEMA, ["region"], server_side=False)
    assert no_server.predicate is None


def test_partition_matching() -> None:
    def keeps(spark_filter: ds.Filter, spec: dict[str, str]) -> bool:
        pushed, back = push([spark_filter], LOG_SCHEMA, ["region", "year"], server_side=False)
        assert back == []
        return partition_matches(pushed.partition_conditions, LOG_SCHEMA, spec)

    spec = {"region": "eu", "year": "2024"}
    assert keeps(ds.EqualTo(("region",), "eu"), spec)
    assert not keeps(ds.EqualTo(("region",), "us"), spec)
    assert keeps(ds.GreaterThanOrEqual(("year",), 2024), spec)
    assert not keeps(ds.GreaterThan(("year",), 2024), spec)
    assert not keeps(ds.Not(ds.In(("year",), (2024, 2025))), spec)
    assert not keeps(ds.Not(ds.In(("year",), (2023, None))), spec)  # NULL in the list: never true
    assert not keeps(ds.IsNull(("region",)), spec)
    assert keeps(ds.StringEndsWith(("region",), "u"), spec)
    # a string literal against an INT partition column is not decided here
    _, back = push([ds.EqualTo(("year",), "2024")], LOG_SCHEMA, ["region", "year"], server_side=False)
    assert len(back) == 1


# ------------------------------------------------------------------------------ offsets


def test_offsets_json_round_trip_and_table_check() -> None:
    offsets = StreamOffsets(
        7,
        {
            BucketKey(3, 1): Position(5),
            BucketKey(3, 0): Position(9, snapshot_id=2),
            BucketKey(1, 0): Position(0),
        },
        {3: "eu", 1: "us"},
    )
    doc = offsets.to_json()
    assert doc == {
        "version": 1,
        "table_id": 7,
        "partitions": {
            "1": {"name": "us", "buckets": {"0": 0}},
            "3": {"name": "eu", "buckets": {"0": {"snapshot": 2, "offset": 9}, "1": 5}},
        },
    }
    assert StreamOffsets.from_json(doc, 7) == offsets
    with pytest.raises(OffsetsError, match="dropped and created again"):
        StreamOffsets.from_json(doc, 8)
    plain = StreamOffsets(7, {BucketKey(None, 0): Position(4)})
    assert plain.to_json() == {"version": 1, "table_id": 7, "buckets": {"0": 4}}


def test_admission_control_shares_the_budget() -> None:
    keys = [BucketKey(None, b) for b in range(3)]
    start = StreamOffsets(1, {k: Position(0) for k in keys})
    latest = StreamOffsets(1, {keys[0]: Position(100), keys[1]: Position(5), keys[2]: Position(100)})
    end = admit(start, latest, 40)
    taken = [end.positions[k].offset for k in keys]
    assert sum(taken) == 40 and taken[1] == 5 and abs(taken[0] - taken[2]) <= 1
    assert admit(start, latest, 1000) == latest
    # progress even when the budget is smaller than the number of buckets
    assert start.total_rows_to(admit(start, latest, 1)) == 1


# ------------------------------------------------------------------------------ splits


def test_bin_pack_balances_and_drops_empty_ranges() -> None:
    ranges = [BucketRange(None, None, b, 0, n) for b, n in enumerate([100, 90, 10, 10, 0, 5])]
    groups = bin_pack(ranges, 2)
    assert len(groups) == 2
    loads = sorted(sum(r.records for r in g) for g in groups)
    assert loads == [105, 110]
    assert all(r.records for g in groups for r in g)
    assert bin_pack([BucketRange(None, None, 0, 3, 3)], 4) == []
    # a pending KV snapshot is work even with an empty log range
    assert len(bin_pack([BucketRange(None, None, 0, 3, 3, snapshot_id=1)], 4)) == 1


# ------------------------------------------------------------------------------ changelog


def test_fold_changelog_by_key() -> None:
    rows = pa.table({"id": [1, 2, 1, 1, 3, 2, 2], "v": ["a", "b", "a", "a2", "c", "b", "b"]})
    kinds = [
        ChangeType.INSERT,
        ChangeType.INSERT,
        ChangeType.UPDATE_BEFORE,
        ChangeType.UPDATE_AFTER,
        ChangeType.INSERT,
        ChangeType.DELETE,
        ChangeType.INSERT,
    ]
    types = pa.array([int(k) for k in kinds], pa.int8())
    folded = fold_by_key(rows, types, ["id"])
    assert folded.to_pylist() == [{"id": 1, "v": "a2"}, {"id": 3, "v": "c"}, {"id": 2, "v": "b"}]
    deleted = fold_by_key(rows.slice(0, 6), types.slice(0, 6), ["id"])
    assert sorted(deleted["id"].to_pylist()) == [1, 3]
    labels = change_type_labels(types)
    assert labels.to_pylist() == ["+I", "+I", "-U", "+U", "+I", "-D", "+I"]
    assert change_types_from_labels(labels).equals(types)
    with pytest.raises(ValueError, match=r"\['\*X'\]"):
        change_types_from_labels(pa.array(["+I", "*X"]))


# ------------------------------------------------------------------------------ writes


def test_sink_plan_checks_columns_and_types() -> None:
    log = table_info(LOG_SCHEMA)
    plan = SinkPlan.build(log, pa.schema([("id", pa.int32()), ("name", pa.string())]), WriteOptions())
    prepared = plan.prepare(pa.record_batch({"id": pa.array([1], pa.int32()), "name": ["x"]}))
    assert prepared is not None and prepared[0] is WriteKind.APPEND
    assert prepared[1].to_pylist() == [{"id": 1, "name": "x", "score": None, "region": None, "year": None}]
    with pytest.raises(SchemaMismatchError, match=r"'id' .* is NOT NULL, but 1 rows"):
        plan.prepare(pa.record_batch({"id": pa.array([None], pa.int32()), "name": ["x"]}))
    with pytest.raises(SchemaMismatchError, match=r"\['nope'\] do not exist"):
        SinkPlan.build(log, pa.schema([("id", pa.int64()), ("nope", pa.int64())]), WriteOptions())
    with pytest.raises(SchemaMismatchError, match=r"NOT NULL columns \['id'\]"):
        SinkPlan.build(log, pa.schema([("name", pa.string())]), WriteOptions())
    with pytest.raises(SchemaMismatchError, match="'name' is list"):
        SinkPlan.build(log, pa.schema([("id", pa.int64()), ("name", pa.list_(pa.int8()))]), WriteOptions())
    with pytest.raises(SchemaMismatchError, match="only primary-key tables"):
        SinkPlan.build(log, pa.schema([("id", pa.int64()), ("_change_type", pa.string())]), WriteOptions())


def test_sink_plan_prepares_changelogs() -> None:
    pk = table_info(
        Schema(
            [Column("id", ft.INT()), Column("region", ft.STRING()), Column("v", ft.STRING().copy(False))],
            primary_key=["id", "region"],
        )
    )
    schema = pa.schema(
        [("id", pa.int64()), ("region", pa.string()), ("v", pa.string()), ("_change_type", pa.string())]
    )
    batch = pa.record_batch(
        {
            "id": pa.array([1, 2, 1, 1, 3, 4], pa.int64()),
            "region": ["a"] * 6,
            "v": ["x", "y", "x", "x2", None, "z"],  # a delete needs only its key
            "_change_type": ["+I", "+I", "-U", "+U", "-D", "+I"],
        },
        schema=schema,
    )
    prepared = SinkPlan.build(pk, schema, WriteOptions()).prepare(batch)
    assert prepared is not None
    kind, rows = prepared
    assert kind is WriteKind.CHANGELOG
    assert rows.schema.field("id").type == pa.int32()
    assert rows["id"].to_pylist() == [1, 2, 1, 3, 4]
    kinds = [
        ChangeType.INSERT,
        ChangeType.INSERT,
        ChangeType.UPDATE_AFTER,
        ChangeType.DELETE,
        ChangeType.INSERT,
    ]
    assert rows["_change_type"].to_pylist() == [int(k) for k in kinds]
    ignoring = SinkPlan.build(pk, schema, WriteOptions(ignore_delete=True)).prepare(batch)
    assert ignoring is not None and ignoring[1]["id"].to_pylist() == [1, 2, 1, 4]
    upserts = SinkPlan.build(pk, schema.remove(3), WriteOptions())
    plain = upserts.prepare(batch.drop_columns(["_change_type"]).slice(0, 4))
    assert plain is not None and plain[0] is WriteKind.UPSERT
    with pytest.raises(SchemaMismatchError, match=r"'v' .* is NOT NULL"):
        upserts.prepare(batch.drop_columns(["_change_type"]))
    with pytest.raises(SchemaMismatchError, match=r"sink\.partial-update\.columns"):
        SinkPlan.build(pk, pa.schema([("id", pa.int32()), ("region", pa.string())]), WriteOptions())
    partial = SinkPlan.build(
        pk, pa.schema([("id", pa.int32()), ("region", pa.string())]), WriteOptions(("id", "region"))
    )
    assert partial.columns == ("id", "region")
    with pytest.raises(SchemaMismatchError, match="must include the primary key"):
        SinkPlan.build(pk, schema, WriteOptions(("id", "v")))


def test_exactly_once_producer_ids_and_recovery_multiset() -> None:
    from collections import Counter

    from strom.spark.exactly_once import _key, _missing, enabled, producer_id

    # A restart from the same checkpoint gets the same id; a trailing slash does not matter.
    assert producer_id({"checkpointLocation": "/ck/q1"}) == producer_id({"checkpointLocation": "/ck/q1/"})
    assert producer_id({"checkpointLocation": "/ck/q1"}) != producer_id({"checkpointLocation": "/ck/q2"})
    assert producer_id({"sink.producer-id": "orders_copy", "checkpointLocation": "/x"}) == "orders_copy"
    # Spark's query id (from the JVM glue) wins over the checkpoint location.
    assert producer_id({"__spark.query-id": "6f1c-aa", "checkpointLocation": "/ck/q1"}) == "spark_6f1c-aa"
    with pytest.raises(SparkOptionError, match=r"sink\.producer-id"):
        producer_id({"sink.producer-id": "bad id!"})
    with pytest.raises(SparkOptionError, match="checkpointLocation"):
        producer_id({})
    with pytest.raises(SparkOptionError, match=r"sink\.exactly-once"):
        enabled({"sink.exactly-once": "maybe"})
    # A batch holding a row twice, of which the crashed attempt wrote one copy and another row.
    rows = pa.table({"id": [1, 1, 2, 3], "tags": [["a"], ["a"], None, []]})
    found = Counter(_key(r) for r in [{"id": 1, "tags": ["a"]}, {"id": 3, "tags": []}])
    assert _missing(rows, found).to_pylist() == [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": None}]
