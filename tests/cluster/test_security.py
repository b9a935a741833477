"""Authentication and authorization on a real cluster: SASL/PLAIN on the one listener (which the servers
also use among themselves, replication included), ACLs granted and revoked with `strom acl`, every API
refused without the right grant, and the official client as the judge."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster, run_pyfluss, sasl_login

from strom.client import AclBinding, AclEntry, AclFilter, Connection, OperationType, Principal, Resource
from strom.common.errors import FlussError
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection, SaslPlain
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal

JAAS = (
    "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SECURE = {
    "security.protocol.map": "CLIENT:SASL",
    "security.sasl.enabled.mechanisms": "PLAIN",
    "security.sasl.plain.jaas.config": JAAS,
    "authorizer.enabled": "true",
    "super.users": "User:admin",
    "authorizer.acl-refresh-interval": "200ms",
}
ADMIN = sasl_login("admin", "admin-secret")
ALICE = sasl_login("alice", "alice-secret")
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
AUTHENTICATE, AUTHORIZATION = 46, 48


def client(user: dict[str, str]) -> dict[str, str]:
    """Strom client settings for a pyfluss-style login."""
    return {
        "client.security.protocol": "SASL",
        "client.security.sasl.username": user["security.sasl.username"],
        "client.security.sasl.password": user["security.sasl.password"],
    }


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("secure"), tablet_servers=2, config=SECURE).start()
    yield cluster
    cluster.stop()


def strom_client(cluster: Cluster, user: dict[str, str], body: Callable[[Connection], Any]) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap, **client(user)}) as conn:
            return await asyncio.wait_for(body(conn), 60)

    return asyncio.run(main())


def create_table(cluster: Cluster, name: str, primary_key: bool = False, replicas: int = 2) -> None:
    async def body(conn: Any) -> None:
        admin = conn.get_admin()
        await admin.create_database("shop", ignore_if_exists=True)
        schema = fluss.Schema(SCHEMA, primary_keys=["id"] if primary_key else None)
        descriptor = fluss.TableDescriptor(
            schema, bucket_count=2, properties={"table.replication.factor": str(replicas)}
        )
        await admin.create_table(fluss.TablePath("shop", name), descriptor, ignore_if_exists=False)

    run_pyfluss(cluster.bootstrap, body, properties=ADMIN)


def append(cluster: Cluster, name: str, start: int, count: int, user: dict[str, str] = ADMIN) -> None:
    async def body(conn: Any) -> None:
        table = await conn.get_table(fluss.TablePath("shop", name))
        writer = table.new_append().create_writer()
        handles = [writer.append({"id": i, "v": f"v{i}"}) for i in range(start, start + count)]
        await writer.flush()
        for handle in handles:
            await handle.wait()

    run_pyfluss(cluster.bootstrap, body, properties=user)


def read_ids(cluster: Cluster, name: str, user: dict[str, str]) -> list[int]:
    async def body(conn: Any) -> list[int]:
        table = await conn.get_table(fluss.TablePath("shop", name))
        admin = conn.get_admin()
        ends = await admin.list_offsets(fluss.TablePath("shop", name), [0, 1], fluss.OffsetSpec.latest())
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET, 1: fluss.EARLIEST_OFFSET})
        ids: list[int] = []
        deadline = time.monotonic() + 30
        while len(ids) < sum(ends.values()) and time.monotonic() < deadline:
            ids.extend((await scanner.poll_arrow(500))["id"].to_pylist())
        return sorted(ids)

    return run_pyfluss(cluster.bootstrap, body, properties=user)


def error_code(call: Callable[[], Any]) -> int | None:
    try:
        call()
    except FlussError as e:
        return e.code
    except Exception as e:  # pyfluss raises fluss.FlussError
        return getattr(e, "error_code", None)
    return None


def strom_cli(
    cluster: Cluster, command: str, *args: str, user: dict[str, str] = ADMIN, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs an administrative `strom` command logged in as `user`."""
    login = client(user)
    config = [part for key, value in login.items() for part in ("--config", f"{key}={value}")]
    return subprocess.run(
        [sys.executable, "-m", "strom", command, *args, "--bootstrap", cluster.bootstrap, *config],
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def strom_acl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return strom_cli(cluster, "acl", *args)


def wait_until(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# ---- authentication


def test_missing_or_wrong_credentials_are_refused(secure_cluster: Cluster) -> None:
    async def list_databases(conn: Any) -> list[str]:
        return await conn.get_admin().list_databases()

    for properties in (None, sasl_login("alice", "wrong"), sasl_login("mallory", "alice-secret")):
        assert error_code(
            functools.partial(run_pyfluss, secure_cluster.bootstrap, list_databases, 20, properties)
        ) == (AUTHENTICATE)
    assert "fluss" in run_pyfluss(secure_cluster.bootstrap, list_databases, properties=ADMIN)


def test_requests_before_authentication_and_garbage_tokens(secure_cluster: Cluster) -> None:
    async def main() -> None:
        host, port = secure_cluster.coordinator.host, secure_cluster.coordinator.port
        conn = await RpcConnection.connect(host, port)
        try:
            with pytest.raises(FlussError) as refused:
                await conn.request(ApiKey.LIST_DATABASES, pb.ListDatabasesRequest())
            assert refused.value.code == AUTHENTICATE and "SASL" in refused.value.message
        finally:
            conn.close()
        for token in (b"", b"\xff" * 64, b"\0admin", b"\0admin\0admin-secret\0extra", b"\0admin\0wrong"):
            conn = await RpcConnection.connect(host, port)
            try:
                with pytest.raises(FlussError) as failed:
                    await conn.request(
                        ApiKey.AUTHENTICATE, pb.AuthenticateRequest(protocol="PLAIN", token=token)
                    )
                assert failed.value.code == AUTHENTICATE
                # nothing else is served on that connection: the server closed it
                await asyncio.wait_for(conn.closed, 5)
            finally:
                conn.close()
        # the server is fine: a proper login works
        conn = await RpcConnection.connect(host, port, sasl=SaslPlain("admin", "admin-secret"))
        try:
            response = await conn.request(ApiKey.LIST_DATABASES, pb.ListDatabasesRequest())
            assert "fluss" in response.database_name
        finally:
            conn.close()

    asyncio.run(main())


# ---- authorization with pyfluss and strom acl


def test_alice_needs_a_grant_then_reads_but_cannot_write_or_drop(secure_cluster: Cluster) -> None:
    create_table(secure_cluster, "orders")
    append(secure_cluster, "orders", 0, 10)

    assert error_code(lambda: read_ids(secure_cluster, "orders", ALICE)) == AUTHORIZATION
    strom_acl(secure_cluster, "add", "--principal", "User:alice", "--operation", "READ",
              "--resource-type", "TABLE", "--resource-name", "shop.orders")  # fmt: skip
    listed = strom_acl(secure_cluster, "list", "--principal", "User:alice", "--json").stdout
    assert '"resource_name": "shop.orders"' in listed and '"operation": "READ"' in listed

    wait_until(lambda: error_code(lambda: read_ids(secure_cluster, "orders", ALICE)) is None)
    assert read_ids(secure_cluster, "orders", ALICE) == list(range(10))
    # pyfluss wraps the refused InitWriter (48) in an "unexpected error" of its own
    with pytest.raises(Exception, match=r"no authorization to operate WRITE on resource TABLE:shop\.orders"):
        append(secure_cluster, "orders", 100, 1, user=ALICE)

    async def drop(conn: Any) -> None:
        await conn.get_admin().drop_table(fluss.TablePath("shop", "orders"))

    assert error_code(lambda: run_pyfluss(secure_cluster.bootstrap, drop, properties=ALICE)) == AUTHORIZATION
    assert read_ids(secure_cluster, "orders", ADMIN) == list(range(10))  # nothing changed

    strom_acl(secure_cluster, "remove", "--principal", "User:alice", "--resource-type", "TABLE",
              "--resource-name", "shop.orders")  # fmt: skip
    # revoked on the coordinator and on every tablet server within the refresh interval
    wait_until(lambda: error_code(lambda: read_ids(secure_cluster, "orders", ALICE)) == AUTHORIZATION)


def test_status_logs_in_and_needs_describe_on_the_cluster(secure_cluster: Cluster) -> None:
    create_table(secure_cluster, "observed")
    state = json.loads(strom_cli(secure_cluster, "status", "--json").stdout)
    assert "observed" in {t["name"] for t in state["tables"]}
    refused = strom_cli(secure_cluster, "status", user=ALICE, check=False)
    assert refused.returncode == 1
    assert "AuthorizationError (48)" in refused.stderr and "DESCRIBE on resource CLUSTER" in refused.stderr
    refused = strom_cli(secure_cluster, "rebalance", "--no-wait", user=ALICE, check=False)
    assert refused.returncode == 1 and "WRITE on resource CLUSTER" in refused.stderr


def test_database_grants_and_listing_filters_with_strom_client(secure_cluster: Cluster) -> None:
    create_table(secure_cluster, "listed")
    create_table(secure_cluster, "hidden_from_bob")

    async def grant(conn: Connection) -> None:
        await conn.get_admin().create_acls(
            [
                AclBinding(
                    Resource.table("shop", "listed"),
                    AclEntry(Principal.user("bob"), "*", OperationType.DESCRIBE),
                )
            ]
        )

    strom_client(secure_cluster, ADMIN, grant)
    bob = sasl_login("bob", "bob-secret")

    async def look(conn: Connection) -> tuple[list[str], bool, list[AclBinding]]:
        admin = conn.get_admin()
        tables = await admin.list_tables("shop")
        exists = await admin.table_exists("shop.hidden_from_bob")
        return tables, exists, await admin.list_acls(AclFilter())

    def bob_view() -> tuple[list[str], bool, list[AclBinding]]:
        return strom_client(secure_cluster, bob, look)

    wait_until(lambda: bob_view()[0] == ["listed"])
    _, exists, acls = bob_view()
    assert not exists
    assert [str(b.resource) for b in acls] == ["TABLE:shop.listed"]  # only ACLs he may describe

    async def grab_all(conn: Connection) -> None:
        await conn.get_admin().create_acls(
            [AclBinding(Resource.cluster(), AclEntry(Principal.user("bob"), "*", OperationType.ALL))]
        )

    with pytest.raises(FlussError) as refused:
        strom_client(secure_cluster, bob, grab_all)
    assert refused.value.code == AUTHORIZATION and "User:bob" in refused.value.message


# ---- every API, refused without the right ACL


def _table_path(message: Any, table: str) -> Any:
    message.table_path.database_name = "shop"
    message.table_path.table_name = table
    return message


def _requests(table_id: int, pk_table_id: int) -> list[tuple[str, ApiKey, Any]]:
    """(server, api, request) for every API a client can send; server is "coordinator" or "tablet"."""
    spec = pb.PbPartitionSpec(partition_key_values=[pb.PbKeyValue(key="p", value="1")])
    fetch = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1024)
    fetch.tables_req.add(table_id=table_id, projection_pushdown_enabled=False).buckets_req.add(
        bucket_id=0, fetch_offset=0, max_fetch_bytes=1024
    )
    metadata = pb.MetadataRequest()
    metadata.table_path.add(database_name="shop", table_name="all_apis")
    init_writer = pb.InitWriterRequest()
    init_writer.table_path.add(database_name="shop", table_name="all_apis")
    lookup = pb.LookupRequest(table_id=pk_table_id)
    lookup.buckets_req.add(bucket_id=0, keys=[b"\x01"])
    prefix = pb.PrefixLookupRequest(table_id=pk_table_id)
    prefix.buckets_req.add(bucket_id=0, keys=[b"\x01"])
    coordinator = [
        (ApiKey.CREATE_DATABASE, pb.CreateDatabaseRequest(database_name="x", ignore_if_exists=True)),
        (
            ApiKey.DROP_DATABASE,
            pb.DropDatabaseRequest(database_name="shop", ignore_if_not_exists=True, cascade=True),
        ),
        (ApiKey.GET_DATABASE_INFO, pb.GetDatabaseInfoRequest(database_name="shop")),
        (
            ApiKey.CREATE_TABLE,
            _table_path(pb.CreateTableRequest(table_json=b"{}", ignore_if_exists=True), "new"),
        ),
        (ApiKey.DROP_TABLE, _table_path(pb.DropTableRequest(ignore_if_not_exists=True), "all_apis")),
        (ApiKey.GET_TABLE_INFO, _table_path(pb.GetTableInfoRequest(), "all_apis")),
        (ApiKey.GET_TABLE_SCHEMA, _table_path(pb.GetTableSchemaRequest(), "all_apis")),
        (ApiKey.LIST_PARTITION_INFOS, _table_path(pb.ListPartitionInfosRequest(), "all_apis")),
        (
            ApiKey.CREATE_PARTITION,
            _table_path(
                pb.CreatePartitionRequest(partition_spec=spec, ignore_if_not_exists=True), "all_apis"
            ),
        ),
        (
            ApiKey.DROP_PARTITION,
            _table_path(pb.DropPartitionRequest(partition_spec=spec, ignore_if_not_exists=True), "all_apis"),
        ),
        (ApiKey.GET_LATEST_KV_SNAPSHOTS, _table_path(pb.GetLatestKvSnapshotsRequest(), "all_apis_pk")),
        (ApiKey.GET_LAKE_SNAPSHOT, _table_path(pb.GetLakeSnapshotRequest(), "all_apis")),
        (
            ApiKey.GET_KV_SNAPSHOT_METADATA,
            pb.GetKvSnapshotMetadataRequest(table_id=pk_table_id, bucket_id=0, snapshot_id=0),
        ),
        (ApiKey.LIST_KV_SNAPSHOTS, pb.ListKvSnapshotsRequest(table_id=pk_table_id)),
        (ApiKey.LIST_REMOTE_LOG_MANIFESTS, pb.ListRemoteLogManifestsRequest(table_id=table_id)),
        (ApiKey.GET_METADATA, metadata),
        (ApiKey.GET_FILESYSTEM_SECURITY_TOKEN, pb.GetFileSystemSecurityTokenRequest()),
        (ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest()),
        (ApiKey.ADD_SERVER_TAG, pb.AddServerTagRequest(server_ids=[0], server_tag=0)),
        (ApiKey.REMOVE_SERVER_TAG, pb.RemoveServerTagRequest(server_ids=[0], server_tag=0)),
        (ApiKey.REBALANCE, pb.RebalanceRequest()),
        (ApiKey.LIST_REBALANCE_PROGRESS, pb.ListRebalanceProgressRequest()),
        (ApiKey.CANCEL_REBALANCE, pb.CancelRebalanceRequest()),
        # internal APIs
        (ApiKey.ADJUST_ISR, pb.AdjustIsrRequest(serverId=0)),
        (
            ApiKey.COMMIT_KV_SNAPSHOT,
            pb.CommitKvSnapshotRequest(completed_snapshot=b"{}", coordinator_epoch=0, bucket_leader_epoch=0),
        ),
        (
            ApiKey.COMMIT_REMOTE_LOG_MANIFEST,
            pb.CommitRemoteLogManifestRequest(
                table_id=table_id,
                bucket_id=0,
                remote_log_manifest_path="/x",
                remote_log_start_offset=0,
                remote_log_end_offset=0,
                coordinator_epoch=0,
                bucket_leader_epoch=0,
            ),
        ),
        (ApiKey.LAKE_TIERING_HEARTBEAT, pb.LakeTieringHeartbeatRequest(request_table=True)),
        (ApiKey.PREPARE_LAKE_TABLE_SNAPSHOT, pb.PrepareLakeTableSnapshotRequest()),
        (ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT, pb.CommitLakeTableSnapshotRequest()),
        (
            ApiKey.REGISTER_TABLET_SERVER,
            internal.RegisterTabletServerRequest(server_id=7, host="127.0.0.1", port=1),
        ),
        (ApiKey.TABLET_SERVER_HEARTBEAT, internal.TabletServerHeartbeatRequest(server_id=0, session_id=1)),
    ]
    tablet = [
        (ApiKey.PRODUCE_LOG, pb.ProduceLogRequest(acks=1, table_id=table_id, timeout_ms=1000)),
        (ApiKey.FETCH_LOG, fetch),
        (
            ApiKey.LIST_OFFSETS,
            pb.ListOffsetsRequest(follower_server_id=-1, offset_type=1, table_id=table_id, bucket_id=[0]),
        ),
        (ApiKey.INIT_WRITER, init_writer),
        (ApiKey.PUT_KV, pb.PutKvRequest(acks=1, table_id=pk_table_id, timeout_ms=1000)),
        (ApiKey.LOOKUP, lookup),
        (ApiKey.PREFIX_LOOKUP, prefix),
        (ApiKey.LIMIT_SCAN, pb.LimitScanRequest(table_id=pk_table_id, bucket_id=0, limit=10)),
        (ApiKey.GET_TABLE_INFO, _table_path(pb.GetTableInfoRequest(), "all_apis")),  # forwarded
        (ApiKey.GET_METADATA, metadata),
        (
            ApiKey.GET_KV_SNAPSHOT_METADATA,
            pb.GetKvSnapshotMetadataRequest(table_id=pk_table_id, bucket_id=0, snapshot_id=0),
        ),
        (ApiKey.DESCRIBE_REPLICAS, internal.DescribeReplicasRequest()),
        # internal APIs
        (
            ApiKey.FETCH_LOG,
            pb.FetchLogRequest(follower_server_id=1, max_bytes=1024, tables_req=fetch.tables_req),
        ),
        (ApiKey.NOTIFY_LEADER_AND_ISR, pb.NotifyLeaderAndIsrRequest(coordinator_epoch=99)),
        (ApiKey.STOP_REPLICA, pb.StopReplicaRequest(coordinator_epoch=99)),
        (ApiKey.UPDATE_METADATA, pb.UpdateMetadataRequest(coordinator_epoch=99)),
        (ApiKey.NOTIFY_LAKE_TABLE_OFFSET, pb.NotifyLakeTableOffsetRequest(coordinator_epoch=99)),
    ]
    return [("coordinator", k, r) for k, r in coordinator] + [("tablet", k, r) for k, r in tablet]


def test_every_api_is_refused_without_the_right_acl(secure_cluster: Cluster) -> None:
    create_table(secure_cluster, "all_apis")
    create_table(secure_cluster, "all_apis_pk", primary_key=True)
    append(secure_cluster, "all_apis", 0, 20)

    async def ids(conn: Connection) -> tuple[int, int, str, int]:
        admin = conn.get_admin()
        log_table = await admin.get_table_info("shop.all_apis")
        pk_table = await admin.get_table_info("shop.all_apis_pk")
        leader = next(s for s in await admin.get_server_nodes() if s.server_type.name == "TABLET_SERVER")
        return log_table.table_id, pk_table.table_id, leader.host, leader.port

    table_id, pk_table_id, tablet_host, tablet_port = strom_client(secure_cluster, ADMIN, ids)
    # grants elsewhere do not leak: alice may write another database and describe another table, but
    # may read nothing (so she gets no remote-storage credentials either)
    strom_acl(secure_cluster, "add", "--principal", "User:alice", "--operation", "WRITE",
              "--resource-type", "DATABASE", "--resource-name", "elsewhere")  # fmt: skip
    strom_acl(secure_cluster, "add", "--principal", "User:alice", "--operation", "DESCRIBE",
              "--resource-type", "TABLE", "--resource-name", "shop.other")  # fmt: skip

    async def send_all() -> list[str]:
        alice = SaslPlain("alice", "alice-secret")
        servers = {
            "coordinator": await RpcConnection.connect(
                secure_cluster.coordinator.host, secure_cluster.coordinator.port, sasl=alice
            ),
            "tablet": await RpcConnection.connect(tablet_host, tablet_port, sasl=alice),
        }
        failures = []
        try:
            for server, key, request in _requests(table_id, pk_table_id):
                try:
                    await servers[server].request(key, request, timeout=10)
                    failures.append(f"{server} {key.name}: served")
                except FlussError as e:
                    if e.code != AUTHORIZATION:
                        failures.append(f"{server} {key.name}: code {e.code} {e.message}")
        finally:
            for connection in servers.values():
                connection.close()
        return failures

    assert asyncio.run(send_all()) == []
    # nothing was changed by any of them
    assert read_ids(secure_cluster, "all_apis", ADMIN) == list(range(20))

    async def tables(conn: Connection) -> list[str]:
        return await conn.get_admin().list_tables("shop")

    assert {"all_apis", "all_apis_pk"} <= set(strom_client(secure_cluster, ADMIN, tables))
    assert "new" not in strom_client(secure_cluster, ADMIN, tables)


def test_acls_survive_a_coordinator_restart(secure_cluster: Cluster) -> None:
    create_table(secure_cluster, "durable")
    append(secure_cluster, "durable", 0, 5)
    strom_acl(secure_cluster, "add", "--principal", "User:alice", "--operation", "READ",
              "--resource-type", "DATABASE", "--resource-name", "shop")  # fmt: skip
    secure_cluster.restart_coordinator(kill=True)
    secure_cluster.wait_for_tablet_servers()
    listed = strom_acl(secure_cluster, "list", "--resource-type", "DATABASE", "--json").stdout
    assert '"principal": "User:alice"' in listed
    wait_until(lambda: error_code(lambda: read_ids(secure_cluster, "durable", ALICE)) is None, timeout=30)
    assert read_ids(secure_cluster, "durable", ALICE) == list(range(5))
    strom_acl(secure_cluster, "remove", "--principal", "User:alice", "--resource-type", "DATABASE",
              "--resource-name", "shop")  # fmt: skip


# ---- replication with SASL


def test_replication_over_the_sasl_listener_survives_a_leader_kill(secure_cluster: Cluster) -> None:
    # the servers log in to each other on the one SASL listener (as the super user they derive)
    create_table(secure_cluster, "replicated", replicas=2)
    append(secure_cluster, "replicated", 0, 50)

    async def leaders(conn: Connection) -> set[int]:
        path = TablePath("shop", "replicated")
        info = await conn.metadata.refresh_table(path)
        await conn.metadata.refresh_leaders(path)
        nodes = [conn.metadata.leader_for(TableBucket(info.table_id, None, b)) for b in (0, 1)]
        return {node.id for node in nodes if node is not None}

    victim = next(iter(strom_client(secure_cluster, ADMIN, leaders)))
    secure_cluster.kill_tablet_server(victim)
    try:
        secure_cluster.wait_for_tablet_servers(set(secure_cluster.tablet_servers) - {victim})
        append(secure_cluster, "replicated", 50, 50)
        assert read_ids(secure_cluster, "replicated", ADMIN) == list(range(100))
    finally:
        secure_cluster.start_tablet_server(victim)
        secure_cluster.wait_for_tablet_servers()
