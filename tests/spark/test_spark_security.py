"""The Spark data source against a SASL_SSL cluster with ACLs and mutual TLS: `client.security.*`
options take the driver and the executors through TLS (trusting the test's CA, presenting a client
certificate it signed) and log them in; what the principal may not do is refused with the server's
message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster
from tls_certs import CertificateAuthority

from strom.client import AclBinding, AclEntry, Connection, OperationType, Principal, Resource

JAAS = (
    "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SECURE = {
    "security.protocol.map": "CLIENT:SASL_SSL",
    "security.ssl.client.auth": "required",
    "security.sasl.plain.jaas.config": JAAS,
    "authorizer.enabled": "true",
    "super.users": "User:admin",
    "authorizer.acl-refresh-interval": "200ms",
}


# the TLS files (made by the fixture): the CA's certificate and a client key store it signed
TLS: dict[str, str] = {}


def login(user: str, password: str) -> dict[str, str]:
    return {
        "client.security.protocol": "SASL_SSL",
        "client.security.sasl.username": user,
        "client.security.sasl.password": password,
        **TLS,
    }


ADMIN: dict[str, str] = {}
ALICE: dict[str, str] = {}


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("spark-secure")
    ca = CertificateAuthority.create(base / "ca")
    TLS["client.security.ssl.truststore.location"] = str(ca.path)
    TLS["client.security.ssl.keystore.location"] = str(ca.issue(base / "client.pem", hosts=("spark",)))
    ADMIN.update(login("admin", "admin-secret"))
    ALICE.update(login("alice", "alice-secret"))
    tls = {
        "security.ssl.keystore.location": str(ca.issue(base / "server.pem")),
        "security.ssl.truststore.location": str(ca.path),
    }
    cluster = Cluster(base / "cluster", config={**SECURE, **tls}).start()
    yield cluster
    cluster.stop()


def admin_call(cluster: Cluster, body: Any) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap, **ADMIN}) as conn:
            return await body(conn.get_admin())

    return asyncio.run(main())


def source(spark: Any, cluster: Cluster, user: dict[str, str]) -> Any:
    reader = spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap)
    for key, value in user.items():
        reader = reader.option(key, value)
    return reader


def test_spark_reads_and_writes_with_sasl_and_acls(spark: Any, secure_cluster: Cluster) -> None:
    from strom.client import Schema, TableDescriptor

    async def create(admin: Any) -> None:
        await admin.create_database("spark_sec", ignore_if_exists=True)
        schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
        await admin.create_table("spark_sec.t", TableDescriptor(schema, bucket_count=2))

    admin_call(secure_cluster, create)
    frame = spark.createDataFrame([(i, f"v{i}") for i in range(100)], "id long, v string")
    writer = frame.write.format("fluss").option("bootstrap.servers", secure_cluster.bootstrap).mode("append")
    for key, value in ADMIN.items():
        writer = writer.option(key, value)
    writer.save("spark_sec.t")  # executors log in as admin

    assert source(spark, secure_cluster, ADMIN).load("spark_sec.t").count() == 100
    with pytest.raises(Exception, match=r"User:alice has no authorization to operate DESCRIBE"):
        source(spark, secure_cluster, ALICE).load("spark_sec.t").count()

    async def grant(admin: Any) -> None:
        binding = AclEntry(Principal.user("alice"), "*", OperationType.READ)
        await admin.create_acls([AclBinding(Resource.table("spark_sec", "t"), binding)])

    admin_call(secure_cluster, grant)
    time.sleep(1)  # tablet servers reload ACLs every 200 ms
    got = source(spark, secure_cluster, ALICE).load("spark_sec.t").toArrow()
    assert sorted(got["id"].to_pylist()) == list(range(100))

    alice_writer = frame.write.format("fluss").option("bootstrap.servers", secure_cluster.bootstrap)
    for key, value in ALICE.items():
        alice_writer = alice_writer.option(key, value)
    with pytest.raises(Exception, match=r"no authorization to operate WRITE"):
        alice_writer.mode("append").save("spark_sec.t")
    assert source(spark, secure_cluster, ADMIN).load("spark_sec.t").count() == 100
