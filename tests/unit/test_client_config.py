"""ClientConfig: Fluss's client option names, defaults, pyfluss aliases and validation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strom.client.config import ClientConfig, ClientConfigError, parse_address, parse_jaas_credentials
from strom.common.config import NoKeyAssigner
from strom.common.errors import FlussError
from strom.rpc.client import SaslPlain


def test_defaults_are_flusss() -> None:
    c = ClientConfig.from_dict({})
    assert c.bootstrap_servers == ("127.0.0.1:9123",)
    assert c.request_timeout == timedelta(seconds=30)
    assert c.connect_timeout == timedelta(seconds=120)
    assert c.writer_batch_size == 2 << 20
    assert c.writer_batch_timeout == timedelta(milliseconds=100)
    assert c.writer_buffer_memory_size == 64 << 20
    assert c.writer_acks == "all" and c.acks == -1
    assert c.writer_retries == 2**31 - 1
    assert c.writer_enable_idempotence
    assert c.writer_max_inflight_requests_per_bucket == 5
    assert c.writer_bucket_no_key_assigner == NoKeyAssigner.STICKY
    assert c.scanner_log_max_poll_records == 500
    assert c.scanner_log_fetch_max_bytes == 16 << 20
    assert c.scanner_log_fetch_max_bytes_for_bucket == 1 << 20
    assert c.scanner_log_fetch_wait_max_time == timedelta(milliseconds=500)
    assert c.scanner_log_fetch_min_bytes == 1
    assert c.lookup_max_batch_size == 128 and c.lookup_batch_timeout == timedelta(milliseconds=100)
    assert c.security_protocol == "PLAINTEXT" and c.sasl is None
    assert c == ClientConfig()


def test_fluss_keys_and_value_syntax() -> None:
    c = ClientConfig.from_dict(
        {
            "bootstrap.servers": "a:9123, b:9124",
            "client.request-timeout": "5 s",
            "client.writer.batch-size": "512kb",
            "client.writer.batch-timeout": "20ms",
            "client.writer.bucket.no-key-assigner": "round_robin",
            "client.scanner.log.fetch.max-bytes": "32mb",
            "client.lookup.max-batch-size": 64,
            "client.writer.enable-idempotence": False,
            "some.other.key": "kept",
        }
    )
    assert c.bootstrap_servers == ("a:9123", "b:9124")
    assert c.bootstrap_addresses == [("a", 9123), ("b", 9124)]
    assert c.request_timeout == timedelta(seconds=5)
    assert c.writer_batch_size == 512 << 10
    assert c.writer_batch_timeout == timedelta(milliseconds=20)
    assert c.writer_bucket_no_key_assigner == NoKeyAssigner.ROUND_ROBIN
    assert c.scanner_log_fetch_max_bytes == 32 << 20
    assert c.lookup_max_batch_size == 64
    assert not c.writer_enable_idempotence
    assert c.properties["some.other.key"] == "kept"
    assert c.configuration.get("some.other.key") == "kept"
    assert ClientConfig.from_dict(c.to_dict()) == c


def test_pyfluss_keys_are_accepted() -> None:
    c = ClientConfig.from_dict(
        {
            "bootstrap.servers": "h:1",
            "writer.batch-timeout-ms": "5",
            "writer.batch-size": "1024",
            "scanner.log.fetch.wait-max-time-ms": "250",
            "connect-timeout": "3000",
            "writer.acks": "all",
        }
    )
    assert c.writer_batch_timeout == timedelta(milliseconds=5)
    assert c.writer_batch_size == 1024
    assert c.scanner_log_fetch_wait_max_time == timedelta(milliseconds=250)
    assert c.connect_timeout == timedelta(seconds=3)
    # the Fluss key wins over the pyfluss one
    both = ClientConfig.from_dict({"writer.batch-size": "1024", "client.writer.batch-size": "4kb"})
    assert both.writer_batch_size == 4096


def test_idempotence_follows_conflicting_settings_unless_asked_for() -> None:
    assert not ClientConfig.from_dict({"client.writer.acks": "1"}).writer_enable_idempotence
    assert not ClientConfig.from_dict({"client.writer.retries": "0"}).writer_enable_idempotence
    with pytest.raises(ClientConfigError, match="acks"):
        ClientConfig.from_dict({"client.writer.acks": "1", "client.writer.enable-idempotence": "true"})
    with pytest.raises(ClientConfigError, match="max-inflight"):
        ClientConfig.from_dict({"client.writer.max-inflight-requests-per-bucket": "6"})
    c = ClientConfig.from_dict(
        {"client.writer.max-inflight-requests-per-bucket": "6", "client.writer.enable-idempotence": "false"}
    )
    assert c.writer_max_inflight_requests_per_bucket == 6
    assert ClientConfig.from_dict({"client.writer.acks": "0"}).acks == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bootstrap.servers": ""}, "bootstrap.servers"),
        ({"bootstrap.servers": "nohost"}, "Invalid url"),
        ({"bootstrap.servers": "h:99999"}, "Invalid url"),
        ({"client.request-timeout": "30"}, "client.request-timeout"),
        ({"client.writer.batch-size": "lots"}, "client.writer.batch-size"),
        ({"client.writer.acks": "2", "client.writer.enable-idempotence": "false"}, "acks"),
        ({"client.scanner.log.fetch.max-bytes-for-bucket": "32mb"}, "max-bytes-for-bucket"),
        ({"client.scanner.log.read-preference": "nearest"}, "read-preference"),
        ({"client.security.protocol": "TLS"}, "TLS"),
        (
            {"client.security.protocol": "SSL", "client.security.ssl.truststore.location": "/no/ca.pem"},
            "ca.pem",
        ),
        ({"client.security.protocol": "SASL"}, "username"),
        ({"client.security.protocol": "sasl", "client.security.sasl.mechanism": "SCRAM"}, "SCRAM"),
    ],
)
def test_invalid_settings(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ClientConfigError, match=message) as error:
        ClientConfig.from_dict(settings)
    assert isinstance(error.value, FlussError) and isinstance(error.value, ValueError)


def test_sasl_credentials_from_options_or_jaas() -> None:
    c = ClientConfig.from_dict(
        {
            "client.security.protocol": "SASL",
            "client.security.sasl.username": "admin",
            "client.security.sasl.password": "secret",
        }
    )
    assert c.is_sasl_enabled and c.sasl == SaslPlain("admin", "secret")
    assert "secret" not in repr(c)
    jaas = (
        'org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required username="bob" password="p\\"w";'
    )
    assert parse_jaas_credentials(jaas) == ("bob", 'p"w')
    from_jaas = ClientConfig.from_dict(
        {"client.security.protocol": "sasl", "client.security.sasl.jaas.config": jaas}
    )
    assert from_jaas.sasl == SaslPlain("bob", 'p"w')


def test_parse_address() -> None:
    assert parse_address("localhost:9123") == ("localhost", 9123)
    assert parse_address(" [::1]:9123 ") == ("::1", 9123)
    with pytest.raises(ClientConfigError):
        parse_address("localhost")
