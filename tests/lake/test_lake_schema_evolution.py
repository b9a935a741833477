"""Fluss and the lake evolve together: AddColumn on lake-enabled tables reaches the Iceberg (and Paimon)
table before the system columns, keeping field ids, while tiering goes on; turning
`table.datalake.enabled` on for an existing table creates its lake table and tiers it from its first
offset. Read back with pyiceberg, DuckDB and pypaimon."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from harness import Cluster
from lake_helpers import read_duckdb
from pyiceberg.catalog import load_catalog
from test_tiering_service import iceberg_properties, lake_config, start_tiering

from strom.client import Connection, Schema, TableChange, TableDescriptor

LAKE = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
SYSTEM = ["__bucket", "__offset", "__timestamp"]


def run(cluster: Cluster, body: Callable[[Connection], Any]) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


async def create(conn: Connection, name: str, pk: bool, properties: dict[str, str]) -> None:
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    descriptor = TableDescriptor(
        Schema.from_arrow_schema(schema, primary_key=["id"] if pk else None),
        bucket_count=2,
        properties=properties,
    )
    await conn.get_admin().create_table(f"fluss.{name}", descriptor)


async def write(conn: Connection, name: str, rows: list[dict[str, Any]]) -> None:
    table = await conn.get_table(f"fluss.{name}")
    if table.has_primary_key:
        upserts = table.new_upsert().create_writer()
        for row in rows:
            upserts.upsert(row)
        await upserts.flush()
    else:
        appends = table.new_append().create_writer()
        for row in rows:
            appends.append(row)
        await appends.flush()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_add_column_and_enable_lake_reach_iceberg(
    cluster_factory: Any, tmp_path: Path, duck: duckdb.DuckDBPyConnection
) -> None:
    config = lake_config(tmp_path)
    cluster: Cluster = cluster_factory(tablet_servers=1, config={**config, "kv.snapshot.interval": "1s"})
    catalog = load_catalog(**iceberg_properties(config))

    def lake(name: str, columns: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if not catalog.table_exists(f"fluss.{name}"):
            return [], []
        table = catalog.load_table(f"fluss.{name}")
        if table.current_snapshot() is None:
            return [], []
        present = [c for c in columns if c in table.schema().column_names]
        by_pyiceberg = table.scan(selected_fields=tuple(present)).to_arrow().to_pylist()
        by_duckdb = read_duckdb(duck, table.metadata_location, present)
        return sorted(by_pyiceberg, key=lambda r: r["id"]), sorted(by_duckdb, key=lambda r: r["id"])

    def lake_has(name: str, expected: list[dict[str, Any]]) -> bool:
        columns = list(expected[0])
        py_rows, duck_rows = lake(name, columns)
        return py_rows == expected and duck_rows == expected

    async def setup(conn: Connection) -> None:
        await create(conn, "events", False, LAKE)
        await create(conn, "accounts", True, LAKE)
        await create(conn, "late", False, {})
        await write(conn, "events", [{"id": i, "name": f"e{i}"} for i in range(20)])
        await write(conn, "accounts", [{"id": i, "name": f"a{i}"} for i in range(10)])
        await write(conn, "late", [{"id": i, "name": f"l{i}"} for i in range(15)])

    run(cluster, setup)
    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        wait_for(
            lambda: (
                lake_has("events", [{"id": i, "name": f"e{i}"} for i in range(20)])
                and lake_has("accounts", [{"id": i, "name": f"a{i}"} for i in range(10)])
            ),
            "the lake never caught up before the change",
        )
        before = {f.name: f.field_id for f in catalog.load_table("fluss.events").schema().fields}
        assert not catalog.table_exists("fluss.late")

        async def evolve(conn: Connection) -> None:
            admin = conn.get_admin()
            for name in ("events", "accounts"):
                await admin.alter_table(f"fluss.{name}", [TableChange.add_column("note", "STRING", "added")])
            await admin.alter_table("fluss.late", [TableChange.set_option(k, v) for k, v in LAKE.items()])
            await write(conn, "events", [{"id": i, "name": f"e{i}", "note": f"n{i}"} for i in range(20, 30)])
            # an update of an old key and a new key
            await write(
                conn,
                "accounts",
                [{"id": 3, "name": "a3!", "note": "x"}, {"id": 10, "name": "a10", "note": "y"}],
            )
            await write(conn, "late", [{"id": i, "name": f"l{i}"} for i in range(15, 20)])

        run(cluster, evolve)
        events = [{"id": i, "name": f"e{i}", "note": None} for i in range(20)] + [
            {"id": i, "name": f"e{i}", "note": f"n{i}"} for i in range(20, 30)
        ]
        accounts = [{"id": i, "name": f"a{i}", "note": None} for i in range(10)] + [
            {"id": 10, "name": "a10", "note": "y"}
        ]
        accounts[3] = {"id": 3, "name": "a3!", "note": "x"}
        late = [{"id": i, "name": f"l{i}"} for i in range(20)]
        wait_for(
            lambda: lake_has("events", events) and lake_has("accounts", accounts) and lake_has("late", late),
            "the lake never caught up after the change",
        )
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)

    for name in ("events", "accounts"):
        schema = catalog.load_table(f"fluss.{name}").schema()
        assert schema.column_names == ["id", "name", "note", *SYSTEM]
        assert schema.find_field("note").doc == "added" and not schema.find_field("note").required
    after = {f.name: f.field_id for f in catalog.load_table("fluss.events").schema().fields}
    assert {k: after[k] for k in before} == before  # existing columns keep their ids
    assert after["note"] not in before.values()
    assert catalog.load_table("fluss.late").schema().column_names == ["id", "name", *SYSTEM]


def test_add_column_reaches_paimon(cluster_factory: Any, tmp_path: Path) -> None:
    from pypaimon import CatalogFactory

    warehouse = str(tmp_path / "paimon")
    config = {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": warehouse,
    }
    cluster: Cluster = cluster_factory(tablet_servers=1, config=config)

    def read(name: str) -> tuple[list[str], list[dict[str, Any]]]:
        table = CatalogFactory.create({"metastore": "filesystem", "warehouse": warehouse}).get_table(
            f"fluss.{name}"
        )
        names = [f.name for f in table.table_schema.fields]
        user = [n for n in names if not n.startswith("__")]
        builder = table.new_read_builder().with_projection(user)
        result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        return names, sorted([] if result is None else result.to_pylist(), key=lambda r: r["id"])

    async def setup(conn: Connection) -> None:
        await create(conn, "events", False, LAKE)
        await create(conn, "accounts", True, LAKE)
        await write(conn, "events", [{"id": i, "name": f"e{i}"} for i in range(5)])
        await write(conn, "accounts", [{"id": i, "name": f"a{i}"} for i in range(5)])

    run(cluster, setup)
    service = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        wait_for(
            lambda: len(read("events")[1]) == 5 and len(read("accounts")[1]) == 5, "Paimon never caught up"
        )

        async def evolve(conn: Connection) -> None:
            for name in ("events", "accounts"):
                await conn.get_admin().alter_table(
                    f"fluss.{name}", [TableChange.add_column("note", "STRING")]
                )
                await write(conn, name, [{"id": 5, "name": "x5", "note": "five"}])

        run(cluster, evolve)
        wait_for(
            lambda: len(read("events")[1]) == 6 and len(read("accounts")[1]) == 6, "Paimon never evolved"
        )
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)
    for name in ("events", "accounts"):
        names, rows = read(name)
        assert names[:3] == ["id", "name", "note"] and all(n.startswith("__") for n in names[3:])
        prefix = "e" if name == "events" else "a"
        assert rows == [{"id": i, "name": f"{prefix}{i}", "note": None} for i in range(5)] + [
            {"id": 5, "name": "x5", "note": "five"}
        ]
