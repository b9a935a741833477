"""`strom local` with SASL and ACLs exactly as a user starts it (the protocol map alone secures its one
port), with the Spark tiering service logging in as the super user and tiering a table to the lake, and
a two-listener layout where clients use SASL and servers a PLAINTEXT internal listener."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster, add_client_listener, run_pyfluss, sasl_login

from strom.common.errors import AuthorizationError
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection, SaslPlain
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.launcher import free_port

JAAS = (
    "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
ISSUE_FLAGS = [
    "--config", "security.protocol.map=CLIENT:SASL",
    "--config", "security.sasl.enabled.mechanisms=PLAIN",
    "--config", f"security.sasl.plain.jaas.config={JAAS}",
    "--config", "authorizer.enabled=true",
    "--config", "super.users=User:admin",
]  # fmt: skip
ADMIN = sasl_login("admin", "admin-secret")


def wait_ready(process: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    output = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        if "cluster ready" in line:
            return
    process.kill()
    raise AssertionError("strom local did not become ready:\n" + "".join(output))


def test_strom_local_with_sasl_and_acls_tiers_to_the_lake(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom",
            "local",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            *ISSUE_FLAGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(process)
        bootstrap = f"127.0.0.1:{port}"

        async def no_login(conn: Any) -> list[str]:
            return await conn.get_admin().list_databases()

        with pytest.raises(Exception, match="code=46"):
            run_pyfluss(bootstrap, no_login, 20)

        async def write(conn: Any) -> None:
            admin = conn.get_admin()
            await admin.create_database("shop", ignore_if_exists=True)
            path = fluss.TablePath("shop", "events")
            schema = fluss.Schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
            properties = {"table.datalake.enabled": "true", "table.datalake.freshness": "2s"}
            await admin.create_table(
                path, fluss.TableDescriptor(schema, bucket_count=2, properties=properties)
            )
            table = await conn.get_table(path)
            writer = table.new_append().create_writer()
            writer.write_arrow(pa.table({"id": list(range(100)), "v": [str(i) for i in range(100)]}))
            await writer.flush()

        run_pyfluss(bootstrap, write, properties=ADMIN)
        from pyiceberg.catalog import load_catalog

        datalake = json.loads((data_dir / "cluster.json").read_text())["datalake"]
        lake = datalake["properties"]
        deadline = time.monotonic() + 120
        rows = 0
        while time.monotonic() < deadline:
            catalog = load_catalog(datalake["name"], **lake)
            if catalog.table_exists("shop.events"):
                rows = catalog.load_table("shop.events").scan().to_arrow().num_rows
                if rows == 100:
                    break
            time.sleep(1)
        tiering_log = (data_dir / "logs" / "tiering-0.log").read_text()
        assert rows == 100, f"the lake has {rows} rows; tiering log:\n{tiering_log[-3000:]}"
        assert "admin-secret" not in tiering_log  # the login is never logged
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def two_listener_cluster(base: Path) -> tuple[Cluster, str]:
    """Clients on CLIENT (SASL), servers among themselves on INTERNAL (PLAINTEXT), as Fluss recommends."""
    config = {
        "security.sasl.plain.jaas.config": JAAS,
        "authorizer.enabled": "true",
        "super.users": "User:admin",
    }
    cluster = Cluster(base, tablet_servers=2, config=config)
    return cluster, add_client_listener(cluster, "SASL")


def test_two_listeners_clients_use_sasl_servers_replicate_on_the_internal_one(tmp_path: Path) -> None:
    cluster, client_bootstrap = two_listener_cluster(tmp_path)
    cluster.start()
    try:
        client_ports = {cluster.client_ports[s.port] for s in cluster.tablet_servers.values()}

        async def write_and_read(conn: Any) -> tuple[set[int], list[int]]:
            admin = conn.get_admin()
            await admin.create_database("shop", ignore_if_exists=True)
            path = fluss.TablePath("shop", "replicated")
            schema = fluss.Schema(pa.schema([("id", pa.int64())]))
            properties = {"table.replication.factor": "2"}
            await admin.create_table(
                path, fluss.TableDescriptor(schema, bucket_count=2, properties=properties)
            )
            table = await conn.get_table(path)
            writer = table.new_append().create_writer()
            writer.write_arrow(pa.table({"id": list(range(40))}))
            await writer.flush()
            nodes = await admin.get_server_nodes()
            scanner = await table.new_scan().create_record_batch_log_scanner()
            scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET, 1: fluss.EARLIEST_OFFSET})
            ids: list[int] = []
            for _ in range(20):
                ids.extend((await scanner.poll_arrow(300))["id"].to_pylist())
                if len(ids) >= 40:
                    break
            return {n.port for n in nodes if n.server_type == "TabletServer"}, sorted(ids)

        ports, ids = run_pyfluss(client_bootstrap, write_and_read, properties=ADMIN)
        assert ports == client_ports  # clients are told the CLIENT addresses
        assert ids == list(range(40))

        # the internal listener needs no login; the client listener serves internal APIs to no one but
        # internal principals
        async def internal_calls() -> None:
            inside = await RpcConnection.connect("127.0.0.1", cluster.coordinator.port)
            try:
                await inside.request(ApiKey.LIST_DATABASES, pb.ListDatabasesRequest())
            finally:
                inside.close()
            outside = await RpcConnection.connect(
                "127.0.0.1",
                cluster.client_ports[cluster.coordinator.port],
                sasl=SaslPlain("alice", "alice-secret"),
            )
            try:
                with pytest.raises(AuthorizationError, match="internal API"):
                    await outside.request(ApiKey.ADJUST_ISR, pb.AdjustIsrRequest(serverId=0))
            finally:
                outside.close()

        asyncio.run(internal_calls())
        # replication ran over INTERNAL: both replicas of every bucket are in sync, so a leader can go
        victim, survivor = list(cluster.tablet_servers)
        cluster.kill_tablet_server(victim)
        cluster.wait_for_tablet_servers({survivor})

        async def read_again(conn: Any) -> list[int]:
            table = await conn.get_table(fluss.TablePath("shop", "replicated"))
            scanner = await table.new_scan().create_record_batch_log_scanner()
            scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET, 1: fluss.EARLIEST_OFFSET})
            ids: list[int] = []
            deadline = time.monotonic() + 30
            while len(ids) < 40 and time.monotonic() < deadline:
                ids.extend((await scanner.poll_arrow(300))["id"].to_pylist())
            return sorted(ids)

        assert run_pyfluss(client_bootstrap, read_again, properties=ADMIN) == list(range(40))
    finally:
        cluster.stop()
