"""AlterTable (1044) through Strom's client on a real cluster: options set and reset, columns added
with a new schema id that survives a coordinator restart (SQLite and ZooKeeper metadata), Fluss's
refusals with INVALID_ALTER_TABLE, and writers still on the old schema while a column is added."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, OffsetSpec, Schema, TableChange, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET
from strom.common import errors
from strom.common.types import BIGINT, STRING, DataType
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


def unique(prefix: str) -> TablePath:
    return TablePath("fluss", f"{prefix}_{uuid.uuid4().hex[:8]}")


async def create(conn: Connection, path: TablePath, primary_key: list[str] | None = None, **kw: Any) -> None:
    schema = Schema.from_arrow_schema(SCHEMA, primary_key=primary_key)
    await conn.get_admin().create_table(path, TableDescriptor(schema, bucket_count=2, **kw))


def test_set_and_reset_options_and_custom_properties(shared_cluster: Cluster) -> None:
    path = unique("alter_opts")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path, properties={"table.log.ttl": "7d"})
        await admin.alter_table(
            path,
            [
                TableChange.set_option("table.log.ttl", "2h"),
                TableChange.set_option("table.datalake.freshness", "1min"),
                TableChange.set_option("owner", "team-a"),
            ],
        )
        info = await admin.get_table_info(path)
        assert info.schema_id == 1  # options do not make a new schema
        assert info.descriptor.properties["table.log.ttl"] == "2h"
        assert info.log_ttl.total_seconds() == 7200
        assert info.descriptor.properties["table.datalake.freshness"] == "1min"
        assert info.descriptor.custom_properties["owner"] == "team-a"
        assert info.modified_time >= info.created_time

        await admin.alter_table(
            path, [TableChange.reset_option("table.log.ttl"), TableChange.reset_option("owner")]
        )
        info = await admin.get_table_info(path)
        assert "table.log.ttl" not in info.descriptor.properties
        assert "owner" not in info.descriptor.custom_properties
        assert info.descriptor.properties["table.datalake.freshness"] == "1min"

        # a missing table: an error, unless asked to ignore it
        with pytest.raises(errors.TableNotExistError):
            await admin.alter_table(unique("missing"), [TableChange.set_option("table.log.ttl", "1h")])
        await admin.alter_table(
            unique("missing"), [TableChange.set_option("table.log.ttl", "1h")], ignore_if_not_exists=True
        )

    run(shared_cluster, body)


async def raw_alter(conn: Connection, path: TablePath, fill: Callable[[pb.AlterTableRequest], Any]) -> None:
    """An AlterTableRequest as any Fluss client may send it (drop/rename/modify have no builder here)."""
    request = pb.AlterTableRequest(ignore_if_not_exists=False)
    request.table_path.database_name = path.database_name
    request.table_path.table_name = path.table_name
    fill(request)
    await conn.get_admin()._call(ApiKey.ALTER_TABLE, request, read_only=False)


def test_refused_alterations_name_the_rule_and_change_nothing(shared_cluster: Cluster) -> None:
    path = unique("alter_refused")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path, primary_key=["id"])
        before = await admin.get_table_info(path)

        async def refused(changes: Any, *words: str) -> None:
            with pytest.raises(errors.InvalidAlterTableError) as caught:
                if callable(changes):
                    await raw_alter(conn, path, changes)
                else:
                    await admin.alter_table(path, changes)
            assert caught.value.code == 56
            for word in words:
                assert word in caught.value.message, caught.value.message

        await refused(
            [TableChange.set_option("table.bucket.num", "8")], "not supported to alter", "table.bucket.num"
        )
        await refused([TableChange.set_option("table.merge-engine", "first_row")], "table.merge-engine")
        await refused([TableChange.add_column("name", "STRING")], "name already exists")
        await refused([TableChange.add_column("n", "BIGINT NOT NULL")], "must be nullable")
        # a valid change with a refused one: all or nothing
        await refused(
            [TableChange.add_column("ok", "STRING"), TableChange.set_option("table.replication.factor", "3")],
            "table.replication.factor",
        )
        await refused(lambda r: r.drop_columns.add(column_name="id"), "primary key")
        await refused(
            lambda r: r.rename_columns.add(old_column_name="id", new_column_name="k"), "primary key"
        )
        await refused(
            lambda r: r.modify_columns.add(
                column_name="name", data_type_json=json.dumps(BIGINT().to_json()).encode()
            ),
            "type of an existing column",
        )
        await refused(lambda r: r.drop_columns.add(column_name="name"), "only adding nullable columns")

        def first_position(r: pb.AlterTableRequest) -> None:
            r.add_columns.add(column_name="x", data_type_json=b'{"type":"STRING"}', column_position_type=1)

        await refused(first_position, "at the end")

        after = await admin.get_table_info(path)
        assert (after.schema_id, after.descriptor, after.modified_time) == (
            before.schema_id,
            before.descriptor,
            before.modified_time,
        )

    run(shared_cluster, body)


@pytest.mark.parametrize("in_zookeeper", [False, True], ids=["sqlite", "zookeeper"])
def test_add_column_stores_a_new_schema_version_that_survives_a_restart(
    cluster_factory: Any, in_zookeeper: bool
) -> None:
    cluster = cluster_factory(1, zookeeper=in_zookeeper)
    path = unique("alter_schema")

    async def alter(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path)
        await admin.alter_table(path, [TableChange.add_column("note", pa.string(), comment="free text")])
        await admin.alter_table(path, [TableChange.add_column("tags", pa.struct([("tag", pa.string())]))])

    async def check(conn: Connection) -> None:
        admin = conn.get_admin()
        info = await admin.get_table_info(path)
        assert info.schema_id == 3
        assert info.schema.column_names == ["id", "name", "note", "tags"]
        v1, v2, v3 = [await admin.get_table_schema(path, i) for i in (1, 2, 3)]
        assert (v1.schema_id, v1.schema.column_names) == (1, ["id", "name"])
        assert v2.schema.column_names == ["id", "name", "note"]
        assert v2.schema.get_column("note").comment == "free text"
        assert v2.schema.get_column("note").data_type == STRING()
        assert v3.schema == info.schema
        # field ids: old columns keep theirs, new ones (and their nested fields) come after
        assert [c.column_id for c in v3.schema.columns] == [0, 1, 2, 3]
        assert v3.schema.get_column("tags").data_type.fields[0].field_id == 4
        assert v3.schema.highest_field_id == 4
        assert (await admin.get_table_schema(path)).schema_id == 3

    run(cluster, alter)
    run(cluster, check)
    cluster.restart_coordinator()
    deadline = time.monotonic() + 60
    while True:  # a killed coordinator's ZooKeeper session must expire before another takes over
        try:
            run(cluster, check)
            break
        except errors.LeaderNotAvailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_writers_on_the_old_schema_keep_writing_while_a_column_is_added(shared_cluster: Cluster) -> None:
    """An append writer opened before AddColumn keeps sending schema-1 batches; the tablet servers
    (told by UpdateMetadata) accept them next to the schema-2 batches of a new writer."""
    path = unique("alter_concurrent")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path)
        old_table = await conn.get_table(path)
        old_writer = old_table.new_append().create_writer()
        stop = asyncio.Event()
        written = 0

        async def keep_writing() -> None:
            nonlocal written
            while not stop.is_set():
                old_writer.append({"id": written, "name": f"old-{written}"})
                written += 1
                if written % 20 == 0:
                    await old_writer.flush()
            await old_writer.flush()

        task = asyncio.create_task(keep_writing())
        await asyncio.sleep(0.3)
        await admin.alter_table(path, [TableChange.add_column("note", DataType.from_arrow(pa.string()))])
        new_table = await conn.get_table(path)
        assert new_table.schema_id == 2
        new_writer = new_table.new_append().create_writer()
        for i in range(50):
            new_writer.append({"id": 100_000 + i, "name": f"new-{i}", "note": f"n{i}"})
        await new_writer.flush()
        await asyncio.sleep(0.3)
        stop.set()
        await task
        assert written > 20

        offsets = await admin.list_offsets(path, [0, 1], OffsetSpec.latest())
        assert sum(offsets.values()) == written + 50

        # read under the new schema: rows written before (and by the old writer) have a null note
        rows = (await read_all(new_table)).sort_by("id").to_pylist()
        assert [r["id"] for r in rows] == [*range(written), *range(100_000, 100_050)]
        assert all(r["note"] is None for r in rows[:written])
        assert [r["note"] for r in rows[written:]] == [f"n{i}" for i in range(50)]
        # a table handle (and its scanners) from before the change keeps reading its own schema
        old_rows = await read_all(old_table)
        assert old_rows.column_names == ["id", "name"] and old_rows.num_rows == written + 50

    run(shared_cluster, body)


async def read_all(table: Any) -> pa.Table:
    scanner = table.new_scan().create_log_scanner()
    for bucket in range(table.bucket_count):
        scanner.subscribe(bucket, EARLIEST_OFFSET)
    async with scanner:
        batches = [b.batch async for b in scanner.iter_batches(to_end=True)]
    return pa.Table.from_batches(batches, schema=scanner.arrow_schema)


def strom_table(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", "table", *args, "--bootstrap", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_strom_table_alter_from_the_command_line(shared_cluster: Cluster) -> None:
    path = unique("alter_cli")
    run(shared_cluster, lambda conn: create(conn, path, primary_key=["id"]))

    done = strom_table(
        shared_cluster,
        "alter",
        str(path),
        "--add-column",
        "price DECIMAL(10, 2) COMMENT 'in EUR, it''s net'",
        "--set",
        "table.log.ttl=1d",
    )
    assert done.returncode == 0, done.stderr
    assert f"altered {path} (schema id 2)" in done.stdout

    shown = strom_table(shared_cluster, "schema", str(path), "--all-versions")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "schema 1:",
        "  id BIGINT NOT NULL PRIMARY KEY",
        "  name STRING",
        "schema 2:",
        "  id BIGINT NOT NULL PRIMARY KEY",
        "  name STRING",
        "  price DECIMAL(10, 2) COMMENT 'in EUR, it''s net'",
    ]

    refused = strom_table(shared_cluster, "alter", str(path), "--set", "table.bucket.num=9")
    assert refused.returncode == 1
    assert "InvalidAlterTableError (56)" in refused.stderr and "table.bucket.num" in refused.stderr
    bad_type = strom_table(shared_cluster, "alter", str(path), "--add-column", "x VARCHARS")
    assert bad_type.returncode == 2 and "unknown type 'VARCHARS'" in bad_type.stderr

    async def check(conn: Connection) -> None:
        info = await conn.get_admin().get_table_info(path)
        assert info.schema_id == 2 and info.descriptor.properties["table.log.ttl"] == "1d"

    run(shared_cluster, check)


def test_a_pk_table_rebuilt_after_sigkill_keeps_rows_of_both_schemas(cluster_factory: Any) -> None:
    """The KV state is rebuilt from a changelog holding batches of schema 1 and 2 (and RocksDB values
    of both ids); lookups answer in the current schema."""
    cluster = cluster_factory(1)
    path = unique("alter_pk_recovery")

    async def write(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path, primary_key=["id"])
        writer = (await conn.get_table(path)).new_upsert().create_writer()
        for i in range(20):
            writer.upsert({"id": i, "name": f"v1-{i}"})
        await writer.flush()
        await admin.alter_table(path, [TableChange.add_column("score", "DOUBLE")])
        writer = (await conn.get_table(path)).new_upsert().create_writer()
        for i in range(10, 30):
            writer.upsert({"id": i, "name": f"v2-{i}", "score": i / 2})
        await writer.flush()

    async def lookup_all(conn: Connection) -> list[Any]:
        lookuper = (await conn.get_table(path)).new_lookup().create_lookuper()
        return [await lookuper.lookup({"id": i}) for i in range(31)]

    run(cluster, write)
    before = run(cluster, lookup_all)
    cluster.kill_tablet_server(0)
    cluster.start_tablet_server(0)
    after = run(cluster, lookup_all)
    expected = [{"id": i, "name": f"v1-{i}", "score": None} for i in range(10)] + [
        {"id": i, "name": f"v2-{i}", "score": i / 2} for i in range(10, 30)
    ]
    assert before[:30] == expected and before[30] is None
    assert after == before


def test_alterations_at_once_all_take_effect(cluster_factory: Any, tmp_path: Any) -> None:
    """Turning the lake on waits for the lake table to be created; an AddColumn arriving meanwhile
    must neither be overwritten nor leave its schema behind under an id the table no longer has."""
    cluster = cluster_factory(
        1,
        {
            "datalake.format": "iceberg",
            "datalake.iceberg.type": "sql",
            "datalake.iceberg.uri": f"sqlite:///{tmp_path}/lake-catalog.db",
            "datalake.iceberg.warehouse": f"file://{tmp_path}/warehouse",
        },
    )
    path = unique("alter_at_once")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await create(conn, path)
        await asyncio.gather(
            admin.alter_table(path, [TableChange.set_option("table.datalake.enabled", "true")]),
            admin.alter_table(path, [TableChange.add_column("note", DataType.from_arrow(pa.string()))]),
        )
        info = await admin.get_table_info(path)
        assert info.schema_id == 2 and info.schema.column_names == ["id", "name", "note"]
        assert info.descriptor.properties["table.datalake.enabled"] == "true"
        await admin.alter_table(path, [TableChange.add_column("tag", DataType.from_arrow(pa.string()))])
        assert (await admin.get_table_info(path)).schema_id == 3

    run(cluster, body)


def test_bucket_num_rescales_and_bucket_key_cannot_be_altered(shared_cluster: Cluster) -> None:
    """`strom table alter t --set bucket.num=6` used to exit 0, store a custom property and keep 2
    buckets; then it was refused. Now it rescales the table online (tests/cluster/test_rescale.py has
    the data side): pyfluss sees 6 buckets and no `bucket.num` property. Fewer buckets, and any change of
    the bucket key, are refused with INVALID_ALTER_TABLE naming the option."""
    import fluss
    from harness import run_pyfluss

    path = unique("alter_fixed")
    run(shared_cluster, lambda conn: create(conn, path, primary_key=["id"]))

    rescaled = strom_table(shared_cluster, "alter", str(path), "--set", "bucket.num=6")
    assert rescaled.returncode == 0, rescaled.stderr
    refused = strom_table(shared_cluster, "alter", str(path), "--set", "bucket.num=3")
    assert refused.returncode == 1, refused.stdout
    assert "InvalidAlterTableError (56)" in refused.stderr
    assert "from 6 to 3" in refused.stderr

    async def alter_bucket_key(conn: Connection) -> None:
        with pytest.raises(errors.InvalidAlterTableError, match=r"'bucket\.key'"):
            await conn.get_admin().alter_table(path, [TableChange.set_option("bucket.key", "name")])

    run(shared_cluster, alter_bucket_key)

    async def check(connection: Any) -> None:
        table_path = fluss.TablePath(path.database_name, path.table_name)
        info = await connection.get_admin().get_table_info(table_path)
        assert info.num_buckets == 6
        assert info.get_bucket_keys() == ["id"]
        assert "bucket.num" not in info.get_custom_properties()

    run_pyfluss(shared_cluster.bootstrap, check)
