"""Union reads (`scan.union-read`): rows the tiering service already wrote to the lake come from the
lake, the rest from Fluss, and together they are exactly what Fluss holds."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from fluss_helpers import append, apply_changes, run
from harness import Cluster

from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.spark import bridge
from strom.spark.batch_reader import plan_ranges
from strom.spark.lake_source import latest_cut
from strom.spark.options import ConnectionOptions, ReadOptions, SparkOptionError, resolve_lake

LOG_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PK_SCHEMA = pa.schema([("id", pa.int32()), ("balance", pa.float64())])
BUCKETS = 2


def lake_config(base: Path, lake_format: str) -> dict[str, str]:
    if lake_format == "paimon":
        return {
            "datalake.format": "paimon",
            "datalake.paimon.metastore": "filesystem",
            "datalake.paimon.warehouse": str(base / "paimon"),
        }
    return {
        "datalake.format": "iceberg",
        "datalake.iceberg.type": "sql",
        "datalake.iceberg.uri": f"sqlite:///{base}/iceberg_catalog.db",
        "datalake.iceberg.warehouse": f"file://{base}/warehouse",
    }


def create_lake_tables(bootstrap: str) -> None:
    lake = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            fluss.TablePath("fluss", "events"),
            fluss.TableDescriptor(fluss.Schema(LOG_SCHEMA), bucket_count=BUCKETS, properties=lake),
        )
        await admin.create_table(
            fluss.TablePath("fluss", "accounts"),
            fluss.TableDescriptor(
                fluss.Schema(PK_SCHEMA, primary_keys=["id"]), bucket_count=BUCKETS, properties=lake
            ),
        )

    run(bootstrap, body)


def start_tiering(cluster: Cluster, config: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "strom", "tiering", "--bootstrap", cluster.bootstrap]
    args += ["--runner", "local", "--poll-interval", "0.3"]
    for key, value in config.items():
        args += ["--config", f"{key}={value}"]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def events(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"e{i}" for i in ids]})


def connection_of(cluster: Cluster, name: str) -> ConnectionOptions:
    return ConnectionOptions.parse({"bootstrap.servers": cluster.bootstrap, "table": f"fluss.{name}"})


def wait_for_lake(config: dict[str, str], cluster: Cluster, names: list[str], timeout: float = 40) -> None:
    """Until every table has a lake snapshot (a round tiers all of a table's buckets at once)."""
    lake = tuple(config.items())
    deadline = time.monotonic() + timeout
    for name in names:
        info = bridge.table_info(connection_of(cluster, name))
        while latest_cut(lake, info) is None:
            assert time.monotonic() < deadline, f"tiering did not reach {name}"
            time.sleep(0.2)


@pytest.mark.parametrize("lake_format", ["iceberg", "paimon"])
def test_union_read_takes_tiered_rows_from_the_lake_and_the_rest_from_fluss(
    spark: Any, cluster_factory: Any, tmp_path: Path, lake_format: str
) -> None:
    config = lake_config(tmp_path / "lake", lake_format)
    cluster: Cluster = cluster_factory(config=config)
    create_lake_tables(cluster.bootstrap)
    balances: dict[int, float] = {}

    def change_accounts(version: int, keys: range, deletes: list[int]) -> None:
        upserts: list[dict[str, Any]] = [{"id": k, "balance": float(version * 100 + k)} for k in keys]
        apply_changes(cluster.bootstrap, "accounts", upserts, [{"id": k} for k in deletes])
        balances.update({r["id"]: r["balance"] for r in upserts})
        for k in deletes:
            balances.pop(k, None)

    append(cluster.bootstrap, "events", events(range(0, 200)))
    change_accounts(1, range(0, 40), [])
    change_accounts(2, range(0, 40, 3), [5, 7])

    log = tmp_path / "tiering.log"
    service = start_tiering(cluster, config, log)
    try:
        wait_for_lake(config, cluster, ["events", "accounts"])
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)

    # After tiering stopped: these live only in Fluss.
    append(cluster.bootstrap, "events", events(range(200, 300)))
    change_accounts(3, range(20, 50), [0, 1, 21])

    # No lake option: the coordinator serves lake-enabled tables with the cluster's lake options as
    # table.datalake.<format>.* properties, and the union read takes them from there (as in Fluss).
    options = {"bootstrap.servers": cluster.bootstrap, "scan.union-read": "true"}
    properties = dict(bridge.table_info(connection_of(cluster, "events")).descriptor.properties)
    assert properties["table.datalake.format"] == lake_format
    assert {
        f"table.{k}": v for k, v in config.items() if k != "datalake.format"
    }.items() <= properties.items()

    def read(name: str, **extra: str) -> Any:
        reader = spark.read.format("fluss")
        for key, value in {**options, **extra}.items():
            reader = reader.option(key, value)
        return reader.load(f"fluss.{name}")

    # The plan: what was tiered comes from the lake (one pinned snapshot), only the rest from Fluss.
    # accounts: 40 inserts, 14 updates (-U and +U each), 2 deletes.
    for name, tiered in (("events", 200), ("accounts", 40 + 14 * 2 + 2)):
        connection = connection_of(cluster, name)
        ranges = plan_ranges(connection, bridge.table_info(connection), ReadOptions.parse(options))
        assert sum(r.lake_records for r in ranges) == tiered, ranges
        assert len({r.lake_snapshot_id for r in ranges if r.lake_records}) == 1, ranges
        assert sum(r.records for r in ranges) > 0, ranges

    # Log table: every row exactly once; the ones below each bucket's Fluss start came from the lake.
    rows = read("events", **{"scan.include-metadata": "true"}).collect()
    assert sorted(r["id"] for r in rows) == list(range(300))
    connection = connection_of(cluster, "events")
    plan = plan_ranges(connection, bridge.table_info(connection), ReadOptions.parse(options))
    starts = {r.bucket: r.start for r in plan}
    from_lake = [r for r in rows if r["__offset"] < starts[r["__bucket"]]]
    assert from_lake and all(r["name"] == f"e{r['id']}" for r in from_lake)
    assert all(r["__timestamp"] is not None for r in from_lake)

    # Primary-key table: the current row of every key (lake state + changelog folded on top).
    current = {r["id"]: r["balance"] for r in read("accounts").collect()}
    assert current == balances

    # Without the option the same content comes from Fluss alone.
    plain = spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap).load("fluss.accounts")
    assert {r["id"]: r["balance"] for r in plain.collect()} == balances


def test_union_read_options() -> None:
    lake = {"datalake.format": "Iceberg", "datalake.iceberg.uri": "sqlite:///x", "datalake.paimon.x": "y"}
    parsed = ReadOptions.parse({"scan.union-read": "true", **lake})
    assert parsed.union_read
    assert dict(parsed.lake) == {"datalake.format": "iceberg", "datalake.iceberg.uri": "sqlite:///x"}
    assert ReadOptions.parse(lake).lake == ()
    # without lake options the table's properties must say where its lake is
    assert ReadOptions.parse({"scan.union-read": "true"}).lake == ()
    schema = Schema.from_arrow_schema(LOG_SCHEMA)
    bare = TableInfo(TablePath("fluss", "t"), 1, 1, TableDescriptor(schema, bucket_count=1), 0, 0)
    with pytest.raises(SparkOptionError, match=r"no 'table\.datalake\.format' property"):
        resolve_lake((), bare)
    described = TableInfo(
        TablePath("fluss", "t"),
        1,
        1,
        TableDescriptor(
            schema,
            bucket_count=1,
            properties={"table.datalake.format": "paimon", "table.datalake.paimon.warehouse": "/w"},
        ),
        0,
        0,
    )
    assert dict(resolve_lake((), described)) == {
        "datalake.format": "paimon",
        "datalake.paimon.warehouse": "/w",
    }
    assert resolve_lake(parsed.lake, described) == parsed.lake  # explicit options win
    with pytest.raises(SparkOptionError, match=r"scan\.union-read"):
        ReadOptions.parse({"scan.union-read": "true", "scan.startup.mode": "latest", **lake})


def test_streaming_union_read_returns_what_fluss_already_expired(
    spark: Any, cluster_factory: Any, tmp_path: Path
) -> None:
    config = lake_config(tmp_path / "lake", "iceberg")
    cluster: Cluster = cluster_factory(
        config={**config, "log.segment.file-size": "2kb", "log.retention.check-interval": "200ms"}
    )
    name = "expiring"
    # long enough for a stream to start before rows written just before it expire
    properties = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s", "table.log.ttl": "15s"}

    async def create(connection: Any) -> None:
        await connection.get_admin().create_table(
            fluss.TablePath("fluss", name),
            fluss.TableDescriptor(fluss.Schema(LOG_SCHEMA), bucket_count=1, properties=properties),
        )

    run(cluster.bootstrap, create)
    for start in range(0, 200, 20):  # small batches, so that closed segments can expire
        append(cluster.bootstrap, name, events(range(start, start + 20)))

    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        info = bridge.table_info(connection_of(cluster, name))
        deadline = time.monotonic() + 60
        while True:
            cut = latest_cut(tuple(config.items()), info)
            if cut is not None and cut.bucket_offsets.get((None, 0)) == 200:
                break
            assert time.monotonic() < deadline, "tiering did not reach offset 200"
            time.sleep(0.3)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)

    async def earliest(connection: Any) -> int:
        offsets = await connection.get_admin().list_offsets(
            fluss.TablePath("fluss", name), [0], fluss.OffsetSpec.earliest()
        )
        return int(offsets[0])

    deadline = time.monotonic() + 60
    while run(cluster.bootstrap, earliest) == 0:  # the TTL removes the oldest segments from Fluss
        assert time.monotonic() < deadline, "retention never expired a segment"
        time.sleep(0.5)

    seen: list[Any] = []

    def stream() -> list[int]:
        seen.clear()
        query = (
            spark.readStream.format("fluss")
            .option("bootstrap.servers", cluster.bootstrap)
            .option("table", f"fluss.{name}")
            .option("scan.startup.mode", "full")
            .option("scan.union-read", "true")
            .load()
            .writeStream.foreachBatch(lambda df, _: seen.append(df.toArrow()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted(i for table in seen for i in table["id"].to_pylist())

    # every tiered row once: those Fluss expired and those it still has come from the lake alone
    assert stream() == list(range(200))
    # the same query goes on in Fluss from the lake's offsets
    append(cluster.bootstrap, name, events(range(200, 300)))
    assert stream() == list(range(200, 300))


# a round of fluss.events that tiered records (not one that found nothing new)
TIERED_EVENTS = re.compile(r"tiered fluss\.events: \d")


def lake_ids(lake_format: str, warehouse: Path) -> list[int]:
    """The ids in fluss.events as the format's own reader sees them."""
    if lake_format == "lance":
        import lance

        rows = lance.dataset(str(warehouse / "fluss" / "events.lance")).to_table(columns=["id"])
    else:
        from deltalake import DeltaTable

        rows = DeltaTable(str(warehouse / "fluss" / "events")).to_pyarrow_table(columns=["id"])
    return sorted(rows.column("id").to_pylist())


@pytest.mark.parametrize("lake_format", ["lance", "delta"])
def test_lance_and_delta_tier_exactly_once_across_a_killed_service_and_union_read(
    spark: Any, cluster_factory: Any, tmp_path: Path, lake_format: str
) -> None:
    """pyfluss writes a lake-enabled log table of a Lance or Delta cluster (and a primary-key table:
    refused by Lance, merged by key in Delta); the tiering service is SIGKILLed after its first round,
    then again in a round, and started again; the format's own reader then holds every record
    once, and a Spark union read takes those from the lake's planned version and the newer ones from
    Fluss."""
    warehouse = tmp_path / lake_format
    config = {"datalake.format": lake_format, f"datalake.{lake_format}.warehouse": str(warehouse)}
    cluster: Cluster = cluster_factory(config=config)
    lake = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
    refused: list[str] = []

    async def create(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            fluss.TablePath("fluss", "events"),
            # compaction and snapshot expiry after every round, between the kills
            fluss.TableDescriptor(
                fluss.Schema(LOG_SCHEMA),
                bucket_count=BUCKETS,
                properties={**lake, "table.datalake.auto-maintenance": "true"},
            ),
        )
        try:
            await admin.create_table(
                fluss.TablePath("fluss", "accounts"),
                fluss.TableDescriptor(
                    fluss.Schema(PK_SCHEMA, primary_keys=["id"]), bucket_count=BUCKETS, properties=lake
                ),
            )
        except Exception as e:  # pyfluss's FlussError
            refused.append(str(e))

    run(cluster.bootstrap, create)
    balances: dict[int, float] = {}
    if lake_format == "lance":
        assert refused and "primary-key" in refused[0]
    else:
        assert not refused
        upserts: list[dict[str, Any]] = [{"id": k, "balance": float(k)} for k in range(30)]
        apply_changes(cluster.bootstrap, "accounts", upserts, [])
        apply_changes(cluster.bootstrap, "accounts", [{"id": 3, "balance": 33.0}], [{"id": 4}])
        balances = {k: float(k) for k in range(30) if k != 4} | {3: 33.0}
    append(cluster.bootstrap, "events", events(range(0, 300)))
    log = tmp_path / "tiering.log"
    log.touch()
    service = start_tiering(cluster, config, log)
    try:
        wait_for_lake(config, cluster, ["events", *(["accounts"] if balances else [])])
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait(30)
    # then killed again in a round: it commits one, gets new records and is killed in the next
    service = start_tiering(cluster, config, log)
    try:
        rounds = len(TIERED_EVENTS.findall(log.read_text()))
        append(cluster.bootstrap, "events", events(range(300, 400)))
        deadline = time.monotonic() + 30
        while len(TIERED_EVENTS.findall(log.read_text())) == rounds:
            assert time.monotonic() < deadline, "the tiering service made no progress"
            time.sleep(0.1)
        append(cluster.bootstrap, "events", events(range(400, 500)))
        time.sleep(0.4)
    finally:
        service.send_signal(signal.SIGKILL)
        service.wait(30)
    service = start_tiering(cluster, config, log)
    try:
        deadline = time.monotonic() + 60
        while (ids := lake_ids(lake_format, warehouse)) != list(range(500)):
            assert len(ids) <= 500, "records were tiered twice"
            assert time.monotonic() < deadline, "the lake never caught up with Fluss"
            time.sleep(0.3)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)
    append(cluster.bootstrap, "events", events(range(500, 600)))  # only in Fluss

    connection = connection_of(cluster, "events")
    info = bridge.table_info(connection)
    # Lance is stamped on the table as Fluss does; Delta is not (pyfluss refuses a format it does not
    # know when it upserts or looks up), and the union read finds the lake from the served options.
    assert info.descriptor.properties.get("table.datalake.format") == (
        None if lake_format == "delta" else "lance"
    )
    options = {"bootstrap.servers": cluster.bootstrap, "scan.union-read": "true"}
    plan = plan_ranges(connection, info, ReadOptions.parse(options))
    assert sum(r.lake_records for r in plan) == 500, plan
    reader = spark.read.format("fluss").option("scan.include-metadata", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load("fluss.events").collect()
    assert sorted(r["id"] for r in rows) == list(range(600))
    starts = {r.bucket: r.start for r in plan}
    from_lake = [r for r in rows if r["__offset"] < starts[r["__bucket"]]]
    assert len(from_lake) == 500 and all(r["name"] == f"e{r['id']}" for r in from_lake)
    if balances:  # Delta's merged state plus Fluss's changelog after it: the current row of every key
        apply_changes(cluster.bootstrap, "accounts", [{"id": 5, "balance": 55.0}], [{"id": 6}])
        balances = {k: v for k, v in balances.items() if k != 6} | {5: 55.0}
        accounts = spark.read.format("fluss")
        for key, value in options.items():
            accounts = accounts.option(key, value)
        assert {r["id"]: r["balance"] for r in accounts.load("fluss.accounts").collect()} == balances
        from deltalake import DeltaTable

        lake_accounts = DeltaTable(str(warehouse / "fluss" / "accounts")).to_pyarrow_table().to_pylist()
        assert len(lake_accounts) == 29 and {r["id"]: r["balance"] for r in lake_accounts}[3] == 33.0
