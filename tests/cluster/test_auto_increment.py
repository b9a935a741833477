"""Auto-increment columns and Lookup's insert_if_not_exists on a real cluster: pyfluss writes a
dictionary table, Strom's client looks words up inserting the missing ones; ids are unique and never
reused across a SIGKILLed tablet server and a restarted coordinator."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster, run_pyfluss

from strom.client import Connection, TablePath
from strom.common.errors import FlussError, InvalidTargetColumnError

SCHEMA = pa.schema([("word", pa.string()), ("id", pa.int64()), ("freq", pa.int32())])
PATH = fluss.TablePath("fluss", "dictionary")


async def create_and_write(connection: Any, words: list[str]) -> None:
    await connection.get_admin().create_table(
        PATH,
        fluss.TableDescriptor(
            fluss.Schema(SCHEMA, primary_keys=["word"], auto_increment_column="id"),
            bucket_count=2,
            properties={"table.auto-increment.cache-size": "10"},
        ),
    )
    await write(connection, words)


async def write(connection: Any, words: list[str]) -> None:
    table = await connection.get_table(PATH)
    writer = table.new_upsert().partial_update_by_name(["word", "freq"]).create_writer()
    for word in words:
        writer.upsert({"word": word, "freq": len(word)})
    await writer.flush()


async def lookup_all(connection: Any, words: list[str]) -> dict[str, int]:
    table = await connection.get_table(PATH)
    lookuper = table.new_lookup().create_lookuper()
    rows = await asyncio.gather(*(lookuper.lookup({"word": w}) for w in words))
    return {w: r["id"] for w, r in zip(words, rows, strict=True) if r is not None}


def present(rows: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Insert-if-not-exists lookups answer a row for every key."""
    assert all(r is not None for r in rows), rows
    return [r for r in rows if r is not None]


async def insert_if_not_exists(bootstrap: str, words: list[str]) -> list[dict[str, Any]]:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as conn:
        table = await conn.get_table(TablePath("fluss", "dictionary"))
        lookuper = table.new_lookup().enable_insert_if_not_exists().create_lookuper()
        return present(await lookuper.lookup_many([{"word": w} for w in words]))


def test_dictionary_ids_are_unique_and_survive_restarts(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1)
    first = [f"w{i}" for i in range(25)]
    run_pyfluss(cluster.bootstrap, lambda c: create_and_write(c, first))
    ids = run_pyfluss(cluster.bootstrap, lambda c: lookup_all(c, first))
    assert len(ids) == 25 and len(set(ids.values())) == 25 and min(ids.values()) >= 1
    # rewriting known words keeps their ids
    run_pyfluss(cluster.bootstrap, lambda c: write(c, first[:5]))
    assert run_pyfluss(cluster.bootstrap, lambda c: lookup_all(c, first)) == ids

    # a full-row upsert, which would set the id itself, is refused: pyfluss refuses it when the writer
    # is created, the server refuses it from Strom's client (which leaves the check to the server)
    async def full_row_pyfluss(connection: Any) -> str:
        table = await connection.get_table(PATH)
        try:
            table.new_upsert().create_writer()
        except Exception as e:
            return str(e)
        return "accepted"

    assert "auto increment column id" in run_pyfluss(cluster.bootstrap, full_row_pyfluss)

    async def full_row_strom() -> str:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            table = await conn.get_table(TablePath("fluss", "dictionary"))
            try:
                async with table.new_upsert().create_writer() as writer:
                    writer.upsert({"word": "x", "id": 1, "freq": 1})
                    await writer.flush()
            except FlussError as e:
                return f"{e.code}: {e.message}"
        return "accepted"

    refused = asyncio.run(full_row_strom())
    assert refused.startswith(f"{InvalidTargetColumnError.code}:") and "auto-increment column [id]" in refused

    # the tablet server dies with part of its ranges unused, the coordinator restarts: new ids are new
    cluster.kill_tablet_server(0)
    cluster.restart_coordinator()
    cluster.start_tablet_server(0)
    second = [f"v{i}" for i in range(10)]
    run_pyfluss(cluster.bootstrap, lambda c: write(c, second))
    after = run_pyfluss(cluster.bootstrap, lambda c: lookup_all(c, first + second))
    assert {w: after[w] for w in first} == ids
    assert not set(after[w] for w in second) & set(ids.values())
    assert len(set(after.values())) == 35

    # insert_if_not_exists: known words answer their row, unknown ones are inserted with a new id
    rows = asyncio.run(insert_if_not_exists(cluster.bootstrap, ["w3", "new1", "v2", "new2", "new1"]))
    assert [r["word"] for r in rows] == ["w3", "new1", "v2", "new2", "new1"]
    assert rows[0] == {"word": "w3", "id": ids["w3"], "freq": 2}
    assert rows[2]["id"] == after["v2"]
    assert rows[1]["freq"] is None and rows[1]["id"] == rows[4]["id"]
    new_ids = {rows[1]["id"], rows[3]["id"]}
    assert len(new_ids) == 2 and not new_ids & set(after.values())
    # and pyfluss sees them
    final = run_pyfluss(cluster.bootstrap, lambda c: lookup_all(c, ["new1", "new2"]))
    assert set(final.values()) == new_ids


@pytest.mark.parametrize(
    ("lake_format", "key"),
    [
        ("iceberg", pa.field("word", pa.string())),
        ("paimon", pa.field("word", pa.string())),
        ("paimon", pa.field("day", pa.date32())),
        ("iceberg", pa.field("at", pa.timestamp("us"))),
    ],
)
def test_insert_if_not_exists_on_lake_keyed_tables(
    shared_cluster: Cluster, lake_format: str, key: pa.Field
) -> None:
    """Tables with `table.datalake.format` encode their keys (and pick buckets) the lake's way; the
    server decodes such keys back into the key columns of the rows it inserts, as Fluss does. It used
    to refuse them ("cannot decode back into key columns")."""
    name = f"dict_{lake_format}_{key.name}_{uuid.uuid4().hex[:6]}"
    path = fluss.TablePath("fluss", name)
    schema = pa.schema([key, ("id", pa.int64()), ("freq", pa.int32())])
    keys_by_column: dict[str, list[Any]] = {
        "word": [f"w{i}" for i in range(12)] + ["a word longer than seven bytes"],
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(13)],
        "at": [dt.datetime(2024, 1, 1, 0, 0, i, 123456) for i in range(13)],
    }
    keys = keys_by_column[key.name]
    known, new = keys[:5], keys[5:]

    async def create(connection: Any) -> None:
        await connection.get_admin().create_table(
            path,
            fluss.TableDescriptor(
                fluss.Schema(schema, primary_keys=[key.name], auto_increment_column="id"),
                bucket_count=3,
                properties={"table.datalake.format": lake_format},
            ),
        )
        table = await connection.get_table(path)
        writer = table.new_upsert().partial_update_by_name([key.name, "freq"]).create_writer()
        for i, k in enumerate(known):
            writer.upsert({key.name: k, "freq": i})
        await writer.flush()

    run_pyfluss(shared_cluster.bootstrap, create)

    async def insert() -> list[dict[str, Any]]:
        async with await Connection.create({"bootstrap.servers": shared_cluster.bootstrap}) as conn:
            table = await conn.get_table(TablePath("fluss", name))
            lookuper = table.new_lookup().enable_insert_if_not_exists().create_lookuper()
            rows = await lookuper.lookup_many([{key.name: k} for k in keys])
            rows.append(await lookuper.lookup({key.name: new[0]}))  # the direct (batched) path
            return present(rows)

    rows = asyncio.run(insert())
    assert [r[key.name] for r in rows] == keys + new[:1]
    assert [r["freq"] for r in rows[:5]] == list(range(5))
    assert all(r["freq"] is None for r in rows[5:])
    ids = [r["id"] for r in rows]
    assert len(set(ids[:-1])) == len(keys) and ids[-1] == ids[5]

    async def lookup_pyfluss(connection: Any) -> list[Any]:
        table = await connection.get_table(path)
        lookuper = table.new_lookup().create_lookuper()
        return [await lookuper.lookup({key.name: k}) for k in keys]

    # the official client (its own key encoding and bucket function) finds every inserted row
    found = run_pyfluss(shared_cluster.bootstrap, lookup_pyfluss)
    assert [None if r is None else (r[key.name], r["id"]) for r in found] == list(
        zip(keys, ids[:-1], strict=True)
    )
