"""Strom's own client administering a real cluster, and agreeing with pyfluss about what it created."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import (
    ClientConfig,
    Connection,
    DatabaseDescriptor,
    OffsetSpec,
    PhysicalTablePath,
    Schema,
    ServerType,
    TableDescriptor,
    TablePath,
)
from strom.common import errors
from strom.common.table_bucket import TableBucket
from strom.rpc.api import ApiKey


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]], **settings: str) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap, **settings}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


async def with_pyfluss(cluster: Cluster, body: Callable[[Any], Awaitable[Any]]) -> Any:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": cluster.bootstrap}))
    try:
        return await body(connection)
    finally:
        await connection.close()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


LOG_ARROW = pa.schema([("id", pa.int32()), ("name", pa.string()), ("ts", pa.int64())])
PK_ARROW = pa.schema([("k", pa.int32()), ("region", pa.string()), ("v", pa.float64())])


def log_schema() -> Schema:
    return Schema.from_arrow_schema(LOG_ARROW)


def pk_schema() -> Schema:
    return Schema.from_arrow_schema(PK_ARROW, primary_key=["k", "region"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------- admin


def test_database_lifecycle(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        assert conn.get_admin() is admin
        assert "fluss" in await admin.list_databases()
        await admin.create_database(db, DatabaseDescriptor("orders and friends", {"owner": "data-eng"}))
        assert await admin.database_exists(db)
        assert db in await admin.list_databases()
        info = await admin.get_database_info(db)
        assert info.database_name == db
        assert info.descriptor == DatabaseDescriptor("orders and friends", {"owner": "data-eng"})
        assert info.created_time > 0 and info.modified_time >= info.created_time

        await admin.create_database(db, ignore_if_exists=True)
        with pytest.raises(errors.DatabaseAlreadyExistError, match=db):
            await admin.create_database(db)
        await admin.drop_database(db)
        assert not await admin.database_exists(db)
        with pytest.raises(errors.DatabaseNotExistError, match=db):
            await admin.drop_database(db)
        await admin.drop_database(db, ignore_if_not_exists=True)
        with pytest.raises(errors.DatabaseNotExistError):
            await admin.get_database_info(db)

        # a database without a descriptor
        bare = unique("db")
        await admin.create_database(bare)
        assert (await admin.get_database_info(bare)).descriptor == DatabaseDescriptor()
        await admin.drop_database(bare)

    run(shared_cluster, body)


def test_log_and_primary_key_tables(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await admin.create_database(db)
        log_path = TablePath(db, "events")
        pk_path = TablePath(db, "accounts")
        await admin.create_table(
            log_path, TableDescriptor(log_schema(), bucket_keys=["id"], bucket_count=3, comment="clicks")
        )
        await admin.create_table(pk_path, TableDescriptor(pk_schema(), bucket_count=2))
        assert sorted(await admin.list_tables(db)) == ["accounts", "events"]
        assert await admin.table_exists(log_path)
        assert await admin.table_exists(f"{db}.accounts")
        assert not await admin.table_exists(TablePath(db, "nope"))

        info = await admin.get_table_info(log_path)
        assert info.table_path == log_path and info.table_id >= 0 and info.schema_id == 1
        assert info.bucket_count == 3 and info.bucket_keys == ["id"]
        assert info.schema.column_names == ["id", "name", "ts"]
        assert not info.has_primary_key and info.comment == "clicks"
        assert info.created_time > 0

        pk_info = await admin.get_table_info(pk_path)
        assert pk_info.primary_key == ["k", "region"]
        assert pk_info.bucket_keys == ["k", "region"] and pk_info.bucket_count == 2

        schema_id, schema = await admin.get_table_schema(pk_path)
        assert schema_id == 1 and schema.column_names == ["k", "region", "v"]
        assert schema.primary_key == ["k", "region"]
        assert (await admin.get_table_schema(pk_path, schema_id=1)).schema == schema
        with pytest.raises(errors.SchemaNotExistError):
            await admin.get_table_schema(pk_path, schema_id=7)

        # the table handle comes from Metadata on a tablet server, with every bucket's leader
        table = await conn.get_table(pk_path)
        assert table.info == pk_info and table.has_primary_key and table.bucket_count == 2
        for bucket in range(2):
            leader = conn.metadata.leader_for(TableBucket(table.table_id, None, bucket))
            assert leader is not None and leader.server_type == ServerType.TABLET_SERVER

        with pytest.raises(errors.TableAlreadyExistError, match="events"):
            await admin.create_table(log_path, TableDescriptor(log_schema()))
        await admin.create_table(log_path, TableDescriptor(log_schema()), ignore_if_exists=True)

        await admin.drop_table(log_path)
        assert not await admin.table_exists(log_path)
        assert conn.metadata.table_info(log_path) is None
        with pytest.raises(errors.TableNotExistError, match="events"):
            await admin.get_table_info(log_path)
        with pytest.raises(errors.TableNotExistError):
            await conn.get_table(log_path)
        with pytest.raises(errors.TableNotExistError):
            await admin.drop_table(log_path)
        await admin.drop_table(log_path, ignore_if_not_exists=True)

        # a table dropped and created again under the same name is a new table
        await admin.create_table(log_path, TableDescriptor(log_schema(), bucket_count=1))
        again = await conn.get_table(log_path)
        assert again.table_id != info.table_id and again.bucket_count == 1

        with pytest.raises(errors.DatabaseNotEmptyError):
            await admin.drop_database(db, cascade=False)
        await admin.drop_database(db, cascade=True)
        assert not await admin.database_exists(db)
        assert conn.metadata.table_info(pk_path) is None

    run(shared_cluster, body)


def test_default_bucket_count_and_properties_are_filled_in(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        path = TablePath("fluss", unique("defaults"))
        await admin.create_table(path, TableDescriptor(log_schema(), custom_properties={"team": "a"}))
        info = await admin.get_table_info(path)
        assert info.bucket_count == 1
        assert info.descriptor.properties["table.replication.factor"] == "1"
        assert info.custom_properties == {"team": "a"}
        await admin.drop_table(path)

    run(shared_cluster, body)


def test_partitions(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await admin.create_database(db)
        path = TablePath(db, "sales")
        schema = Schema.from_arrow_schema(
            pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.string())])
        )
        await admin.create_table(
            path, TableDescriptor(schema, partition_keys=["region", "day"], bucket_count=2)
        )
        info = await admin.get_table_info(path)
        assert info.is_partitioned and info.partition_keys == ["region", "day"]
        assert await admin.list_partition_infos(path) == []

        await admin.create_partition(path, {"region": "eu", "day": "20240101"})
        await admin.create_partition(path, {"day": "20240101", "region": "us"})  # key order is free
        await admin.create_partition(path, {"region": "us", "day": "20240101"}, ignore_if_exists=True)
        with pytest.raises(errors.PartitionAlreadyExistsError, match="us"):
            await admin.create_partition(path, {"region": "us", "day": "20240101"})

        partitions = await admin.list_partition_infos(path)
        assert sorted(p.partition_name for p in partitions) == ["eu$20240101", "us$20240101"]
        assert len({p.partition_id for p in partitions}) == 2
        eu = next(p for p in partitions if p.partition_name == "eu$20240101")
        assert dict(eu.spec) == {"region": "eu", "day": "20240101"}
        assert [p.partition_name for p in await admin.list_partition_infos(path, {"region": "eu"})] == [
            "eu$20240101"
        ]
        with pytest.raises(errors.PartitionSpecInvalidError):
            await admin.list_partition_infos(path, {"country": "eu"})
        with pytest.raises(errors.PartitionSpecInvalidError):
            await admin.create_partition(path, {"region": "eu"})

        # partition metadata by name and by id, each bucket with a leader
        assert await conn.metadata.get_partition_id(path, "eu$20240101") == eu.partition_id
        await conn.metadata.refresh_partitions(path, [p.partition_id for p in partitions])
        for partition in partitions:
            assert conn.metadata.partition_name(partition.partition_id) == partition.partition_name
            physical = PhysicalTablePath(path, partition.partition_name)
            assert len(conn.metadata.cluster.available_buckets(physical)) == 2
        with pytest.raises(errors.PartitionNotExistError):
            await conn.metadata.get_partition_id(path, "xx$20240101")

        await admin.drop_partition(path, {"region": "eu", "day": "20240101"})
        assert [p.partition_name for p in await admin.list_partition_infos(path)] == ["us$20240101"]
        assert conn.metadata.partition_id(path, "eu$20240101") is None
        with pytest.raises(errors.PartitionNotExistError, match="eu"):
            await admin.drop_partition(path, {"region": "eu", "day": "20240101"})
        await admin.drop_partition(path, {"region": "eu", "day": "20240101"}, ignore_if_not_exists=True)

        flat = TablePath(db, "flat")
        await admin.create_table(flat, TableDescriptor(log_schema()))
        with pytest.raises(errors.TableNotPartitionedError):
            await admin.list_partition_infos(flat)
        with pytest.raises(errors.TableNotPartitionedError):
            await admin.create_partition(flat, {"id": "1"})
        await admin.drop_database(db, cascade=True)

    run(shared_cluster, body)


def test_concurrent_ddl_of_one_name_creates_it_once(shared_cluster: Cluster) -> None:
    """Store writes are awaited off the coordinator's loop, so a name's check and its write must stay
    together: racing creates of one database, table or partition make it once, and every other
    request gets the 'already exists' error, never an internal one (the fuzzer found IntegrityError)."""
    db = unique("race")
    racers = 12

    async def race(attempts: list[Awaitable[Any]], exists: type[Exception]) -> None:
        results = await asyncio.gather(*attempts, return_exceptions=True)
        errors_seen = [r for r in results if isinstance(r, BaseException)]
        assert len(results) - len(errors_seen) == 1, results
        assert all(isinstance(e, exists) for e in errors_seen), errors_seen

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await race([admin.create_database(db) for _ in range(racers)], errors.DatabaseAlreadyExistError)
        path = TablePath(db, "t")
        schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("day", pa.string())]))
        descriptor = TableDescriptor(schema, partition_keys=["day"], bucket_count=1)
        await race(
            [admin.create_table(path, descriptor) for _ in range(racers)], errors.TableAlreadyExistError
        )
        await race(
            [admin.create_partition(path, {"day": "20240101"}) for _ in range(racers)],
            errors.PartitionAlreadyExistsError,
        )
        assert [p.partition_name for p in await admin.list_partition_infos(path)] == ["20240101"]
        await admin.drop_database(db, cascade=True)

    run(shared_cluster, body)


def test_server_nodes(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        nodes = await conn.get_admin().get_server_nodes()
        assert [(n.server_type, n.id) for n in nodes] == [
            (ServerType.COORDINATOR, 0),
            (ServerType.TABLET_SERVER, 0),
            (ServerType.TABLET_SERVER, 1),
        ]
        assert nodes[0].address == shared_cluster.bootstrap and nodes[0].uid == "cs-0"
        assert {n.address for n in nodes[1:]} == {s.address for s in shared_cluster.tablet_servers.values()}
        assert [n.uid for n in nodes[1:]] == ["ts-0", "ts-1"]

    run(shared_cluster, body)


def test_invalid_requests_get_fluss_errors_with_the_servers_message(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        with pytest.raises(errors.InvalidDatabaseError, match="bad name!"):
            await admin.create_database("bad name!")
        with pytest.raises(errors.InvalidTableError):
            await admin.create_table(TablePath("fluss", "bad/name"), TableDescriptor(log_schema()))
        missing_db = unique("nodb")
        with pytest.raises(errors.DatabaseNotExistError, match=missing_db):
            await admin.create_table(TablePath(missing_db, "t"), TableDescriptor(log_schema()))
        with pytest.raises(errors.DatabaseNotExistError):
            await admin.list_tables(missing_db)
        with pytest.raises(errors.InvalidConfigError, match=r"table\.no-such-option"):
            await admin.create_table(
                TablePath("fluss", unique("t")),
                TableDescriptor(log_schema(), properties={"table.no-such-option": "1"}),
            )
        with pytest.raises(errors.InvalidReplicationFactorError):
            await admin.create_table(
                TablePath("fluss", unique("t")),
                TableDescriptor(log_schema(), properties={"table.replication.factor": "5"}),
            )
        path = TablePath("fluss", unique("t"))
        await admin.create_table(path, TableDescriptor(log_schema()))
        with pytest.raises(errors.LakeSnapshotNotExistError, match=path.table_name):
            await admin.get_latest_lake_snapshot(path)
        with pytest.raises(errors.NonPrimaryKeyTableError):
            await admin.get_latest_kv_snapshots(path)
        with pytest.raises(errors.TableNotExistError):
            await conn.get_table(TablePath("fluss", unique("none")))
        with pytest.raises(ValueError, match="Buckets are empty"):
            await admin.list_offsets(path, [], OffsetSpec.latest())
        with pytest.raises(ValueError, match="1 buckets"):
            await admin.list_offsets(path, [3], OffsetSpec.latest())
        with pytest.raises(errors.PartitionNotExistError):
            await admin.list_offsets(path, [0], OffsetSpec.latest(), partition_name="nope")
        await admin.drop_table(path)
        # the connection survives every one of them
        assert "fluss" in await admin.list_databases()

    run(shared_cluster, body)


def test_kv_snapshots_of_a_fresh_primary_key_table(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        path = TablePath("fluss", unique("pk"))
        await admin.create_table(path, TableDescriptor(pk_schema(), bucket_count=3))
        table = await conn.get_table(path)
        snapshots = await admin.get_latest_kv_snapshots(path)
        assert snapshots.table_id == table.table_id and snapshots.partition_id is None
        assert snapshots.bucket_ids == (0, 1, 2)
        assert [snapshots.snapshot_id(b) for b in range(3)] == [None, None, None]
        await admin.drop_table(path)

    run(shared_cluster, body)


def test_list_offsets_of_data_written_by_pyfluss(shared_cluster: Cluster) -> None:
    path = TablePath("fluss", unique("offsets"))
    parted = TablePath("fluss", unique("offsets_parted"))
    before = int(time.time() * 1000)

    async def write(connection: Any) -> None:
        admin = connection.get_admin()
        await admin.create_table(
            fluss.TablePath(path.database_name, path.table_name),
            fluss.TableDescriptor(fluss.Schema(LOG_ARROW), bucket_count=3),
        )
        table = await connection.get_table(fluss.TablePath(path.database_name, path.table_name))
        writer = table.new_append().create_writer()
        writer.write_arrow(
            pa.table({"id": list(range(300)), "name": ["x"] * 300, "ts": [0] * 300}, LOG_ARROW)
        )
        await writer.flush()

        fluss_parted = fluss.TablePath(parted.database_name, parted.table_name)
        schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
        await admin.create_table(
            fluss_parted,
            fluss.TableDescriptor(fluss.Schema(schema), partition_keys=["region"], bucket_count=2),
        )
        await admin.create_partition(fluss_parted, {"region": "eu"})
        await admin.create_partition(fluss_parted, {"region": "us"})
        table = await connection.get_table(fluss_parted)
        writer = table.new_append().create_writer()
        writer.write_arrow(pa.table({"id": list(range(50)), "region": ["eu"] * 50}, schema))
        await writer.flush()

    asyncio.run(with_pyfluss(shared_cluster, write))

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        latest = await admin.list_offsets(path, [0, 1, 2], OffsetSpec.latest())
        assert sorted(latest) == [0, 1, 2] and sum(latest.values()) == 300
        assert await admin.list_offsets(path, [0, 1, 2], OffsetSpec.earliest()) == {0: 0, 1: 0, 2: 0}
        assert await admin.list_offsets(path, [0, 1, 2], OffsetSpec.timestamp(before - 60_000)) == {
            0: 0,
            1: 0,
            2: 0,
        }
        future = await admin.list_offsets(
            path, [0, 1, 2], OffsetSpec.timestamp(int(time.time() * 1000) + 60_000)
        )
        assert future == latest

        eu = await admin.list_offsets(parted, [0, 1], OffsetSpec.latest(), partition_name="eu")
        assert sum(eu.values()) == 50
        assert await admin.list_offsets(parted, [0, 1], OffsetSpec.latest(), partition_name="us") == {
            0: 0,
            1: 0,
        }
        await admin.drop_table(path)
        await admin.drop_table(parted)

    run(shared_cluster, body)


# ---------------------------------------------------------------------------------------------- interop


def _type_text(text: str) -> str:
    return text.lower().replace(" ", "")


def test_table_created_by_strom_is_seen_identically_by_pyfluss(shared_cluster: Cluster) -> None:
    db = unique("db")
    columns = pa.schema(
        [
            ("k", pa.int32()),
            ("region", pa.string()),
            ("ts", pa.timestamp("ms")),
            ("amount", pa.decimal128(10, 2)),
            ("blob", pa.binary()),
        ]
    )
    descriptor = TableDescriptor(
        Schema.from_arrow_schema(columns, primary_key=["k", "region"]),
        partition_keys=["region"],
        bucket_count=4,
        properties={"table.log.ttl": "1d"},
        custom_properties={"owner": "strom"},
        comment="written by strom",
    )

    async def create(conn: Connection) -> Any:
        admin = conn.get_admin()
        await admin.create_database(db, DatabaseDescriptor("from strom", {"k": "v"}))
        await admin.create_table(TablePath(db, "t"), descriptor)
        return await admin.get_table_info(TablePath(db, "t"))

    ours = run(shared_cluster, create)

    async def look(connection: Any) -> None:
        admin = connection.get_admin()
        path = fluss.TablePath(db, "t")
        info = await admin.get_table_info(path)
        assert info.table_id == ours.table_id and info.schema_id == ours.schema_id
        assert info.get_column_names() == ours.schema.column_names
        assert [_type_text(t) for _, t in info.get_schema().get_columns()] == [
            _type_text(str(c.data_type)) for c in ours.schema.columns
        ]
        assert info.get_primary_keys() == ["k", "region"]
        assert info.get_bucket_keys() == ours.bucket_keys == ["k"]
        assert info.get_partition_keys() == ["region"]
        assert info.num_buckets == 4
        assert info.get_properties() == ours.descriptor.properties
        assert info.get_custom_properties() == {"owner": "strom"}
        assert info.comment == "written by strom"
        assert info.created_time == ours.created_time
        database = await admin.get_database_info(db)
        assert database.get_database_descriptor().comment == "from strom"
        assert database.get_database_descriptor().get_custom_properties() == {"k": "v"}
        assert await connection.get_table(path) is not None
        await admin.drop_database(db, cascade=True)

    asyncio.run(with_pyfluss(shared_cluster, look))


def test_table_created_by_pyfluss_is_seen_identically_by_strom(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def create(connection: Any) -> Any:
        admin = connection.get_admin()
        await admin.create_database(
            db, fluss.DatabaseDescriptor(comment="from pyfluss", custom_properties={"a": "b"})
        )
        path = fluss.TablePath(db, "t")
        await admin.create_table(
            path,
            fluss.TableDescriptor(
                fluss.Schema(PK_ARROW, primary_keys=["k", "region"]),
                bucket_count=3,
                bucket_keys=["k"],
                comment="written by pyfluss",
                properties={"table.log.ttl": "2d"},
                custom_properties={"owner": "pyfluss"},
            ),
        )
        await admin.create_table(
            fluss.TablePath(db, "log"),
            fluss.TableDescriptor(fluss.Schema(LOG_ARROW), partition_keys=["name"], bucket_count=2),
        )
        await admin.create_partition(fluss.TablePath(db, "log"), {"name": "alpha"})
        return await admin.get_table_info(path)

    theirs = asyncio.run(with_pyfluss(shared_cluster, create))

    async def look(conn: Connection) -> None:
        admin = conn.get_admin()
        database = await admin.get_database_info(db)
        assert database.descriptor == DatabaseDescriptor("from pyfluss", {"a": "b"})
        info = await admin.get_table_info(TablePath(db, "t"))
        table = await conn.get_table(TablePath(db, "t"))
        for seen in (info, table.info):
            assert seen.table_id == theirs.table_id and seen.schema_id == theirs.schema_id
            assert seen.schema.column_names == theirs.get_column_names()
            assert [_type_text(str(c.data_type)) for c in seen.schema.columns] == [
                _type_text(t) for _, t in theirs.get_schema().get_columns()
            ]
            assert seen.schema.to_arrow_schema().field("v").type == pa.float64()
            assert seen.primary_key == theirs.get_primary_keys() == ["k", "region"]
            assert seen.bucket_keys == theirs.get_bucket_keys() == ["k"]
            assert seen.bucket_count == theirs.num_buckets == 3
            assert seen.descriptor.properties == theirs.get_properties()
            assert seen.custom_properties == theirs.get_custom_properties() == {"owner": "pyfluss"}
            assert seen.comment == theirs.comment == "written by pyfluss"
            assert seen.created_time == theirs.created_time
        parts = await admin.list_partition_infos(TablePath(db, "log"))
        assert [(p.partition_name, dict(p.spec)) for p in parts] == [("alpha", {"name": "alpha"})]
        await admin.drop_database(db, cascade=True)

    run(shared_cluster, look)


# ---------------------------------------------------------------------------------------------- connection


def test_bootstrap_settings_and_lifecycle(shared_cluster: Cluster) -> None:
    dead = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        # the first bootstrap server is down: the next one is used
        settings = {"bootstrap.servers": f"{dead},{shared_cluster.bootstrap}", "writer.acks": "all"}
        connection = await Connection.create(settings)
        assert connection.config.bootstrap_servers == (dead, shared_cluster.bootstrap)
        nodes = connection.metadata.cluster.server_nodes()
        assert [n.server_type for n in nodes] == [ServerType.COORDINATOR] + [ServerType.TABLET_SERVER] * 2
        admin = connection.get_admin()
        assert "fluss" in await admin.list_databases()
        await connection.close()
        assert connection.closed
        with pytest.raises(errors.FlussError, match="closed"):
            connection.get_admin()
        await connection.close()  # twice is fine

        # nothing listens: a network error after Fluss's three bootstrap retries
        started = time.monotonic()
        with pytest.raises(errors.NetworkError, match=dead):
            await Connection.create(ClientConfig(bootstrap_servers=(dead,)))
        assert time.monotonic() - started < 5

    asyncio.run(main())


def test_concurrent_refreshes_share_one_request(shared_cluster: Cluster) -> None:
    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        path = TablePath("fluss", unique("shared"))
        await admin.create_table(path, TableDescriptor(log_schema(), bucket_count=2))
        sent: list[ApiKey] = []
        original = conn.pool.request

        async def counting(
            host: str, port: int, api_key: ApiKey, message: Any, *, timeout: float | None = None
        ) -> Any:
            sent.append(api_key)
            return await original(host, port, api_key, message, timeout=timeout)

        conn.pool.request = counting  # type: ignore[method-assign]
        tables = await asyncio.gather(*(conn.get_table(path) for _ in range(20)))
        assert {t.table_id for t in tables} == {tables[0].table_id}
        assert sent.count(ApiKey.GET_METADATA) == 1

        # a caller that gives up does not take the shared request down with it
        impatient = asyncio.create_task(conn.metadata.refresh_table(path))
        patient = asyncio.create_task(conn.metadata.refresh_table(path))
        await asyncio.sleep(0)
        impatient.cancel()
        assert (await patient).table_id == tables[0].table_id
        await admin.drop_table(path)

    run(shared_cluster, body)


def test_metadata_refresh_and_admin_calls_survive_dead_servers(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=2)

    async def main() -> None:
        settings = {"bootstrap.servers": cluster.bootstrap, "client.request-timeout": "20s"}
        async with await Connection.create(settings) as conn:
            admin = conn.get_admin()
            path = TablePath("fluss", "t")
            await admin.create_table(path, TableDescriptor(log_schema(), bucket_count=2))
            await conn.get_table(path)
            assert len(conn.metadata.cluster.tablet_servers) == 2

            # a dead tablet server is skipped: every refresh lands on the live one or the coordinator
            cluster.kill_tablet_server(1)
            for _ in range(6):
                info = await conn.metadata.refresh_table(path)
                assert info.bucket_count == 2

            # the coordinator goes away while a read is under way; the read waits for it to return
            cluster.coordinator.kill()
            listing = asyncio.create_task(admin.list_databases())
            await asyncio.sleep(0.5)
            await asyncio.to_thread(cluster.start_coordinator)
            assert "fluss" in await listing
            assert await admin.table_exists(path)

    asyncio.run(main())
