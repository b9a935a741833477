"""SASL/PLAIN inside TLS and ACLs on the Kafka listener, through kafka-python and librdkafka: a client
that does not trust the server's CA is refused, a wrong password is refused, a user without WRITE
cannot produce, `strom acl` grants it and then the produce succeeds; groups are governed too. One
tablet server whose KAFKA listener is SASL_SSL with certificates the test makes; servers and
`strom acl` use the PLAINTEXT internal listener (trusted, as in Fluss's recommended layout)."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer
from harness import Cluster, add_kafka_listener
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
)
from test_kafka import RawKafka
from tls_certs import CertificateAuthority

JAAS = (
    "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def login(bootstrap: str, user: str, password: str, ca: Path) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap.split(","),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(ca),  # kafka-python also checks the host name against the certificate
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "request_timeout_ms": 10000,
    }


def strom_acl(cluster: Cluster, operation: str, resource: str, resource_type: str = "table") -> None:
    subprocess.run(
        [
            sys.executable, "-m", "strom", "acl", "add", "--bootstrap", cluster.bootstrap,
            "--principal", "User:alice", "--operation", operation,
            "--resource-type", resource_type, "--resource-name", resource,
        ],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def eventually(attempt: Callable[[], Any], timeout: float = 15) -> Any:
    """attempt() once the grant reached the tablet server (ACLs refresh every second there)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except (TopicAuthorizationFailedError, GroupAuthorizationFailedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_kafka_sasl_plain_and_acls(tmp_path: Path) -> None:
    config = {
        "security.sasl.plain.jaas.config": JAAS,
        "authorizer.enabled": "true",
        "super.users": "User:admin",
    }
    ca = CertificateAuthority.create(tmp_path / "ca")
    stranger = CertificateAuthority.create(tmp_path / "other", "other-ca")
    cluster = Cluster(tmp_path, tablet_servers=1, config=config)
    bootstrap = add_kafka_listener(cluster)
    for server in cluster.tablet_servers.values():
        server.config = {
            **server.config,
            "security.protocol.map": "KAFKA:SASL_SSL,FLUSS:PLAINTEXT",
            "security.ssl.keystore.location": str(ca.issue(tmp_path / "tablet-server.pem")),
        }
    cluster.start()
    try:

        def first_error(password: str, trusted: Path) -> ConfluentError:
            errors: list[ConfluentError] = []
            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(trusted),
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "alice",
                    "sasl.password": password,
                    "error_cb": errors.append,
                }
            )
            deadline = time.monotonic() + 10
            while not errors and time.monotonic() < deadline:
                producer.poll(0.1)
            assert errors
            return errors[0]

        # librdkafka trusting another CA: the TLS handshake fails, before any SASL
        untrusted = first_error("alice-secret", stranger.path)
        assert untrusted.code() == ConfluentError._SSL, untrusted
        # a wrong password: librdkafka reports the server's SASL_AUTHENTICATION_FAILED
        wrong = first_error("wrong", ca.path)
        assert wrong.code() == ConfluentError._AUTHENTICATION, wrong
        assert "invalid username or password" in wrong.str()
        # before logging in, a connection gets ApiVersions and nothing else: Metadata closes it
        raw = RawKafka(bootstrap, ssl.create_default_context(cafile=str(ca.path)))
        assert raw.request(18, 1).error_code == 0
        with pytest.raises((AssertionError, ConnectionError)):
            raw.request(3, 1, topics=None)
        raw.close()
        admin = KafkaAdminClient(**login(bootstrap, "admin", "admin-secret", ca.path))  # a super user
        admin.create_topics([NewTopic("orders", 1, 1)])
        admin.close()

        # READ (hence DESCRIBE) but no WRITE: Metadata answers, the produce itself is refused
        strom_acl(cluster, "read", "kafka.orders")
        producer = KafkaProducer(
            **login(bootstrap, "alice", "alice-secret", ca.path), retries=0, max_block_ms=10000
        )
        with pytest.raises(TopicAuthorizationFailedError):
            eventually(lambda: producer.partitions_for("orders"))  # DESCRIBE not yet on the server
            producer.send("orders", b"refused").get(10)
        strom_acl(cluster, "write", "kafka.orders")
        eventually(lambda: producer.send("orders", key=b"k", value=b"allowed").get(10))
        producer.close()

        # alice reads what she wrote, and only that (nothing of the refused produce was stored)
        consumer = KafkaConsumer(
            **login(bootstrap, "alice", "alice-secret", ca.path), auto_offset_reset="earliest"
        )
        consumer.assign([TopicPartition("orders", 0)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = [r.value for records in consumer.poll(500).values() for r in records]
        consumer.close()
        assert got == [b"allowed"]

        # a consumer group needs READ on that group (Strom's GROUP resource)
        grouped = KafkaConsumer(
            "orders",
            **login(bootstrap, "alice", "alice-secret", ca.path),
            group_id="billing",
            consumer_timeout_ms=100,
        )
        with pytest.raises((GroupAuthorizationFailedError, KafkaError)) as refused:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                grouped.poll(200)
        assert isinstance(refused.value, GroupAuthorizationFailedError), refused.value
        grouped.close()
        strom_acl(cluster, "read", "billing", resource_type="group")  # this group, not any other

        def consume_in(group: str) -> list[bytes]:
            member = KafkaConsumer(
                "orders", **login(bootstrap, "alice", "alice-secret", ca.path), group_id=group,
                auto_offset_reset="earliest", enable_auto_commit=False,
            )  # fmt: skip
            try:
                records: list[bytes] = []
                deadline = time.monotonic() + 15
                while not records and time.monotonic() < deadline:
                    records = [r.value for batch in member.poll(300).values() for r in batch]
                member.commit()
                return records
            finally:
                member.close()

        assert eventually(lambda: consume_in("billing")) == [b"allowed"]
        with pytest.raises(GroupAuthorizationFailedError):
            consume_in("audit")
    finally:
        cluster.stop()
    # a Kafka listener takes part in the graceful stop (it once broke it with an AttributeError)
    assert "Traceback" not in (tmp_path / "logs" / "tablet-server-0.log").read_text()
