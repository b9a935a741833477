"""Every client option is read by the code that applies it, or is listed as having no effect.

`READERS` names, for each ClientConfig field, the source text that reads it (a chain of places when
a ClientConfig property turns the field into what a component takes). The test reads those files:
a field whose reader disappears, or a new field nobody reads, fails here. Fields in
`strom.client.config.NO_EFFECT` are accepted so that a Fluss client's settings work unchanged; a
connection logs a warning for each one set, and docs/configuration.md says why it does nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from strom.client.config import _OPTIONS, CLIENT_CONFIG_OPTIONS, NO_EFFECT, ClientConfig
from strom.common import config as cfg

ROOT = Path(__file__).resolve().parents[2]

# field -> [(file, text that reads it), ...]
READERS: dict[str, list[tuple[str, str]]] = {
    "bootstrap_servers": [
        ("strom/client/config.py", "parse_address(a) for a in self.bootstrap_servers"),
        ("strom/client/connection.py", "client_config.bootstrap_addresses"),
    ],
    "client_id": [("strom/client/connection.py", "self.config.client_id")],
    "request_timeout": [("strom/client/connection.py", "request_timeout=client_config.request_timeout")],
    "connect_timeout": [("strom/client/connection.py", "connect_timeout=client_config.connect_timeout")],
    "writer_buffer_memory_size": [("strom/client/writer/accumulator.py", "config.writer_buffer_memory_size")],
    "writer_buffer_page_size": [("strom/client/writer/accumulator.py", "config.writer_buffer_page_size")],
    "writer_buffer_wait_timeout": [
        ("strom/client/writer/accumulator.py", "config.writer_buffer_wait_timeout")
    ],
    "writer_batch_size": [("strom/client/writer/accumulator.py", "config.writer_batch_size")],
    "writer_batch_timeout": [("strom/client/writer/accumulator.py", "config.writer_batch_timeout")],
    "writer_bucket_no_key_assigner": [
        ("strom/client/writer/writer_client.py", "config.writer_bucket_no_key_assigner")
    ],
    "writer_acks": [
        ("strom/client/config.py", "return _acks_value(self.writer_acks)"),
        ("strom/client/writer/sender.py", "self.acks = config.acks"),
    ],
    "writer_request_max_size": [("strom/client/writer/sender.py", "config.writer_request_max_size")],
    "writer_retries": [("strom/client/writer/sender.py", "config.writer_retries")],
    "writer_enable_idempotence": [
        ("strom/client/writer/writer_machinery.py", "config.writer_enable_idempotence")
    ],
    "writer_max_inflight_requests_per_bucket": [
        ("strom/client/writer/accumulator.py", "config.writer_max_inflight_requests_per_bucket")
    ],
    "writer_dynamic_create_partition_enabled": [
        ("strom/client/writer/writer_machinery.py", "config.writer_dynamic_create_partition_enabled")
    ],
    "scanner_log_check_crc": [("strom/client/scanner/log_fetcher.py", "config.scanner_log_check_crc")],
    "scanner_log_max_poll_records": [
        ("strom/client/scanner/log_scanner.py", "config.scanner_log_max_poll_records")
    ],
    "scanner_log_fetch_max_bytes": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_log_fetch_max_bytes")
    ],
    "scanner_log_fetch_max_bytes_for_bucket": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_log_fetch_max_bytes_for_bucket")
    ],
    "scanner_log_fetch_wait_max_time": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_log_fetch_wait_max_time")
    ],
    "scanner_log_fetch_min_bytes": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_log_fetch_min_bytes")
    ],
    "scanner_remote_log_prefetch_num": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_remote_log_prefetch_num")
    ],
    "scanner_io_tmpdir": [
        ("strom/client/scanner/log_fetcher.py", "config.scanner_io_tmpdir"),
        ("strom/client/scanner/snapshot_reader.py", "config.scanner_io_tmpdir"),
    ],
    "remote_file_download_thread_num": [
        ("strom/client/scanner/log_fetcher.py", "config.remote_file_download_thread_num"),
        ("strom/client/scanner/snapshot_reader.py", "config.remote_file_download_thread_num"),
    ],
    "lookup_queue_size": [("strom/client/lookup/lookup_client.py", "config.lookup_queue_size")],
    "lookup_max_batch_size": [("strom/client/lookup/lookup_client.py", "config.lookup_max_batch_size")],
    "lookup_max_inflight_requests": [
        ("strom/client/lookup/lookup_client.py", "config.lookup_max_inflight_requests")
    ],
    "lookup_batch_timeout": [("strom/client/lookup/lookup_client.py", "config.lookup_batch_timeout")],
    "lookup_max_retries": [("strom/client/lookup/lookup_client.py", "config.lookup_max_retries")],
    # security: ClientConfig.sasl turns these into the credentials the connection pool sends
    "security_protocol": [
        ("strom/client/config.py", "self.security_protocol.strip().upper()"),
        ("strom/client/connection.py", "sasl=client_config.sasl"),
    ],
    "security_sasl_mechanism": [("strom/client/config.py", "self.security_sasl_mechanism.strip().upper()")],
    "security_sasl_jaas_config": [
        ("strom/client/config.py", "parse_jaas_credentials(self.security_sasl_jaas_config)")
    ],
    "security_sasl_username": [
        ("strom/client/config.py", "username, password = self.security_sasl_username")
    ],
    "security_sasl_password": [("strom/client/config.py", "self.security_sasl_password")],
    # ClientConfig.tls turns the trust store and key store into the TLS context the connection pool
    # connects with
    "security_ssl_truststore_location": [
        ("strom/client/config.py", "self.security_ssl_truststore_location,"),
        ("strom/client/connection.py", "tls=client_config.tls"),
    ],
    "security_ssl_keystore_location": [("strom/client/config.py", "self.security_ssl_keystore_location,")],
    "security_ssl_key_password": [("strom/client/config.py", "self.security_ssl_key_password,")],
}

FIELDS = [f.name for f in dataclasses.fields(ClientConfig) if f.name != "properties"]


def test_every_client_option_has_a_reader_or_is_declared_without_effect() -> None:
    unread = [f for f in FIELDS if f not in READERS and f not in NO_EFFECT]
    assert not unread, f"client options nobody reads: {unread}"
    both = set(READERS) & set(NO_EFFECT)
    assert not both, f"listed as read and as having no effect: {both}"
    assert set(READERS) | set(NO_EFFECT) == set(FIELDS), "READERS names a field ClientConfig does not have"


@pytest.mark.parametrize("field", sorted(READERS))
def test_the_reader_is_in_the_code(field: str) -> None:
    for path, text in READERS[field]:
        source = (ROOT / path).read_text()
        assert text in source, f"{field}: '{text}' is no longer in {path}"


def test_one_catalogue_with_the_same_defaults() -> None:
    assert list(_OPTIONS) == FIELDS
    assert CLIENT_CONFIG_OPTIONS.keys() == cfg.CLIENT_OPTIONS.keys()
    parsed = ClientConfig.from_dict({})
    for field in FIELDS:
        default = getattr(ClientConfig(), field)
        assert getattr(parsed, field) == default or _OPTIONS[field].default is None, field
        option_default = _OPTIONS[field].default
        if option_default is not None:
            expected = tuple(option_default) if isinstance(option_default, list) else option_default
            assert default == expected, f"{field}: dataclass default {default!r} != option {expected!r}"


def test_the_generated_docs_list_every_client_option() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    for key in CLIENT_CONFIG_OPTIONS:
        assert f"| `{key}` |" in docs, key
    for attr in NO_EFFECT:
        line = next(line for line in docs.splitlines() if f"| `{_OPTIONS[attr].key}` |" in line)
        assert "**No effect** in Strom" in line, attr


def test_setting_an_option_without_effect_is_reported() -> None:
    config = ClientConfig.from_dict({"client.metrics.enabled": "true", "client.writer.batch-size": "1mb"})
    messages = config.no_effect_settings()
    assert len(messages) == 1 and "client.metrics.enabled" in messages[0] and "no effect" in messages[0]
    assert ClientConfig.from_dict({}).no_effect_settings() == []
    # the connection logs them as a warning when it is created
    assert "client_config.no_effect_settings()" in (ROOT / "strom/client/connection.py").read_text()


def test_client_id_names_the_connection_in_log_lines() -> None:
    from strom.client.connection import Connection

    named = Connection(ClientConfig.from_dict({"client.id": "ingest-7"}), None, None)  # type: ignore[arg-type]
    assert repr(named) == "Connection(ingest-7@127.0.0.1:9123)"
    assert repr(Connection(ClientConfig(), None, None)) == "Connection(127.0.0.1:9123)"  # type: ignore[arg-type]
