"""An aggregation merge-engine table used as a user would: pyfluss creates it with `fields.<col>.agg`
options and upserts into it; lookups, the changelog scan and the Iceberg lake (pyiceberg and DuckDB)
show the aggregated rows; a SIGKILLed tablet server comes back with the same aggregates."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import duckdb
import fluss
import pyarrow as pa
from harness import Cluster
from test_tiering_service import lake_config, lake_rows, session, start_tiering

SCHEMA = pa.schema(
    [
        ("product", pa.int32()),
        ("sales", pa.int64()),
        ("price", pa.float64()),
        ("tags", pa.string()),
        ("note", pa.string()),  # no function: last_value_ignore_nulls
    ]
)
PATH = fluss.TablePath("fluss", "product_stats")
PROPERTIES = {
    "table.merge-engine": "aggregation",
    "fields.sales.agg": "sum",
    "fields.price.agg": "max",
    "fields.tags.agg": "listagg",
    "fields.tags.listagg.delimiter": "|",
    "table.datalake.enabled": "true",
    "table.datalake.freshness": "1s",
}
UPSERTS = [
    {"product": 1, "sales": 15, "price": 23.0, "tags": "new", "note": "a"},
    {"product": 2, "sales": 1, "price": 5.0, "tags": None, "note": "x"},
    {"product": 1, "sales": 20, "price": 30.2, "tags": "sale", "note": None},
    {"product": 1, "sales": None, "price": 12.5, "tags": "promo", "note": "b"},
    {"product": 2, "sales": 2, "price": None, "tags": "solo", "note": None},
]
EXPECTED = {
    1: {"product": 1, "sales": 35, "price": 30.2, "tags": "new|sale|promo", "note": "b"},
    2: {"product": 2, "sales": 3, "price": 5.0, "tags": "solo", "note": "x"},
}
COLUMNS = list(EXPECTED[1])


async def changelog(table: Any, expected: int) -> list[tuple[str, dict[str, Any]]]:
    scanner = await table.new_scan().create_log_scanner()
    scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
    seen: list[tuple[str, dict[str, Any]]] = []
    for _ in range(50):
        if len(seen) >= expected:
            break
        records = await scanner.poll(500)
        for bucket in records.buckets():
            seen += [(r.change_type.short_string(), dict(r.row)) for r in records.records(bucket)]
    return seen


async def create_and_upsert(connection: Any) -> None:
    await connection.get_admin().create_table(
        PATH,
        fluss.TableDescriptor(
            fluss.Schema(SCHEMA, primary_keys=["product"]), bucket_count=1, properties=PROPERTIES
        ),
    )
    table = await connection.get_table(PATH)
    writer = table.new_upsert().create_writer()
    for row in UPSERTS:
        writer.upsert(row)
    await writer.flush()


async def lookups(connection: Any) -> dict[int, dict[str, Any] | None]:
    table = await connection.get_table(PATH)
    lookuper = table.new_lookup().create_lookuper()
    return {key: await lookuper.lookup({"product": key}) for key in EXPECTED}


def test_pyfluss_upserts_aggregate_in_lookups_changelog_and_lake(
    cluster_factory: Any, tmp_path: Path, duck: duckdb.DuckDBPyConnection
) -> None:
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(tablet_servers=1, config={**config, "kv.snapshot.interval": "1s"})
    session(cluster, create_and_upsert)
    assert session(cluster, lookups) == EXPECTED

    async def read_changelog(connection: Any) -> list[tuple[str, dict[str, Any]]]:
        return await changelog(await connection.get_table(PATH), 9)

    log = session(cluster, read_changelog)
    assert [kind for kind, _ in log] == ["+I", "+I", "-U", "+U", "-U", "+U", "-U", "+U"]
    after = [row for kind, row in log if kind in ("+I", "+U")]
    assert after[2] == {"product": 1, "sales": 35, "price": 30.2, "tags": "new|sale", "note": "a"}
    assert after[-2:] == [EXPECTED[1], EXPECTED[2]]
    assert log[-1][1] == EXPECTED[2] and log[-2][1] == {**EXPECTED[2], "sales": 1, "tags": None}

    # the aggregates survive a SIGKILL of the only tablet server (snapshot + changelog replay) and
    # aggregation goes on from them
    time.sleep(1.5)
    cluster.kill_tablet_server(0)
    cluster.start_tablet_server(0)
    assert session(cluster, lookups) == EXPECTED

    async def one_more(connection: Any) -> None:
        writer = (await connection.get_table(PATH)).new_upsert().create_writer()
        writer.upsert({"product": 2, "sales": 10, "price": 7.5, "tags": "late", "note": None})
        await writer.flush()

    session(cluster, one_more)
    expected = {**EXPECTED, 2: {"product": 2, "sales": 13, "price": 7.5, "tags": "solo|late", "note": "x"}}
    assert session(cluster, lookups) == expected

    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        deadline = time.monotonic() + 60
        while True:
            by_pyiceberg, by_duckdb, _ = lake_rows(config, duck, "product_stats", COLUMNS)
            if sorted(by_pyiceberg, key=lambda r: r["product"]) == list(expected.values()):
                break
            assert time.monotonic() < deadline, f"the lake never showed the aggregates: {by_pyiceberg}"
            time.sleep(0.5)
        assert sorted(by_duckdb, key=lambda r: r["product"]) == list(expected.values())
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)
