"""Client settings: Fluss's ``client.*`` option names and defaults, parsed into one typed value.

`ClientConfig.from_dict` reads the same keys a Java client's ``Configuration`` takes
(``bootstrap.servers``, ``client.request-timeout``, ``client.writer.batch-size``, ...), with
Fluss's value syntax (``"100ms"``, ``"2mb"``). The shorter keys of the pyfluss ``Config`` dict
(``writer.acks``, ``writer.batch-timeout-ms``, ``connect-timeout``, ...) are accepted too, so a
settings dict written for pyfluss works here unchanged. Keys Strom does not know are kept in
`properties` (Fluss ignores them as well), where later components can read their own options.

The options themselves (key, type, default, description) are declared once, in
`strom.common.config.CLIENT_OPTIONS`; the dataclass below repeats their defaults as typed values
(the test of option readers checks they agree), and docs/configuration.md is generated from that
catalogue. `tests/unit/test_client_option_readers.py`
names the code that reads each field.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from strom.common import config as cfg
from strom.common.config import ConfigOption, Configuration, MemorySize, NoKeyAssigner, to_config_string
from strom.common.errors import ConfigError, InvalidConfigError
from strom.rpc.client import SaslPlain
from strom.security.jaas import parse_jaas_credentials
from strom.security.tls import TlsFiles, client_context

DEFAULT_BOOTSTRAP_SERVERS: tuple[str, ...] = tuple(cfg.BOOTSTRAP_SERVERS.default or ())
MAX_INFLIGHT_REQUESTS_PER_BUCKET_FOR_IDEMPOTENCE = 5
_INT_MAX = (1 << 31) - 1


class ClientConfigError(ConfigError, ValueError):
    """The client configuration is invalid."""


# Attribute name -> option. The order is the dataclass field order.
_OPTIONS: dict[str, ConfigOption[Any]] = {
    "bootstrap_servers": cfg.BOOTSTRAP_SERVERS,
    "client_id": cfg.CLIENT_ID,
    "request_timeout": cfg.CLIENT_REQUEST_TIMEOUT,
    "connect_timeout": cfg.CLIENT_CONNECT_TIMEOUT,
    "writer_buffer_memory_size": cfg.CLIENT_WRITER_BUFFER_MEMORY_SIZE,
    "writer_buffer_page_size": cfg.CLIENT_WRITER_BUFFER_PAGE_SIZE,
    "writer_buffer_per_request_memory_size": cfg.CLIENT_WRITER_BUFFER_PER_REQUEST_MEMORY_SIZE,
    "writer_buffer_wait_timeout": cfg.CLIENT_WRITER_BUFFER_WAIT_TIMEOUT,
    "writer_batch_size": cfg.CLIENT_WRITER_BATCH_SIZE,
    "writer_dynamic_batch_size_enabled": cfg.CLIENT_WRITER_DYNAMIC_BATCH_SIZE_ENABLED,
    "writer_batch_timeout": cfg.CLIENT_WRITER_BATCH_TIMEOUT,
    "writer_bucket_no_key_assigner": cfg.CLIENT_WRITER_BUCKET_NO_KEY_ASSIGNER,
    "writer_acks": cfg.CLIENT_WRITER_ACKS,
    "writer_request_max_size": cfg.CLIENT_WRITER_REQUEST_MAX_SIZE,
    "writer_retries": cfg.CLIENT_WRITER_RETRIES,
    "writer_enable_idempotence": cfg.CLIENT_WRITER_ENABLE_IDEMPOTENCE,
    "writer_max_inflight_requests_per_bucket": cfg.CLIENT_WRITER_MAX_INFLIGHT_REQUESTS_PER_BUCKET,
    "writer_dynamic_create_partition_enabled": cfg.CLIENT_WRITER_DYNAMIC_CREATE_PARTITION_ENABLED,
    "writer_kv_backpressure_max_throttle": cfg.CLIENT_WRITER_KV_BACKPRESSURE_MAX_THROTTLE,
    "scanner_log_check_crc": cfg.CLIENT_SCANNER_LOG_CHECK_CRC,
    "scanner_log_max_poll_records": cfg.CLIENT_SCANNER_LOG_MAX_POLL_RECORDS,
    "scanner_log_fetch_max_bytes": cfg.CLIENT_SCANNER_LOG_FETCH_MAX_BYTES,
    "scanner_log_fetch_max_bytes_for_bucket": cfg.CLIENT_SCANNER_LOG_FETCH_MAX_BYTES_FOR_BUCKET,
    "scanner_log_fetch_wait_max_time": cfg.CLIENT_SCANNER_LOG_FETCH_WAIT_MAX_TIME,
    "scanner_log_fetch_min_bytes": cfg.CLIENT_SCANNER_LOG_FETCH_MIN_BYTES,
    "scanner_log_read_preference": cfg.CLIENT_SCANNER_LOG_READ_PREFERENCE,
    "scanner_remote_log_prefetch_num": cfg.CLIENT_SCANNER_REMOTE_LOG_PREFETCH_NUM,
    "scanner_io_tmpdir": cfg.CLIENT_SCANNER_IO_TMPDIR,
    "remote_file_download_thread_num": cfg.CLIENT_REMOTE_FILE_DOWNLOAD_THREAD_NUM,
    "lookup_queue_size": cfg.CLIENT_LOOKUP_QUEUE_SIZE,
    "lookup_max_batch_size": cfg.CLIENT_LOOKUP_MAX_BATCH_SIZE,
    "lookup_max_inflight_requests": cfg.CLIENT_LOOKUP_MAX_INFLIGHT_REQUESTS,
    "lookup_batch_timeout": cfg.CLIENT_LOOKUP_BATCH_TIMEOUT,
    "lookup_max_retries": cfg.CLIENT_LOOKUP_MAX_RETRIES,
    "security_protocol": cfg.CLIENT_SECURITY_PROTOCOL,
    "security_sasl_mechanism": cfg.CLIENT_SASL_MECHANISM,
    "security_sasl_jaas_config": cfg.CLIENT_SASL_JAAS_CONFIG,
    "security_sasl_username": cfg.CLIENT_SASL_USERNAME,
    "security_sasl_password": cfg.CLIENT_SASL_PASSWORD,
    "security_ssl_truststore_location": cfg.CLIENT_SSL_TRUSTSTORE_LOCATION,
    "security_ssl_keystore_location": cfg.CLIENT_SSL_KEYSTORE_LOCATION,
    "security_ssl_key_password": cfg.CLIENT_SSL_KEY_PASSWORD,
    "filesystem_security_token_renewal_backoff": cfg.CLIENT_FS_TOKEN_RENEWAL_BACKOFF,
    "filesystem_security_token_renewal_time_ratio": cfg.CLIENT_FS_TOKEN_RENEWAL_TIME_RATIO,
    "metrics_enabled": cfg.CLIENT_METRICS_ENABLED,
}


# Options taken so that a Fluss client's settings work unchanged, but that change nothing here, and
# why. A connection logs a warning for each one that is set (`no_effect_settings`).
NO_EFFECT: dict[str, str] = {
    "writer_buffer_per_request_memory_size": (
        "the writer keeps Arrow buffers, not a pool of pages, so it allocates nothing per request"
    ),
    "writer_dynamic_batch_size_enabled": (
        "batches hold Arrow slices and grow as rows come, so no batch size is estimated ahead"
    ),
    "writer_kv_backpressure_max_throttle": "Strom tablet servers send no KV write-pressure signal",
    "scanner_log_read_preference": "Strom tablet servers serve fetches from local segments first",
    "filesystem_security_token_renewal_backoff": (
        "remote files are read with the client's own file-system credentials, never with tokens"
    ),
    "filesystem_security_token_renewal_time_ratio": (
        "remote files are read with the client's own file-system credentials, never with tokens"
    ),
    "metrics_enabled": "the client collects no metrics",
}


def no_effect_notes() -> dict[str, str]:
    """Key of each option in `NO_EFFECT` -> why it changes nothing (for the generated docs)."""
    return {_OPTIONS[attr].key: why for attr, why in NO_EFFECT.items()}


# Every option the client reads, by key: the whole client catalogue (checked at import).
CLIENT_CONFIG_OPTIONS: dict[str, ConfigOption[Any]] = {o.key: o for o in _OPTIONS.values()}
assert CLIENT_CONFIG_OPTIONS.keys() == cfg.CLIENT_OPTIONS.keys(), "ClientConfig and CLIENT_OPTIONS differ"

# pyfluss's Config keys -> (Fluss key, unit its bare numbers are in).
_PYFLUSS_KEYS: dict[str, tuple[str, str | None]] = {
    "writer.request-max-size": ("client.writer.request-max-size", "b"),
    "writer.acks": ("client.writer.acks", None),
    "writer.retries": ("client.writer.retries", None),
    "writer.batch-size": ("client.writer.batch-size", "b"),
    "writer.dynamic-batch-size.enabled": ("client.writer.dynamic-batch-size.enabled", None),
    "writer.batch-timeout-ms": ("client.writer.batch-timeout", "ms"),
    "writer.enable-idempotence": ("client.writer.enable-idempotence", None),
    "writer.max-inflight-requests-per-bucket": ("client.writer.max-inflight-requests-per-bucket", None),
    "writer.buffer.memory-size": ("client.writer.buffer.memory-size", "b"),
    "writer.buffer.wait-timeout-ms": ("client.writer.buffer.wait-timeout", "ms"),
    "writer.kv-backpressure.max-throttle-ms": ("client.writer.kv-backpressure.max-throttle", "ms"),
    "writer.bucket.no-key-assigner": ("client.writer.bucket.no-key-assigner", None),
    "scanner.remote-log.prefetch-num": ("client.scanner.remote-log.prefetch-num", None),
    "remote-file.download-thread-num": ("client.remote-file.download-thread-num", None),
    "scanner.log.max-poll-records": ("client.scanner.log.max-poll-records", None),
    "scanner.log.fetch.max-bytes": ("client.scanner.log.fetch.max-bytes", "b"),
    "scanner.log.fetch.min-bytes": ("client.scanner.log.fetch.min-bytes", "b"),
    "scanner.log.fetch.wait-max-time-ms": ("client.scanner.log.fetch.wait-max-time", "ms"),
    "scanner.log.fetch.max-bytes-for-bucket": ("client.scanner.log.fetch.max-bytes-for-bucket", "b"),
    "connect-timeout": ("client.connect-timeout", "ms"),
    "security.protocol": ("client.security.protocol", None),
    "security.sasl.mechanism": ("client.security.sasl.mechanism", None),
    "security.sasl.username": ("client.security.sasl.username", None),
    "security.sasl.password": ("client.security.sasl.password", None),
}

_DIGITS = re.compile(r"\s*[0-9]+\s*")


def _as_string(value: object) -> str:
    return value if isinstance(value, str) else to_config_string(value)


def _normalize(properties: Mapping[str, object]) -> dict[str, str]:
    """String values under Fluss's keys; pyfluss keys are translated unless the Fluss key is set."""
    result = {str(k): _as_string(v) for k, v in properties.items() if k not in _PYFLUSS_KEYS}
    for key, value in properties.items():
        alias = _PYFLUSS_KEYS.get(key)
        if alias is None:
            continue
        fluss_key, unit = alias
        text = _as_string(value)
        if unit is not None and _DIGITS.fullmatch(text):
            text = text.strip() + unit
        result.setdefault(fluss_key, text)
    return result


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); raises ClientConfigError when malformed."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ClientConfigError(f"Invalid url in {cfg.BOOTSTRAP_SERVERS.key}: {address}")
    return host, int(port_text)


@dataclass(frozen=True)
class ClientConfig:
    """Everything a connection and its writers, scanners and lookupers are configured with.

    Sizes are in bytes, times are timedeltas. Build it with `from_dict`; the constructor takes
    already-typed values and validates them the same way.
    """

    bootstrap_servers: tuple[str, ...] = DEFAULT_BOOTSTRAP_SERVERS
    client_id: str = ""
    request_timeout: timedelta = timedelta(seconds=30)
    connect_timeout: timedelta = timedelta(seconds=120)
    # writer
    writer_buffer_memory_size: int = 64 << 20
    writer_buffer_page_size: int = 128 << 10
    writer_buffer_per_request_memory_size: int = 16 << 20
    # None: block until memory frees up
    writer_buffer_wait_timeout: timedelta | None = None
    writer_batch_size: int = 2 << 20
    writer_dynamic_batch_size_enabled: bool = True
    writer_batch_timeout: timedelta = timedelta(milliseconds=100)
    writer_bucket_no_key_assigner: NoKeyAssigner = NoKeyAssigner.STICKY
    writer_acks: str = "all"
    writer_request_max_size: int = 10 << 20
    writer_retries: int = _INT_MAX
    writer_enable_idempotence: bool = True
    writer_max_inflight_requests_per_bucket: int = 5
    writer_dynamic_create_partition_enabled: bool = True
    writer_kv_backpressure_max_throttle: timedelta = timedelta(milliseconds=3000)
    # log scanner
    scanner_log_check_crc: bool = True
    scanner_log_max_poll_records: int = 500
    scanner_log_fetch_max_bytes: int = 16 << 20
    scanner_log_fetch_max_bytes_for_bucket: int = 1 << 20
    scanner_log_fetch_wait_max_time: timedelta = timedelta(milliseconds=500)
    scanner_log_fetch_min_bytes: int = 1
    scanner_log_read_preference: str = "local-first"
    scanner_remote_log_prefetch_num: int = 4
    scanner_io_tmpdir: str = cfg.CLIENT_SCANNER_IO_TMPDIR.default or ""
    remote_file_download_thread_num: int = 3
    # lookup
    lookup_queue_size: int = 25600
    lookup_max_batch_size: int = 128
    lookup_max_inflight_requests: int = 128
    lookup_batch_timeout: timedelta = timedelta(milliseconds=100)
    lookup_max_retries: int = _INT_MAX
    # security
    security_protocol: str = "PLAINTEXT"
    security_sasl_mechanism: str = "PLAIN"
    security_sasl_jaas_config: str | None = field(default=None, repr=False)
    security_sasl_username: str | None = None
    security_sasl_password: str | None = field(default=None, repr=False)
    security_ssl_truststore_location: str | None = None
    security_ssl_keystore_location: str | None = None
    security_ssl_key_password: str | None = field(default=None, repr=False)
    filesystem_security_token_renewal_backoff: timedelta = timedelta(hours=1)
    filesystem_security_token_renewal_time_ratio: float = 0.75
    metrics_enabled: bool = False
    # Every setting as given (Fluss keys, string values), including keys the client does not read.
    properties: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bootstrap_servers", tuple(self.bootstrap_servers))
        object.__setattr__(self, "properties", dict(self.properties))
        self._validate()

    # ------------------------------------------------------------------ building

    @classmethod
    def from_dict(cls, properties: Mapping[str, object] | None = None) -> ClientConfig:
        """Parse Fluss (or pyfluss) client settings; bad values raise ClientConfigError."""
        raw = _normalize(properties or {})
        conf = Configuration(raw)
        values: dict[str, Any] = {}
        for attr, option in _OPTIONS.items():
            if not conf.contains(option):
                continue
            try:
                value = conf.get(option)
            except ValueError as e:
                raise ClientConfigError(str(e)) from None
            if isinstance(value, list):
                value = tuple(value)
            values[attr] = value
        idempotence_explicit = conf.contains(cfg.CLIENT_WRITER_ENABLE_IDEMPOTENCE)
        if not idempotence_explicit and _idempotence_conflict(
            values.get("writer_acks", "all"), values.get("writer_retries", _INT_MAX)
        ):
            # Fluss: idempotence is on by default only when nothing set conflicts with it.
            values["writer_enable_idempotence"] = False
        return cls(**values, properties=raw)

    @classmethod
    def of(cls, config: ClientConfig | Mapping[str, object] | None) -> ClientConfig:
        return config if isinstance(config, ClientConfig) else cls.from_dict(config)

    def to_dict(self) -> dict[str, str]:
        """The settings as Fluss keys and strings (round-trips through `from_dict`)."""
        result = dict(self.properties)
        for attr, option in _OPTIONS.items():
            value = getattr(self, attr)
            if value is None:
                continue
            if option.type is MemorySize:
                value = MemorySize(value)
            result[option.key] = to_config_string(list(value) if isinstance(value, tuple) else value)
        return result

    def no_effect_settings(self) -> list[str]:
        """A message per option in `NO_EFFECT` that was set."""
        return [
            f"client option '{_OPTIONS[attr].key}' has no effect in Strom: {why}"
            for attr, why in NO_EFFECT.items()
            if _OPTIONS[attr].key in self.properties
        ]

    @property
    def configuration(self) -> Configuration:
        """All settings as a Configuration, for options a later component defines itself."""
        return Configuration(self.to_dict())

    # ------------------------------------------------------------------ derived values

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return [parse_address(a) for a in self.bootstrap_servers]

    @property
    def acks(self) -> int:
        """The wire value of client.writer.acks: -1 (all), 0 or 1."""
        return _acks_value(self.writer_acks)

    @property
    def is_sasl_enabled(self) -> bool:
        return self.security_protocol.strip().upper() in ("SASL", "SASL_SSL")

    @property
    def is_tls_enabled(self) -> bool:
        return self.security_protocol.strip().upper() in ("SSL", "SASL_SSL")

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The TLS context for SSL and SASL_SSL (None otherwise): the trust store's CAs verify servers."""
        if not self.is_tls_enabled:
            return None
        try:
            files = TlsFiles(
                self.security_ssl_keystore_location,
                self.security_ssl_key_password,
                self.security_ssl_truststore_location,
            )
            return client_context(files, "client.security.ssl")
        except InvalidConfigError as e:
            raise ClientConfigError(str(e)) from None

    @property
    def sasl(self) -> SaslPlain | None:
        """SASL/PLAIN credentials when the protocol is SASL, else None."""
        if not self.is_sasl_enabled:
            return None
        username, password = self._credentials()
        assert username is not None and password is not None  # checked in _validate
        return SaslPlain(username, password)

    def _credentials(self) -> tuple[str | None, str | None]:
        username, password = self.security_sasl_username, self.security_sasl_password
        if self.security_sasl_jaas_config and (not username or not password):
            jaas_user, jaas_password = parse_jaas_credentials(self.security_sasl_jaas_config)
            username = username or jaas_user
            password = password or jaas_password
        return username, password

    # ------------------------------------------------------------------ checks

    def _validate(self) -> None:
        if not self.bootstrap_servers:
            raise ClientConfigError(f"{cfg.BOOTSTRAP_SERVERS.key} should be set.")
        for address in self.bootstrap_servers:
            parse_address(address)
        for attr in ("request_timeout", "connect_timeout", "writer_batch_timeout"):
            if getattr(self, attr) < timedelta(0):
                raise ClientConfigError(f"{_OPTIONS[attr].key} must not be negative.")
        self._validate_security()
        self._validate_writer()
        self._validate_scanner()

    def _validate_security(self) -> None:
        protocol = self.security_protocol.strip().upper()
        if protocol not in ("PLAINTEXT", "SASL", "SSL", "SASL_SSL"):
            raise ClientConfigError(
                f"Unsupported {cfg.CLIENT_SECURITY_PROTOCOL.key} '{self.security_protocol}': "
                "use PLAINTEXT, SASL, SSL or SASL_SSL."
            )
        if self.is_tls_enabled:
            self.tls  # noqa: B018  (a trust store that does not load is refused here, not at connect)
        if protocol not in ("SASL", "SASL_SSL"):
            return
        if self.security_sasl_mechanism.strip().upper() != "PLAIN":
            raise ClientConfigError(
                f"Unsupported SASL mechanism: '{self.security_sasl_mechanism}' "
                f"({cfg.CLIENT_SASL_MECHANISM.key}). Only 'PLAIN' is supported."
            )
        username, password = self._credentials()
        if not username:
            raise ClientConfigError(f"{cfg.CLIENT_SASL_USERNAME.key} must be set when the protocol is SASL.")
        if not password:
            raise ClientConfigError(f"{cfg.CLIENT_SASL_PASSWORD.key} must be set when the protocol is SASL.")

    def _validate_writer(self) -> None:
        acks = _acks_value(self.writer_acks)
        for attr in (
            "writer_batch_size",
            "writer_request_max_size",
            "writer_buffer_memory_size",
            "writer_buffer_page_size",
            "writer_max_inflight_requests_per_bucket",
        ):
            if getattr(self, attr) <= 0:
                raise ClientConfigError(f"{_OPTIONS[attr].key} must be positive.")
        if self.writer_buffer_page_size > self.writer_buffer_memory_size:
            raise ClientConfigError(
                f"{cfg.CLIENT_WRITER_BUFFER_PAGE_SIZE.key} must not be above "
                f"{cfg.CLIENT_WRITER_BUFFER_MEMORY_SIZE.key}."
            )
        if self.writer_retries < 0:
            raise ClientConfigError(f"{cfg.CLIENT_WRITER_RETRIES.key} must not be negative.")
        if not self.writer_enable_idempotence:
            return
        if acks != -1:
            raise ClientConfigError(
                "Invalid acks configuration for idempotent writer. Must set "
                f"{cfg.CLIENT_WRITER_ACKS.key} to 'all' (current value: '{self.writer_acks}') in order "
                "to use the idempotent writer."
            )
        if self.writer_retries == 0:
            raise ClientConfigError(
                f"Invalid retries configuration for idempotent writer. Must set "
                f"{cfg.CLIENT_WRITER_RETRIES.key} to non-zero when using the idempotent writer."
            )
        limit = MAX_INFLIGHT_REQUESTS_PER_BUCKET_FOR_IDEMPOTENCE
        if self.writer_max_inflight_requests_per_bucket > limit:
            raise ClientConfigError(
                f"Invalid configuration for idempotent writer. The value of "
                f"{cfg.CLIENT_WRITER_MAX_INFLIGHT_REQUESTS_PER_BUCKET.key} "
                f"({self.writer_max_inflight_requests_per_bucket}) should be less than or equal to "
                f"{limit} when idempotence is enabled."
            )

    def _validate_scanner(self) -> None:
        if self.scanner_log_fetch_min_bytes <= 0:
            raise ClientConfigError(f"{cfg.CLIENT_SCANNER_LOG_FETCH_MIN_BYTES.key} must be positive.")
        if self.scanner_log_fetch_max_bytes < self.scanner_log_fetch_min_bytes:
            raise ClientConfigError(
                f"{cfg.CLIENT_SCANNER_LOG_FETCH_MAX_BYTES.key} must not be below "
                f"{cfg.CLIENT_SCANNER_LOG_FETCH_MIN_BYTES.key}."
            )
        if not 0 < self.scanner_log_fetch_max_bytes_for_bucket <= self.scanner_log_fetch_max_bytes:
            raise ClientConfigError(
                f"{cfg.CLIENT_SCANNER_LOG_FETCH_MAX_BYTES_FOR_BUCKET.key} must be positive and not "
                f"above {cfg.CLIENT_SCANNER_LOG_FETCH_MAX_BYTES.key}."
            )
        if self.scanner_log_fetch_wait_max_time < timedelta(0):
            raise ClientConfigError(f"{cfg.CLIENT_SCANNER_LOG_FETCH_WAIT_MAX_TIME.key} must not be negative.")
        if self.scanner_log_read_preference.strip().lower() not in ("local-first", "remote-first"):
            raise ClientConfigError(
                f"{cfg.CLIENT_SCANNER_LOG_READ_PREFERENCE.key} must be local-first or remote-first, "
                f"not '{self.scanner_log_read_preference}'."
            )
        for attr in ("scanner_remote_log_prefetch_num", "remote_file_download_thread_num"):
            if getattr(self, attr) <= 0:
                raise ClientConfigError(f"{_OPTIONS[attr].key} must be positive.")


def _acks_value(acks: str) -> int:
    text = acks.strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ClientConfigError(f"Invalid {cfg.CLIENT_WRITER_ACKS.key} '{acks}': use all (-1), 0 or 1.")


def _idempotence_conflict(acks: str, retries: int) -> bool:
    try:
        return _acks_value(acks) != -1 or retries == 0
    except ClientConfigError:
        return False  # the bad value itself is reported by validation
