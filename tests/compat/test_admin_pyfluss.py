"""The official Fluss Python client (pyfluss) administering a real Strom cluster, unchanged."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster


def run(cluster: Cluster, body: Callable[[Any, Any], Awaitable[None]]) -> None:
    async def main() -> None:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": cluster.bootstrap})
        )
        try:
            await asyncio.wait_for(body(connection, connection.get_admin()), 60)
        finally:
            await connection.close()

    asyncio.run(main())


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def log_schema() -> fluss.Schema:
    return fluss.Schema(pa.schema([("id", pa.int32()), ("name", pa.string()), ("ts", pa.int64())]))


def pk_schema() -> fluss.Schema:
    return fluss.Schema(
        pa.schema([("k", pa.int32()), ("region", pa.string()), ("v", pa.float64())]),
        primary_keys=["k", "region"],
    )


def test_default_database_and_database_lifecycle(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(connection: Any, admin: Any) -> None:
        assert "fluss" in await admin.list_databases()
        descriptor = fluss.DatabaseDescriptor(
            comment="orders and friends", custom_properties={"owner": "data-eng"}
        )
        await admin.create_database(db, descriptor)
        assert await admin.database_exists(db)
        assert db in await admin.list_databases()
        info = await admin.get_database_info(db)
        assert info.database_name == db
        assert info.get_database_descriptor().comment == "orders and friends"
        assert info.get_database_descriptor().get_custom_properties() == {"owner": "data-eng"}
        assert info.created_time > 0
        await admin.create_database(db, ignore_if_exists=True)
        with pytest.raises(fluss.FlussError) as exists:
            await admin.create_database(db)
        assert exists.value.error_code == fluss.ErrorCode.DATABASE_ALREADY_EXIST
        await admin.drop_database(db)
        assert not await admin.database_exists(db)
        with pytest.raises(fluss.FlussError) as missing:
            await admin.drop_database(db)
        assert missing.value.error_code == fluss.ErrorCode.DATABASE_NOT_EXIST
        await admin.drop_database(db, ignore_if_not_exists=True)

    run(shared_cluster, body)


def test_log_and_primary_key_tables(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(connection: Any, admin: Any) -> None:
        await admin.create_database(db)
        log_path = fluss.TablePath(db, "events")
        pk_path = fluss.TablePath(db, "accounts")
        await admin.create_table(
            log_path,
            fluss.TableDescriptor(log_schema(), bucket_count=3, bucket_keys=["id"], comment="click stream"),
        )
        await admin.create_table(pk_path, fluss.TableDescriptor(pk_schema(), bucket_count=2))
        assert sorted(await admin.list_tables(db)) == ["accounts", "events"]
        assert await admin.table_exists(log_path)
        assert not await admin.table_exists(fluss.TablePath(db, "nope"))

        info = await admin.get_table_info(log_path)
        assert info.table_id >= 0 and info.schema_id == 1
        assert info.num_buckets == 3
        assert info.get_bucket_keys() == ["id"]
        assert info.get_column_names() == ["id", "name", "ts"]
        assert not info.has_primary_key()
        assert info.comment == "click stream"

        pk_info = await admin.get_table_info(pk_path)
        assert pk_info.has_primary_key()
        assert pk_info.get_primary_keys() == ["k", "region"]
        assert pk_info.get_bucket_keys() == ["k", "region"]
        assert pk_info.num_buckets == 2

        # the client's table handle comes from Metadata on a tablet server
        table = await connection.get_table(pk_path)
        assert table is not None

        with pytest.raises(fluss.FlussError) as dup:
            await admin.create_table(log_path, fluss.TableDescriptor(log_schema()))
        assert dup.value.error_code == fluss.ErrorCode.TABLE_ALREADY_EXIST
        await admin.create_table(log_path, fluss.TableDescriptor(log_schema()), ignore_if_exists=True)

        await admin.drop_table(log_path)
        assert not await admin.table_exists(log_path)
        with pytest.raises(fluss.FlussError) as gone:
            await admin.get_table_info(log_path)
        assert gone.value.error_code == fluss.ErrorCode.TABLE_NOT_EXIST
        await admin.drop_table(log_path, ignore_if_not_exists=True)

        # cascade drop takes the remaining table with it
        await admin.drop_database(db, cascade=True)
        assert not await admin.database_exists(db)

    run(shared_cluster, body)


def test_default_bucket_count_is_filled_in(shared_cluster: Cluster) -> None:
    async def body(connection: Any, admin: Any) -> None:
        path = fluss.TablePath("fluss", unique("nobuckets"))
        await admin.create_table(path, fluss.TableDescriptor(log_schema()))
        info = await admin.get_table_info(path)
        assert info.num_buckets == 1
        props = info.get_properties()
        assert props.get("table.replication.factor") == "1"
        await admin.drop_table(path)

    run(shared_cluster, body)


def test_partitions(shared_cluster: Cluster) -> None:
    db = unique("db")

    async def body(connection: Any, admin: Any) -> None:
        await admin.create_database(db)
        path = fluss.TablePath(db, "sales")
        schema = fluss.Schema(pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.string())]))
        await admin.create_table(
            path, fluss.TableDescriptor(schema, partition_keys=["region", "day"], bucket_count=2)
        )
        info = await admin.get_table_info(path)
        assert info.is_partitioned() and info.get_partition_keys() == ["region", "day"]
        assert await admin.list_partition_infos(path) == []

        await admin.create_partition(path, {"region": "eu", "day": "20240101"})
        await admin.create_partition(path, {"region": "us", "day": "20240101"})
        await admin.create_partition(path, {"region": "us", "day": "20240101"}, ignore_if_exists=True)
        with pytest.raises(fluss.FlussError) as dup:
            await admin.create_partition(path, {"region": "us", "day": "20240101"})
        assert dup.value.error_code == fluss.ErrorCode.PARTITION_ALREADY_EXISTS

        partitions = await admin.list_partition_infos(path)
        assert sorted(p.partition_name for p in partitions) == ["eu$20240101", "us$20240101"]
        assert len({p.partition_id for p in partitions}) == 2
        only_eu = await admin.list_partition_infos(path, {"region": "eu"})
        assert [p.partition_name for p in only_eu] == ["eu$20240101"]

        with pytest.raises(fluss.FlussError) as bad:
            await admin.create_partition(path, {"region": "eu"})
        assert bad.value.error_code == fluss.ErrorCode.PARTITION_SPEC_INVALID_EXCEPTION

        await admin.drop_partition(path, {"region": "eu", "day": "20240101"})
        assert [p.partition_name for p in await admin.list_partition_infos(path)] == ["us$20240101"]
        with pytest.raises(fluss.FlussError) as missing:
            await admin.drop_partition(path, {"region": "eu", "day": "20240101"})
        assert missing.value.error_code == fluss.ErrorCode.PARTITION_NOT_EXISTS
        await admin.drop_partition(path, {"region": "eu", "day": "20240101"}, ignore_if_not_exists=True)

        unpartitioned = fluss.TablePath(db, "flat")
        await admin.create_table(unpartitioned, fluss.TableDescriptor(log_schema()))
        with pytest.raises(fluss.FlussError) as flat:
            await admin.list_partition_infos(unpartitioned)
        assert flat.value.error_code == fluss.ErrorCode.TABLE_NOT_PARTITIONED_EXCEPTION
        await admin.drop_database(db, cascade=True)

    run(shared_cluster, body)


def test_server_nodes(shared_cluster: Cluster) -> None:
    async def body(connection: Any, admin: Any) -> None:
        nodes = await admin.get_server_nodes()
        kinds = sorted((n.server_type, n.id) for n in nodes)
        assert kinds == [("CoordinatorServer", 0), ("TabletServer", 0), ("TabletServer", 1)]
        coordinator = next(n for n in nodes if n.server_type == "CoordinatorServer")
        assert f"{coordinator.host}:{coordinator.port}" == shared_cluster.bootstrap

    run(shared_cluster, body)


def test_invalid_requests_get_fluss_errors(shared_cluster: Cluster) -> None:
    async def body(connection: Any, admin: Any) -> None:
        with pytest.raises(fluss.FlussError) as bad_name:
            await admin.create_database("bad name!")
        assert bad_name.value.error_code == fluss.ErrorCode.INVALID_DATABASE_EXCEPTION
        with pytest.raises(fluss.FlussError) as no_db:
            await admin.create_table(
                fluss.TablePath(unique("nodb"), "t"), fluss.TableDescriptor(log_schema())
            )
        assert no_db.value.error_code == fluss.ErrorCode.DATABASE_NOT_EXIST
        with pytest.raises(fluss.FlussError) as no_db_tables:
            await admin.list_tables(unique("nodb"))
        assert no_db_tables.value.error_code == fluss.ErrorCode.DATABASE_NOT_EXIST
        with pytest.raises(fluss.FlussError) as bad_option:
            await admin.create_table(
                fluss.TablePath("fluss", unique("t")),
                fluss.TableDescriptor(log_schema(), properties={"table.no-such-option": "1"}),
            )
        assert bad_option.value.error_code == fluss.ErrorCode.INVALID_CONFIG_EXCEPTION
        assert "table.no-such-option" in str(bad_option.value)
        with pytest.raises(fluss.FlussError) as bad_rf:
            await admin.create_table(
                fluss.TablePath("fluss", unique("t")),
                fluss.TableDescriptor(log_schema(), properties={"table.replication.factor": "5"}),
            )
        assert bad_rf.value.error_code == fluss.ErrorCode.INVALID_REPLICATION_FACTOR
        with pytest.raises(fluss.FlussError) as no_lake:
            path = fluss.TablePath("fluss", unique("t"))
            await admin.create_table(path, fluss.TableDescriptor(log_schema()))
            await admin.get_latest_lake_snapshot(path)
        assert no_lake.value.error_code == fluss.ErrorCode.LAKE_SNAPSHOT_NOT_EXIST

    run(shared_cluster, body)
