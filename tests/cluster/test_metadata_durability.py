"""Metadata survives killed servers; leadership follows tablet servers as they die and return."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster

from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb


async def _admin_session(cluster: Cluster, body: Any) -> Any:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": cluster.bootstrap}))
    try:
        return await asyncio.wait_for(body(connection.get_admin()), 60)
    finally:
        await connection.close()


def admin(cluster: Cluster, body: Any) -> Any:
    return asyncio.run(_admin_session(cluster, body))


def table_leaders(cluster: Cluster, database: str, table: str) -> dict[int, int | None]:
    async def main() -> dict[int, int | None]:
        connection = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
        try:
            request = pb.MetadataRequest()
            request.table_path.add(database_name=database, table_name=table)
            response = await connection.request(ApiKey.GET_METADATA, request)
        finally:
            connection.close()
        return {
            b.bucket_id: (b.leader_id if b.HasField("leader_id") else None)
            for b in response.table_metadata[0].bucket_metadata
        }

    return asyncio.run(main())


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])


def test_killed_coordinator_restarts_with_all_metadata(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=2)

    async def create(a: Any) -> Any:
        await a.create_database("shop", fluss.DatabaseDescriptor(comment="keep me"))
        await a.create_table(
            fluss.TablePath("shop", "orders"),
            fluss.TableDescriptor(fluss.Schema(SCHEMA, primary_keys=["id"]), bucket_count=4),
        )
        await a.create_table(
            fluss.TablePath("shop", "events"),
            fluss.TableDescriptor(fluss.Schema(SCHEMA), partition_keys=["region"], bucket_count=2),
        )
        await a.create_partition(fluss.TablePath("shop", "events"), {"region": "eu"})
        await a.create_partition(fluss.TablePath("shop", "events"), {"region": "us"})
        info = await a.get_table_info(fluss.TablePath("shop", "orders"))
        parts = await a.list_partition_infos(fluss.TablePath("shop", "events"))
        return info.table_id, sorted((p.partition_name, p.partition_id) for p in parts)

    table_id, partitions = admin(cluster, create)
    leaders_before = table_leaders(cluster, "shop", "orders")
    assert set(leaders_before) == {0, 1, 2, 3} and set(leaders_before.values()) == {0, 1}

    cluster.restart_coordinator(kill=True)  # SIGKILL: no clean shutdown
    cluster.wait_for_tablet_servers()

    async def check(a: Any) -> None:
        assert sorted(await a.list_databases()) == ["fluss", "shop"]
        assert (await a.get_database_info("shop")).get_database_descriptor().comment == "keep me"
        assert sorted(await a.list_tables("shop")) == ["events", "orders"]
        info = await a.get_table_info(fluss.TablePath("shop", "orders"))
        assert info.table_id == table_id
        assert info.get_primary_keys() == ["id"] and info.num_buckets == 4
        parts = await a.list_partition_infos(fluss.TablePath("shop", "events"))
        assert sorted((p.partition_name, p.partition_id) for p in parts) == partitions
        # new ids never reuse old ones
        await a.create_table(fluss.TablePath("shop", "later"), fluss.TableDescriptor(fluss.Schema(SCHEMA)))
        later = await a.get_table_info(fluss.TablePath("shop", "later"))
        assert later.table_id > table_id

    admin(cluster, check)
    assert table_leaders(cluster, "shop", "orders") == leaders_before


def test_leadership_moves_with_tablet_server_failures(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=2)

    async def create(a: Any) -> None:
        await a.create_table(
            fluss.TablePath("fluss", "replicated"),
            fluss.TableDescriptor(
                fluss.Schema(SCHEMA), bucket_count=4, properties={"table.replication.factor": "2"}
            ),
        )
        await a.create_table(
            fluss.TablePath("fluss", "single"), fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=4)
        )

    admin(cluster, create)
    replicated = table_leaders(cluster, "fluss", "replicated")
    assert set(replicated.values()) == {0, 1}

    cluster.kill_tablet_server(1)
    # after the session times out, server 0 leads every replicated bucket; single-replica buckets
    # of server 1 have no leader until it returns
    wait_for(lambda: set(table_leaders(cluster, "fluss", "replicated").values()) == {0}, what="failover")
    single = table_leaders(cluster, "fluss", "single")
    assert all(leader in (0, None) for leader in single.values())

    cluster.start_tablet_server(1)
    cluster.wait_for_tablet_servers({0, 1})
    wait_for(lambda: None not in table_leaders(cluster, "fluss", "single").values(), what="leader return")

    # the tablet servers' replica directories exist for the buckets they host
    for server_id, server in cluster.tablet_servers.items():
        dirs = list(server.data_dir.glob("fluss/single-*/bucket-*"))
        hosted = [b for b, leader in table_leaders(cluster, "fluss", "single").items() if leader == server_id]
        assert len(dirs) >= len(hosted)
