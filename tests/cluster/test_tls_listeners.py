"""TLS on a real cluster: the servers' INTERNAL listener speaks SSL with client certificates required
(registration, leadership pushes and follower fetches all go through it, each server presenting its
own certificate), strom.client writes over TLS trusting the test's CA and presenting a certificate it
signed, pyfluss reads the same rows through a PLAINTEXT CLIENT listener, and a client trusting another
CA, or presenting no certificate, is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest
from failover_workload import read_log_ids
from harness import Cluster, add_client_listener
from tls_certs import CertificateAuthority

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.common.errors import AuthenticateError, FlussError


def test_servers_and_strom_client_speak_tls_while_pyfluss_keeps_a_plaintext_listener(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path / "ca")
    cluster = Cluster(tmp_path / "cluster", tablet_servers=2)
    plaintext_bootstrap = add_client_listener(cluster, "PLAINTEXT")
    for server in [cluster.coordinator, *cluster.tablet_servers.values()]:
        server.config = {
            **server.config,
            "security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL",
            "security.ssl.keystore.location": str(
                ca.issue(tmp_path / f"{server.role}-{server.server_id}.pem")
            ),
            "security.ssl.truststore.location": str(ca.path),
            "security.ssl.client.auth": "required",
        }
    cluster.start()
    try:
        tls = {
            "bootstrap.servers": cluster.bootstrap,  # the INTERNAL listener: TLS
            "client.security.protocol": "SSL",
            "client.security.ssl.truststore.location": str(ca.path),
            "client.security.ssl.keystore.location": str(
                ca.issue(tmp_path / "client.pem", hosts=("client",))
            ),
        }

        async def write() -> list[list[int]]:
            async with await Connection.create(tls) as conn:
                path = TablePath("fluss", "secret")
                schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64())]))
                descriptor = TableDescriptor(
                    schema, bucket_count=2, properties={"table.replication.factor": "2"}
                )
                await conn.get_admin().create_table(path, descriptor)
                table = await conn.get_table(path)
                writer = table.new_append().create_writer()  # acks=all: both replicas, over TLS
                await writer.write_arrow(pa.table({"id": pa.array(range(100), pa.int64())}))
                await writer.flush()
                state = await conn.get_admin().describe_cluster()
                return [sorted(b.isr) for t in state.tables for b in t.buckets]

        assert asyncio.run(write()) == [[0, 1], [0, 1]]
        assert asyncio.run(read_log_ids(plaintext_bootstrap, "secret", buckets=2)) == list(range(100))

        stranger = CertificateAuthority.create(tmp_path / "other", "other-ca")

        async def untrusting() -> None:
            settings = {**tls, "client.security.ssl.truststore.location": str(stranger.path)}
            async with await Connection.create(settings) as conn:
                await conn.get_admin().list_databases()

        with pytest.raises(
            AuthenticateError,
            match=r"certificate verify failed|unable to get local issuer|self-signed certificate in",
        ):
            asyncio.run(untrusting())

        async def anonymous() -> None:
            settings = {k: v for k, v in tls.items() if "keystore" not in k}
            settings["client.request-timeout"] = "1s"
            async with await Connection.create(settings) as conn:
                await conn.get_admin().list_databases()

        with pytest.raises(FlussError, match=r"refuses clients without a certificate it trusts"):
            asyncio.run(anonymous())
    finally:
        cluster.stop()
