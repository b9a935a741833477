"""Typed configuration options with Fluss's names, value syntax and defaults.

A `ConfigOption` names a key, the type its string value parses to, a default and a description.
A `Configuration` is a plain ``str -> str`` mapping that parses values on `get`. Value syntax is
Fluss's: durations need a unit (``"500ms"``, ``"10 s"``, ``"3min"``, ``"1h"``, ``"7 d"``), memory
sizes too (``"64kb"``, ``"1024m"``, ``"2 gb"``; binary multiples), booleans are ``true``/``false`` in any
case, enums match case-insensitively, lists are comma-separated.

The catalogues at the end list the server options, every ``table.*`` option (the only keys a
table's ``properties`` may hold), the client options Strom reads and the connector options.
"""

from __future__ import annotations

import enum
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload

T = TypeVar("T")
D = TypeVar("D")
E = TypeVar("E", bound=enum.Enum)

# ----------------------------------------------------------------------------------- value types


class MemorySize(int):
    """A number of bytes, parsed from strings such as ``"64 kb"`` or ``"1024m"``."""

    _UNITS: dict[str, int] = {
        "b": 1,
        "bytes": 1,
        "k": 1 << 10,
        "kb": 1 << 10,
        "kibibytes": 1 << 10,
        "m": 1 << 20,
        "mb": 1 << 20,
        "mebibytes": 1 << 20,
        "g": 1 << 30,
        "gb": 1 << 30,
        "gibibytes": 1 << 30,
        "t": 1 << 40,
        "tb": 1 << 40,
        "tebibytes": 1 << 40,
    }

    @classmethod
    def parse(cls, text: str) -> MemorySize:
        return cls(parse_memory_size(text))

    def __str__(self) -> str:
        return format_memory_size(int(self))

    def __repr__(self) -> str:
        return f"MemorySize({int(self)})"


_LEADING_DIGITS = re.compile(r"[0-9]*")
_MAX_INT64 = (1 << 63) - 1


def _split_number_unit(text: str, what: str) -> tuple[int, str]:
    trimmed = text.strip()
    if not trimmed:
        raise ValueError("argument is an empty- or whitespace-only string")
    digits = _LEADING_DIGITS.match(trimmed)
    number = digits.group(0) if digits else ""
    if not number:
        raise ValueError(f"{what} '{text}' does not start with a number")
    value = int(number)
    if value > _MAX_INT64:
        raise ValueError(f"The value '{number}' cannot be represented as 64bit number (numeric overflow).")
    return value, trimmed[len(number) :].strip().lower()


def parse_memory_size(text: str) -> int:
    """``"1024m"`` → 1073741824. A unit is required, as in Fluss."""
    value, unit = _split_number_unit(text, "memory size")
    if not unit:
        raise ValueError(
            f"The memory value '{text}' does not specify a memory unit. Memory size must be specified "
            "with units bytes (b), kibibytes (kb), mebibytes (mb) or gibibytes (gb). E.g. 50b, 100kb, 3mb."
        )
    multiplier = MemorySize._UNITS.get(unit)
    if multiplier is None:
        raise ValueError(
            f"Memory size unit '{unit}' does not match any of the recognized units: "
            + ", ".join(sorted(MemorySize._UNITS))
        )
    result = value * multiplier
    if result > _MAX_INT64:
        raise ValueError(
            f"The value '{text}' cannot be represented as 64bit number of bytes (numeric overflow)."
        )
    return result


def format_memory_size(n: int) -> str:
    """The largest exact unit: 1073741824 → ``"1gb"``, 3072 → ``"3kb"``, 1500 → ``"1500b"``."""
    for unit, mult in (("tb", 1 << 40), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if n and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}b"


_DURATION_UNITS: dict[str, timedelta] = {}
for _labels, _unit in (
    (("d", "day", "days"), timedelta(days=1)),
    (("h", "hour", "hours"), timedelta(hours=1)),
    (("min", "m", "minute", "minutes"), timedelta(minutes=1)),
    (("s", "sec", "secs", "second", "seconds"), timedelta(seconds=1)),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), timedelta(milliseconds=1)),
    (("µs", "micro", "micros", "microsecond", "microseconds"), timedelta(microseconds=1)),
):
    for _label in _labels:
        _DURATION_UNITS[_label] = _unit


_NANO_LABELS = frozenset({"ns", "nano", "nanos", "nanosecond", "nanoseconds"})


def parse_duration(text: str) -> timedelta:
    """``"3min"`` → 3 minutes. A unit is required, as in Fluss."""
    value, unit = _split_number_unit(text, "duration")
    if not unit:
        raise ValueError(
            f"The time value '{text}' does not specify a time unit. Time must be specified with units "
            "milliseconds (ms), seconds (s), minutes (min), hour (h), or day (d). E.g. 50ms, 100s, 3h."
        )
    if unit in _NANO_LABELS:
        # timedelta has no nanoseconds; round to whole microseconds.
        return timedelta(microseconds=round(value / 1000))
    step = _DURATION_UNITS.get(unit)
    if step is None:
        raise ValueError(
            f"Time interval unit label '{unit}' does not match any of the recognized units: "
            "d, h, min, s, ms, µs, ns"
        )
    try:
        return step * value
    except OverflowError as e:
        raise ValueError(f"The duration '{text}' is too large") from e


def format_duration(d: timedelta) -> str:
    """The largest unit that represents `d` exactly: 600 s → ``"10 min"``."""
    micros = (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    for label, size in (("d", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000)):
        if micros and micros % size == 0:
            return f"{micros // size} {label}"
    if micros % 1000 == 0:
        return f"{micros // 1000} ms"
    return f"{micros} µs"


def parse_bool(text: str) -> bool:
    upper = text.strip().upper()
    if upper == "TRUE":
        return True
    if upper == "FALSE":
        return False
    raise ValueError(
        f"Unrecognized option for boolean: {text}. Expected either true or false(case insensitive)"
    )


_INT_RE = re.compile(r"[+-]?[0-9]+")


def parse_int(text: str) -> int:
    # Strict like Java's Integer.parseInt: no underscores, no spaces inside.
    stripped = text.strip()
    if not _INT_RE.fullmatch(stripped):
        raise ValueError(f'For input string: "{text}"')
    return int(stripped)


def parse_enum(text: str, enum_type: type[E]) -> E:
    wanted = text.strip().upper()
    for member in enum_type:
        if str(member.value).upper() == wanted:
            return member
    allowed = ", ".join(str(m.value) for m in enum_type)
    raise ValueError(
        f"Could not parse value '{text}' for enum {enum_type.__name__}. Expected one of: [{allowed}]"
    )


def parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def to_config_string(value: object) -> str:
    """The string form a typed value takes in a Configuration / table properties."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, MemorySize):
        return format_memory_size(int(value))
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return ",".join(to_config_string(v) for v in value)
    return str(value)


# ----------------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class ConfigOption(Generic[T]):
    """One configuration key, the type its value parses to, its default and what it does."""

    key: str
    type: type
    # An option without a default is declared ConfigOption[X | None], so `get` types it honestly.
    default: T
    description: str
    # Older keys still read when `key` is absent.
    fallback_keys: tuple[str, ...] = ()

    def parse(self, raw: str) -> T:
        t = self.type
        value: Any
        if t is bool:
            value = parse_bool(raw)
        elif t is int:
            value = parse_int(raw)
        elif t is float:
            value = float(raw.strip())
        elif t is timedelta:
            value = parse_duration(raw)
        elif t is MemorySize:
            value = MemorySize.parse(raw)
        elif t is list:
            value = parse_list(raw)
        elif isinstance(t, type) and issubclass(t, enum.Enum):
            value = parse_enum(raw, t)
        else:
            value = raw
        return cast(T, value)

    @property
    def has_default(self) -> bool:
        return self.default is not None


class Configuration(Mapping[str, str]):
    """String-valued settings with typed access through ConfigOptions."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values: dict[str, str] = dict(values or {})

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Configuration({self._values!r})"

    def _raw(self, option: ConfigOption[Any]) -> str | None:
        for key in (option.key, *option.fallback_keys):
            if key in self._values:
                return self._values[key]
        return None

    def contains(self, option: ConfigOption[Any]) -> bool:
        return self._raw(option) is not None

    # A plain key reads like Mapping.get; a ConfigOption reads parsed. Both shapes are overloads so
    # that this stays a compatible override of Mapping.get, and an option with a default types as T.
    @overload
    def get(self, option: str, /) -> str | None: ...
    @overload
    def get(self, option: str, default: str, /) -> str: ...
    @overload
    def get(self, option: str, default: D, /) -> str | D: ...
    @overload
    def get(self, option: ConfigOption[T], /) -> T: ...
    @overload
    def get(self, option: ConfigOption[T], default: T, /) -> T: ...

    def get(self, option: str | ConfigOption[Any], default: Any = None) -> Any:
        """The parsed value, else `default` if given, else the option's default.

        Raises ValueError naming the key when the stored string does not parse.
        """
        if isinstance(option, str):
            return self._values.get(option, default)
        raw = self._raw(option)
        if raw is None:
            return default if default is not None else option.default
        try:
            return option.parse(raw)
        except ValueError as e:
            raise ValueError(f"Could not parse value '{raw}' for key '{option.key}': {e}") from e

    def get_optional(self, option: ConfigOption[T]) -> T | None:
        """The parsed value when set, None otherwise (the default is ignored)."""
        return self.get(option) if self.contains(option) else None

    def set(self, option: ConfigOption[T] | str, value: object) -> None:
        key = option if isinstance(option, str) else option.key
        self._values[key] = value if isinstance(value, str) else to_config_string(value)

    def to_dict(self) -> dict[str, str]:
        return dict(self._values)

    def merged(self, other: Mapping[str, str]) -> Configuration:
        return Configuration({**self._values, **other})


def _catalogue(options: Iterable[ConfigOption[Any]]) -> dict[str, ConfigOption[Any]]:
    result: dict[str, ConfigOption[Any]] = {}
    for option in options:
        if option.key in result:
            raise ValueError(f"option {option.key} defined twice")
        result[option.key] = option
    return result


def _system_zone_id() -> str:
    """The IANA name of the local time zone (Java's ZoneId.systemDefault()), UTC if unknown."""
    tz = os.environ.get("TZ")
    if tz:
        return tz.lstrip(":")
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "zoneinfo/"
    idx = target.find(marker)
    return target[idx + len(marker) :] if idx >= 0 else "UTC"


# ----------------------------------------------------------------------------------- enums


class LogFormat(enum.StrEnum):
    ARROW = "ARROW"
    INDEXED = "INDEXED"
    COMPACTED = "COMPACTED"


class KvFormat(enum.StrEnum):
    COMPACTED = "COMPACTED"
    INDEXED = "INDEXED"


class ArrowCompressionType(enum.StrEnum):
    NONE = "NONE"
    LZ4_FRAME = "LZ4_FRAME"
    ZSTD = "ZSTD"


class MergeEngineType(enum.StrEnum):
    FIRST_ROW = "FIRST_ROW"
    VERSIONED = "VERSIONED"
    AGGREGATION = "AGGREGATION"


class DeleteBehavior(enum.StrEnum):
    ALLOW = "ALLOW"
    IGNORE = "IGNORE"
    DISABLE = "DISABLE"


class ChangelogImage(enum.StrEnum):
    FULL = "FULL"
    WAL = "WAL"


class AutoPartitionTimeUnit(enum.StrEnum):
    YEAR = "YEAR"
    QUARTER = "QUARTER"
    MONTH = "MONTH"
    DAY = "DAY"
    HOUR = "HOUR"


class DataLakeFormat(enum.StrEnum):
    # Fluss writes these in lower case.
    PAIMON = "paimon"
    LANCE = "lance"
    ICEBERG = "iceberg"
    HUDI = "hudi"
    # Strom's own: no Fluss release tiers to Delta Lake.
    DELTA = "delta"


class NoKeyAssigner(enum.StrEnum):
    STICKY = "STICKY"
    ROUND_ROBIN = "ROUND_ROBIN"


# The kv format version the coordinator stamps on new primary-key tables.
KV_FORMAT_VERSION_1 = 1
KV_FORMAT_VERSION_2 = 2
CURRENT_KV_FORMAT_VERSION = KV_FORMAT_VERSION_2

# ----------------------------------------------------------------------------------- server options

DEFAULT_BUCKET_NUMBER: ConfigOption[int] = ConfigOption(
    "default.bucket.number", int, 1, "Buckets a new table gets when it does not say how many."
)
DEFAULT_REPLICATION_FACTOR: ConfigOption[int] = ConfigOption(
    "default.replication.factor",
    int,
    1,
    "Replicas per bucket for tables that set no table.replication.factor.",
)
BIND_LISTENERS: ConfigOption[str | None] = ConfigOption(
    "bind.listeners",
    str,
    None,
    "Where the server listens, as comma-separated NAME://host:port entries (e.g. FLUSS://0.0.0.0:9123).",
)
ADVERTISED_LISTENERS: ConfigOption[str | None] = ConfigOption(
    "advertised.listeners",
    str,
    None,
    "Addresses published to clients when they differ from bind.listeners (NAME://host:port, ...).",
)
INTERNAL_LISTENER_NAME: ConfigOption[str] = ConfigOption(
    "internal.listener.name", str, "FLUSS", "Which listener servers use to reach each other."
)
SECURITY_PROTOCOL_MAP: ConfigOption[str] = ConfigOption(
    "security.protocol.map",
    str,
    "",
    "Protocol per listener: PLAINTEXT, SASL, SSL (TLS) or SASL_SSL (SASL over TLS), e.g. "
    "CLIENT:SASL_SSL,INTERNAL:SSL; listeners not named use PLAINTEXT. With no bind.listeners and one "
    "entry here, the server's single listener takes its name.",
)
SECURITY_SSL_KEYSTORE_LOCATION: ConfigOption[str | None] = ConfigOption(
    "security.ssl.keystore.location",
    str,
    None,
    "PEM file holding this server's private key and certificate chain, for its SSL and SASL_SSL "
    "listeners. The server does not start when the file does not load or the certificate is expired.",
)
SECURITY_SSL_KEY_PASSWORD: ConfigOption[str | None] = ConfigOption(
    "security.ssl.key.password",
    str,
    None,
    "Password of the private key in security.ssl.keystore.location, when it is encrypted.",
)
SECURITY_SSL_TRUSTSTORE_LOCATION: ConfigOption[str | None] = ConfigOption(
    "security.ssl.truststore.location",
    str,
    None,
    "PEM file of the CA certificates this server trusts when it connects to the internal listener of "
    "other servers over SSL or SASL_SSL (the system's CAs when unset), and, with "
    "security.ssl.client.auth, the CAs of the client certificates it accepts.",
)
SECURITY_SSL_CLIENT_AUTH: ConfigOption[str] = ConfigOption(
    "security.ssl.client.auth",
    str,
    "none",
    "Client certificates on SSL and SASL_SSL listeners (mutual TLS): none; requested (verified against "
    "security.ssl.truststore.location when a client presents one); required (a connection without a "
    "certificate signed by a trusted CA is refused). Servers present their own key store to each other.",
)
SECURITY_SASL_ENABLED_MECHANISMS: ConfigOption[list[str]] = ConfigOption(
    "security.sasl.enabled.mechanisms",
    list,
    ["PLAIN"],
    "SASL mechanisms servers accept on SASL listeners; only PLAIN is supported.",
)
SECURITY_SASL_PLAIN_JAAS_CONFIG: ConfigOption[str | None] = ConfigOption(
    "security.sasl.plain.jaas.config",
    str,
    None,
    "Server-side JAAS line for SASL/PLAIN listing the users: "
    'org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required user_<name>="<password>" ...; '
    "security.sasl.listener.name.<listener>.plain.jaas.config overrides it for one listener.",
)
SECURITY_SASL_PLAIN_CREDENTIALS: ConfigOption[str | None] = ConfigOption(
    "security.sasl.plain.credentials",
    str,
    None,
    "SASL/PLAIN users as name:password pairs (admin:admin-secret,bob:bob-secret); shorthand for "
    "security.sasl.plain.jaas.config, which wins when both are set.",
)
AUTHORIZER_ENABLED: ConfigOption[bool] = ConfigOption(
    "authorizer.enabled",
    bool,
    False,
    "Whether requests are checked against ACLs; when off every authenticated principal may do anything.",
)
SUPER_USERS: ConfigOption[str | None] = ConfigOption(
    "super.users",
    str,
    None,
    "Principals allowed everything, semicolon-separated (User:admin;User:ops).",
)
AUTHORIZER_ACL_REFRESH_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "authorizer.acl-refresh-interval",
    timedelta,
    timedelta(seconds=1),
    "(Strom) How often tablet servers reload the ACLs from the coordinator, so a grant or revoke takes "
    "effect cluster-wide within this time.",
)
DATA_DIR: ConfigOption[str] = ConfigOption(
    "data.dir",
    str,
    "/tmp/fluss-data",
    "Local directory holding log segments, kv data and checkpoints (the coordinator's metadata file "
    "without ZooKeeper); --data-dir overrides it.",
)
DATA_DIRS: ConfigOption[list[str]] = ConfigOption(
    "data.dirs",
    list,
    [],
    "Local directories of a tablet server, comma-separated (one per disk); takes precedence over data.dir "
    "and over --data-dir, which stands for data.dir (as in Fluss). Each "
    "replica (its log and kv data) lives in one of them: a new replica goes to the one holding the fewest "
    "replicas (then the one with the most free space), and a restarted server finds each replica where it "
    "is. Empty, duplicate or nested entries are refused at start-up. A directory whose disk fails takes "
    "only its own replicas offline.",
)
SERVER_DATA_DISK_WRITE_LIMIT_RATIO: ConfigOption[float] = ConfigOption(
    "server.data-disk.write-limit-ratio",
    float,
    0.85,
    "Writes (produce, put) to the replicas of a data directory are refused with DISK_WRITE_LOCKED once "
    "the used share of its file system (df's Use%) reaches this ratio, and resume once it is back at or "
    "below server.data-disk.write-recover-ratio; reads go on. 1.0 turns the protection off. Range "
    "(server.data-disk.write-recover-ratio, 1.0]; changeable live (strom config set).",
)
SERVER_DATA_DISK_WRITE_RECOVER_RATIO: ConfigOption[float] = ConfigOption(
    "server.data-disk.write-recover-ratio",
    float,
    0.80,
    "Writes refused for a full data disk resume once its used share is at or below this ratio. Range "
    "(0.0, server.data-disk.write-limit-ratio); changeable live.",
)
SERVER_DATA_DISK_CHECK_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "server.data-disk.check-interval",
    timedelta,
    timedelta(seconds=30),
    "How often a tablet server samples the usage of each data directory's file system (statvfs) for the "
    "write protection; writes still flow for up to this long after a disk crosses the limit.",
)
REMOTE_DATA_DIR: ConfigOption[str | None] = ConfigOption(
    "remote.data.dir",
    str,
    None,
    "Remote storage (a path or an fsspec URL such as s3://bucket/fluss) for tiered log segments and kv "
    "snapshots.",
)
REMOTE_DATA_DIRS: ConfigOption[list[str]] = ConfigOption(
    "remote.data.dirs",
    list,
    [],
    "Remote data directories; overrides remote.data.dir. Strom keeps all remote data under one root, so "
    "one directory is accepted and a list of several is refused at start-up.",
)
REMOTE_ORPHAN_CLEANUP_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "remote.orphan-cleanup.interval",
    timedelta,
    timedelta(hours=1),
    "(Strom) How often the coordinator deletes files in remote.data.dir that no metadata refers to: "
    "tiered log segments no manifest lists, KV snapshots and SSTs no kept snapshot lists, and the data "
    "of dropped tables and partitions (also swept at once after a drop). 0 turns the sweep off.",
)
REMOTE_ORPHAN_CLEANUP_GRACE_PERIOD: ConfigOption[timedelta] = ConfigOption(
    "remote.orphan-cleanup.grace-period",
    timedelta,
    timedelta(hours=1),
    "(Strom) How old an unreferenced file of a live table must be before the orphan sweep deletes it, "
    "so that an upload whose manifest or snapshot is not committed yet is never taken.",
)
ZOOKEEPER_ADDRESS: ConfigOption[str | None] = ConfigOption(
    "zookeeper.address",
    str,
    None,
    "ZooKeeper connect string. When unset, the coordinator keeps metadata in an embedded SQLite file.",
)
ZOOKEEPER_PATH_ROOT: ConfigOption[str] = ConfigOption(
    "zookeeper.path.root", str, "/fluss", "Root znode under which all cluster metadata lives."
)
ZOOKEEPER_SESSION_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "zookeeper.client.session-timeout",
    timedelta,
    timedelta(seconds=60),
    "ZooKeeper session timeout: a coordinator or tablet server out of touch with ZooKeeper this long "
    "counts as dead (one whose process died is noticed at once, by its port refusing connections).",
    fallback_keys=("recovery.zookeeper.client.session-timeout",),
)
ZOOKEEPER_CONNECTION_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "zookeeper.client.connection-timeout",
    timedelta,
    timedelta(seconds=15),
    "How long to wait for a ZooKeeper connection.",
    fallback_keys=("recovery.zookeeper.client.connection-timeout",),
)
COORDINATOR_HOST: ConfigOption[str | None] = ConfigOption(
    "coordinator.host",
    str,
    None,
    "Deprecated in Fluss in favour of bind.listeners: the coordinator's host (used when neither --host "
    "nor bind.listeners is given).",
)
COORDINATOR_PORT: ConfigOption[str] = ConfigOption(
    "coordinator.port",
    str,
    "9123",
    "Deprecated in Fluss in favour of bind.listeners: the coordinator's port (used when neither --port "
    "nor bind.listeners is given).",
)
TABLET_SERVER_HOST: ConfigOption[str | None] = ConfigOption(
    "tablet-server.host",
    str,
    None,
    "Deprecated in Fluss in favour of bind.listeners: a tablet server's host (used when neither --host "
    "nor bind.listeners is given).",
)
TABLET_SERVER_PORT: ConfigOption[str] = ConfigOption(
    "tablet-server.port",
    str,
    "0",
    "Deprecated in Fluss in favour of bind.listeners: a tablet server's port (used when neither --port "
    "nor bind.listeners is given; 0 picks a free one).",
)
TABLET_SERVER_ID: ConfigOption[int | None] = ConfigOption(
    "tablet-server.id",
    int,
    None,
    "This tablet server's id; required (here or as --server-id, which wins), unique in the cluster, >= 0.",
)
TABLET_SERVER_RACK: ConfigOption[str | None] = ConfigOption(
    "tablet-server.rack",
    str,
    None,
    "Rack of this tablet server. When every tablet server has one, new buckets never keep two replicas "
    "in one rack while racks allow it (a warning says when they cannot), and rebalance honours it with "
    "the RACK_AWARE goal.",
)
# Strom's own: Fluss tracks liveness through ZooKeeper sessions, as Strom does with zookeeper.address;
# without ZooKeeper, tablet servers heartbeat the coordinator, so that liveness has options of its own.
TABLET_SERVER_HEARTBEAT_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "tablet-server.heartbeat.interval",
    timedelta,
    timedelta(seconds=1),
    "(Strom) How often a tablet server heartbeats the coordinator (without ZooKeeper).",
)
TABLET_SERVER_SESSION_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "tablet-server.session.timeout",
    timedelta,
    timedelta(seconds=10),
    "(Strom) Without ZooKeeper: how long the coordinator waits without a heartbeat before it declares a "
    "tablet server dead and moves leadership of its buckets elsewhere. A server whose process died is "
    "declared dead at once (its port refuses connections), without waiting for this.",
)
# Strom's own: the largest RPC frame a server or client accepts. Fluss's closest setting is
# netty.server.max-request-size, read as a fallback.
RPC_MAX_FRAME_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "rpc.max-frame-size",
    MemorySize,
    MemorySize(32 << 20),
    "(Strom) Largest RPC frame accepted; a bigger frame is refused with an error as soon as its header "
    "is read, and its bytes are skipped, not buffered.",
    fallback_keys=("netty.server.max-request-size",),
)
RPC_CONNECTION_MAX_PENDING_REQUESTS: ConfigOption[int] = ConfigOption(
    "rpc.connection.max-pending-requests",
    int,
    128,
    "(Strom) Unanswered requests one connection may have; beyond it, and while its answers go unread, "
    "the server stops reading the connection.",
)
RPC_MAX_BUFFERED_BYTES: ConfigOption[MemorySize] = ConfigOption(
    "rpc.max-buffered-bytes",
    MemorySize,
    MemorySize(256 << 20),
    "(Strom) Request bytes all connections of a server may hold together (partial frames and requests "
    "in progress); beyond it, connections are not read until requests complete.",
)
NETTY_CONNECTION_MAX_IDLE_TIME: ConfigOption[timedelta] = ConfigOption(
    "netty.connection.max-idle-time",
    timedelta,
    timedelta(minutes=10),
    "Close connections that sent no complete request for this long.",
)
RPC_FRAME_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "rpc.frame-timeout",
    timedelta,
    timedelta(seconds=60),
    "(Strom) Close a connection whose started request frame makes no progress for this long.",
)
LOG_FETCH_MAX_WAIT_TIME: ConfigOption[timedelta] = ConfigOption(
    "log.fetch.max-wait-time",
    timedelta,
    timedelta(seconds=30),
    "(Strom) Longest a fetch may long-poll, whatever max_wait_ms it asks for.",
)
MAX_PARTITION_NUM: ConfigOption[int] = ConfigOption(
    "max.partition.num", int, 1000, "Most partitions one partitioned table may have."
)
MAX_BUCKET_NUM: ConfigOption[int] = ConfigOption(
    "max.bucket.num", int, 4096, "Most buckets one non-partitioned table (or one partition) may have."
)
ALLOW_CREATE_LOG_TABLES: ConfigOption[bool] = ConfigOption(
    "allow.create.log.tables", bool, True, "Whether users may create log tables (no primary key)."
)
ALLOW_CREATE_KV_TABLES: ConfigOption[bool] = ConfigOption(
    "allow.create.kv.tables", bool, True, "Whether users may create primary-key tables."
)
AUTO_PARTITION_CHECK_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "auto-partition.check.interval",
    timedelta,
    timedelta(minutes=10),
    "How often the coordinator creates upcoming and drops expired auto partitions.",
)
SERVER_HISTORICAL_PARTITION_LOOKUP_CACHE_MAX_ROWS: ConfigOption[int] = ConfigOption(
    "server.historical-partition.lookup-cache.max-rows",
    int,
    1_000_000,
    "(Strom) How many lake rows a tablet server keeps in memory for lookups of expired partitions "
    "(whole buckets as of one lake snapshot, least recently used evicted first); 0 turns the cache off. "
    "Fluss caches them on disk instead (server.historical-partition.lookup-cache.max-disk-ratio).",
)
LOG_SEGMENT_FILE_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "log.segment.file-size", MemorySize, MemorySize(1 << 30), "Size at which a log segment is rolled."
)
LOG_INDEX_FILE_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "log.index.file-size", MemorySize, MemorySize(10 << 20), "Maximum size of a segment's offset/time index."
)
LOG_INDEX_INTERVAL_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "log.index.interval-size",
    MemorySize,
    MemorySize(4 << 10),
    "Bytes of log between two offset-index entries.",
)
LOG_FILE_PREALLOCATE: ConfigOption[bool] = ConfigOption(
    "log.file-preallocate", bool, False, "Whether to preallocate segment files."
)
LOG_FLUSH_INTERVAL_MESSAGES: ConfigOption[int] = ConfigOption(
    "log.flush.interval-messages",
    int,
    _MAX_INT64,
    "Records appended before the log is fsynced, on the leader and on followers, before the write is "
    "acknowledged: 1 makes acknowledged writes survive a power cut of every replica (at a cost, see "
    "docs/performance.md). By default durability comes from replication.",
)
LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "log.flush.offset.checkpoint-interval",
    timedelta,
    timedelta(seconds=60),
    "How often the recovery point (last flushed offset) is checkpointed.",
)
LOG_RETENTION_CHECK_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "log.retention.check-interval",
    timedelta,
    timedelta(minutes=5),
    "How often local segments are checked for TTL expiry.",
)
LOG_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "log.replica.high-watermark.checkpoint-interval",
    timedelta,
    timedelta(seconds=5),
    "How often high watermarks are checkpointed to disk (in an executor, only the logs whose high "
    "watermark moved since the last checkpoint).",
)
LOG_REPLICA_MAX_LAG_TIME: ConfigOption[timedelta] = ConfigOption(
    "log.replica.max-lag-time",
    timedelta,
    timedelta(seconds=30),
    "A follower that has not caught up for this long is removed from the ISR.",
)
LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER: ConfigOption[int] = ConfigOption(
    "log.replica.min-in-sync-replicas-number",
    int,
    1,
    "Fewest in-sync replicas an acks=all write needs; fewer fails with NOT_ENOUGH_REPLICAS. Replicas that "
    "leave an ISR below it stay eligible to lead (KIP-966): set it alike on the coordinator.",
)
LOG_REPLICA_FETCH_MAX_BYTES: ConfigOption[MemorySize] = ConfigOption(
    "log.replica.fetch.max-bytes", MemorySize, MemorySize(16 << 20), "Most bytes one follower fetch returns."
)
LOG_REPLICA_FETCH_MAX_BYTES_FOR_BUCKET: ConfigOption[MemorySize] = ConfigOption(
    "log.replica.fetch.max-bytes-for-bucket",
    MemorySize,
    MemorySize(1 << 20),
    "Most bytes one follower fetch returns per bucket.",
)
LOG_REPLICA_FETCH_WAIT_MAX_TIME: ConfigOption[timedelta] = ConfigOption(
    "log.replica.fetch.wait-max-time",
    timedelta,
    timedelta(milliseconds=500),
    "Longest a follower fetch waits for data on the leader.",
)
LOG_REPLICA_FETCH_MIN_BYTES: ConfigOption[MemorySize] = ConfigOption(
    "log.replica.fetch.min-bytes", MemorySize, MemorySize(1), "Bytes a follower fetch waits for."
)
LOG_REPLICA_FETCH_BACKOFF_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "log.replica.fetch.backoff-interval",
    timedelta,
    timedelta(seconds=1),
    "Pause after a failed follower fetch.",
)
REMOTE_LOG_TASK_INTERVAL_DURATION: ConfigOption[timedelta] = ConfigOption(
    "remote.log.task-interval-duration",
    timedelta,
    timedelta(minutes=1),
    "How often closed segments are copied to remote storage and expired remote segments deleted.",
)
REMOTE_LOG_TASK_MAX_UPLOAD_SEGMENTS: ConfigOption[int] = ConfigOption(
    "remote.log.task-max-upload-segments", int, 5, "Most segments one remote-log task uploads per bucket."
)
REMOTE_FS_WRITE_BUFFER_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "remote.fs.write-buffer-size", MemorySize, MemorySize(4 << 10), "Buffer size for remote file writes."
)
KV_SNAPSHOT_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "kv.snapshot.interval",
    timedelta,
    timedelta(minutes=10),
    "How often each kv tablet uploads a snapshot of its RocksDB state.",
)
KV_SCANNER_TTL: ConfigOption[timedelta] = ConfigOption(
    "kv.scanner.ttl",
    timedelta,
    timedelta(minutes=10),
    "Idle time after which a ScanKv scanner session is closed and its RocksDB snapshot released.",
)
KV_SCANNER_EXPIRATION_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "kv.scanner.expiration-interval",
    timedelta,
    timedelta(seconds=30),
    "How often idle ScanKv scanner sessions are looked for and closed.",
)
KV_SCANNER_MAX_PER_BUCKET: ConfigOption[int] = ConfigOption(
    "kv.scanner.max-per-bucket",
    int,
    8,
    "Most ScanKv scanner sessions open at once on one bucket (more: TOO_MANY_SCANNERS).",
)
KV_SCANNER_MAX_PER_SERVER: ConfigOption[int] = ConfigOption(
    "kv.scanner.max-per-server",
    int,
    200,
    "Most ScanKv scanner sessions open at once on one tablet server (more: TOO_MANY_SCANNERS).",
)
KV_SCANNER_MAX_BATCH_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.scanner.max-batch-size",
    MemorySize,
    MemorySize(10 << 20),
    "Cap on the bytes of one ScanKv answer: min(the request's batch_size_bytes, this).",
)
KV_SNAPSHOT_NUM_RETAINED: ConfigOption[int] = ConfigOption(
    "kv.snapshot.num-retained", int, 2, "Completed kv snapshots kept per bucket (>= 1)."
)
KV_ROCKSDB_BLOCK_CACHE_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.rocksdb.block.cache-size",
    MemorySize,
    MemorySize(8 << 20),
    "RocksDB block cache for data blocks. In Strom it is one LRU cache of this capacity shared by every "
    "kv tablet of the tablet server (Fluss gives each tablet its own), so memory does not grow with "
    "the bucket count; size it for the whole server.",
)
KV_ROCKSDB_SHARED_MEMORY_WRITE_BUFFER_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.rocksdb.shared-memory.write-buffer-size",
    MemorySize,
    MemorySize(256 << 20),
    "(Strom) The memtable budget of all kv tablets of a tablet server together (one RocksDB "
    "WriteBufferManager shared by every tablet): above it RocksDB flushes the memtables of the "
    "tablets being written. 0: no shared budget, each tablet is bounded by "
    "kv.rocksdb.writebuffer.size x kv.rocksdb.writebuffer.count only.",
)
KV_ROCKSDB_WRITEBUFFER_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.rocksdb.writebuffer.size",
    MemorySize,
    MemorySize(64 << 20),
    "RocksDB memtable size of one kv tablet: the data built up in memory before it is written to a "
    "sorted file.",
)
KV_ROCKSDB_WRITEBUFFER_COUNT: ConfigOption[int] = ConfigOption(
    "kv.rocksdb.writebuffer.count", int, 2, "Most memtables (write buffers) one kv tablet keeps in memory."
)
KV_ROCKSDB_FILES_OPEN: ConfigOption[int] = ConfigOption(
    "kv.rocksdb.files.open",
    int,
    -1,
    "Most files one kv tablet's RocksDB keeps open (-1: no limit). A limit also bounds its table cache.",
)
KV_ROCKSDB_THREAD_NUM: ConfigOption[int] = ConfigOption(
    "kv.rocksdb.thread.num",
    int,
    2,
    "Most concurrent background flush and compaction jobs of one kv tablet. The threads themselves "
    "are one pool of the process, shared by every tablet.",
)
KV_ROCKSDB_IDLE_FLUSH_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "kv.rocksdb.idle-flush.interval",
    timedelta,
    timedelta(minutes=5),
    "(Strom) A kv tablet that had no write for this long flushes its memtables to sorted files, so "
    "their memory goes back to the shared write-buffer budget (only memtables over 1 MB; 0 disables).",
)
KV_OPEN_CONCURRENCY: ConfigOption[int] = ConfigOption(
    "kv.open.concurrency",
    int,
    4,
    "(Strom) KV tablets a tablet server opens (restores and replays) at once when it becomes the "
    "leader of their buckets; the others wait for a turn, and a write waits only for its own tablet. "
    "RocksDB opens overlap only partly (the rocksdict binding holds Python's GIL while RocksDB "
    "creates or opens a database): 100 opens took 5.3 s with 1, 4.1 s with 2, 3.2 s with 4.",
)
KV_ROCKSDB_WRITE_BATCH_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.rocksdb.write-batch-size", MemorySize, MemorySize(2 << 20), "Bytes buffered per RocksDB write batch."
)
KV_RECOVER_LOG_RECORD_BATCH_MAX_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "kv.recover.log-record-batch.max-size",
    MemorySize,
    MemorySize(16 << 20),
    "Most changelog bytes read per step while a kv tablet replays its changelog.",
)
SERVER_WRITER_ID_EXPIRATION_TIME: ConfigOption[timedelta] = ConfigOption(
    "server.writer-id.expiration-time",
    timedelta,
    timedelta(days=7),
    "Idle time after which a writer id's idempotence state is forgotten.",
)
SERVER_WRITER_ID_EXPIRATION_CHECK_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "server.writer-id.expiration-check-interval",
    timedelta,
    timedelta(minutes=10),
    "How often expired writer ids are removed.",
)
DATALAKE_ENABLED: ConfigOption[bool | None] = ConfigOption(
    "datalake.enabled", bool, None, "Whether tables in this cluster may enable lake tiering."
)
DATALAKE_FORMAT: ConfigOption[DataLakeFormat | None] = ConfigOption(
    "datalake.format",
    DataLakeFormat,
    None,
    "The cluster's lake format (iceberg, paimon, lance or delta); datalake.<format>.* options configure "
    "its catalog or warehouse.",
)
LAKE_TIERING_JOB_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "lake.tiering.job-timeout",
    timedelta,
    timedelta(minutes=2),
    "(Strom) How long a tiering job may go without a heartbeat before the coordinator fences it and "
    "queues its table again under a new tiering epoch (Fluss hard-codes 2 minutes).",
)
COORDINATOR_PRODUCER_OFFSETS_TTL: ConfigOption[timedelta] = ConfigOption(
    "coordinator.producer-offsets.ttl",
    timedelta,
    timedelta(hours=24),
    "How long registered producer offsets (RegisterProducerOffsets) live when the request sets no TTL; "
    "expired ones are removed by the coordinator.",
)
COORDINATOR_PRODUCER_OFFSETS_CLEANUP_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "coordinator.producer-offsets.cleanup-interval",
    timedelta,
    timedelta(hours=1),
    "How often the coordinator removes expired producer offsets.",
)
SERVER_DYNAMIC_CONFIG_REFRESH_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "server.dynamic-config.refresh-interval",
    timedelta,
    timedelta(seconds=5),
    "(Strom) How often a tablet server reads the cluster's dynamic configs (AlterClusterConfigs) from "
    "the coordinator and applies what changed (Fluss watches a ZooKeeper node instead).",
)
METRICS_REPORTERS: ConfigOption[list[str]] = ConfigOption(
    "metrics.reporters",
    list,
    [],
    "Metric reporters to start; 'prometheus' serves the process's metrics over HTTP.",
)
METRICS_REPORTER_PROMETHEUS_PORT: ConfigOption[str] = ConfigOption(
    "metrics.reporter.prometheus.port",
    str,
    "9249",
    "Port of the Prometheus reporter, or a range such as 9250-9260 from which each process takes the "
    "first free port (several servers on one host).",
)
KAFKA_ENABLED: ConfigOption[bool] = ConfigOption(
    "kafka.enabled",
    bool,
    False,
    "Whether tablet servers also serve the Kafka protocol, on the listeners named by "
    "kafka.listener.names (see docs/kafka.md).",
)
KAFKA_LISTENER_NAMES: ConfigOption[list[str]] = ConfigOption(
    "kafka.listener.names",
    list,
    ["KAFKA"],
    "The listeners of bind.listeners that speak the Kafka protocol when kafka.enabled is true.",
)
KAFKA_DATABASE: ConfigOption[str] = ConfigOption(
    "kafka.database",
    str,
    "kafka",
    "The database whose log tables are Kafka topics.",
)

SERVER_OPTIONS: dict[str, ConfigOption[Any]] = _catalogue(
    [
        DEFAULT_BUCKET_NUMBER,
        DEFAULT_REPLICATION_FACTOR,
        BIND_LISTENERS,
        ADVERTISED_LISTENERS,
        INTERNAL_LISTENER_NAME,
        SECURITY_PROTOCOL_MAP,
        SECURITY_SASL_ENABLED_MECHANISMS,
        SECURITY_SASL_PLAIN_JAAS_CONFIG,
        SECURITY_SASL_PLAIN_CREDENTIALS,
        SECURITY_SSL_KEYSTORE_LOCATION,
        SECURITY_SSL_KEY_PASSWORD,
        SECURITY_SSL_TRUSTSTORE_LOCATION,
        SECURITY_SSL_CLIENT_AUTH,
        AUTHORIZER_ENABLED,
        SUPER_USERS,
        AUTHORIZER_ACL_REFRESH_INTERVAL,
        DATA_DIR,
        REMOTE_DATA_DIR,
        REMOTE_DATA_DIRS,
        REMOTE_ORPHAN_CLEANUP_INTERVAL,
        REMOTE_ORPHAN_CLEANUP_GRACE_PERIOD,
        ZOOKEEPER_ADDRESS,
        ZOOKEEPER_PATH_ROOT,
        ZOOKEEPER_SESSION_TIMEOUT,
        ZOOKEEPER_CONNECTION_TIMEOUT,
        COORDINATOR_HOST,
        COORDINATOR_PORT,
        TABLET_SERVER_HOST,
        TABLET_SERVER_PORT,
        TABLET_SERVER_ID,
        DATA_DIRS,
        SERVER_DATA_DISK_WRITE_LIMIT_RATIO,
        SERVER_DATA_DISK_WRITE_RECOVER_RATIO,
        SERVER_DATA_DISK_CHECK_INTERVAL,
        TABLET_SERVER_RACK,
        TABLET_SERVER_HEARTBEAT_INTERVAL,
        TABLET_SERVER_SESSION_TIMEOUT,
        RPC_MAX_FRAME_SIZE,
        RPC_CONNECTION_MAX_PENDING_REQUESTS,
        RPC_MAX_BUFFERED_BYTES,
        NETTY_CONNECTION_MAX_IDLE_TIME,
        RPC_FRAME_TIMEOUT,
        LOG_FETCH_MAX_WAIT_TIME,
        MAX_PARTITION_NUM,
        MAX_BUCKET_NUM,
        ALLOW_CREATE_LOG_TABLES,
        ALLOW_CREATE_KV_TABLES,
        AUTO_PARTITION_CHECK_INTERVAL,
        SERVER_HISTORICAL_PARTITION_LOOKUP_CACHE_MAX_ROWS,
        LOG_SEGMENT_FILE_SIZE,
        LOG_INDEX_FILE_SIZE,
        LOG_INDEX_INTERVAL_SIZE,
        LOG_FILE_PREALLOCATE,
        LOG_FLUSH_INTERVAL_MESSAGES,
        LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL,
        LOG_RETENTION_CHECK_INTERVAL,
        LOG_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL,
        LOG_REPLICA_MAX_LAG_TIME,
        LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER,
        LOG_REPLICA_FETCH_MAX_BYTES,
        LOG_REPLICA_FETCH_MAX_BYTES_FOR_BUCKET,
        LOG_REPLICA_FETCH_WAIT_MAX_TIME,
        LOG_REPLICA_FETCH_MIN_BYTES,
        LOG_REPLICA_FETCH_BACKOFF_INTERVAL,
        REMOTE_LOG_TASK_INTERVAL_DURATION,
        REMOTE_LOG_TASK_MAX_UPLOAD_SEGMENTS,
        REMOTE_FS_WRITE_BUFFER_SIZE,
        KV_SNAPSHOT_INTERVAL,
        KV_SCANNER_TTL,
        KV_SCANNER_EXPIRATION_INTERVAL,
        KV_SCANNER_MAX_PER_BUCKET,
        KV_SCANNER_MAX_PER_SERVER,
        KV_SCANNER_MAX_BATCH_SIZE,
        KV_SNAPSHOT_NUM_RETAINED,
        KV_ROCKSDB_BLOCK_CACHE_SIZE,
        KV_ROCKSDB_SHARED_MEMORY_WRITE_BUFFER_SIZE,
        KV_ROCKSDB_WRITEBUFFER_SIZE,
        KV_ROCKSDB_WRITEBUFFER_COUNT,
        KV_ROCKSDB_FILES_OPEN,
        KV_ROCKSDB_THREAD_NUM,
        KV_ROCKSDB_IDLE_FLUSH_INTERVAL,
        KV_OPEN_CONCURRENCY,
        KV_ROCKSDB_WRITE_BATCH_SIZE,
        KV_RECOVER_LOG_RECORD_BATCH_MAX_SIZE,
        SERVER_WRITER_ID_EXPIRATION_TIME,
        SERVER_WRITER_ID_EXPIRATION_CHECK_INTERVAL,
        DATALAKE_ENABLED,
        DATALAKE_FORMAT,
        LAKE_TIERING_JOB_TIMEOUT,
        COORDINATOR_PRODUCER_OFFSETS_TTL,
        COORDINATOR_PRODUCER_OFFSETS_CLEANUP_INTERVAL,
        SERVER_DYNAMIC_CONFIG_REFRESH_INTERVAL,
        METRICS_REPORTERS,
        METRICS_REPORTER_PROMETHEUS_PORT,
        KAFKA_ENABLED,
        KAFKA_LISTENER_NAMES,
        KAFKA_DATABASE,
    ]
)

# Server options Fluss users may have in their server.yaml that Strom accepts and ignores: a server
# that finds one set logs, at start-up, that it has no effect and why.
ACCEPTED_WITHOUT_EFFECT: dict[str, str] = {
    KV_ROCKSDB_WRITE_BATCH_SIZE.key: "each kv write request reaches RocksDB as one WriteBatch, whatever its "
    "size",
    LOG_FILE_PREALLOCATE.key: "log segment files grow as they are written; nothing is preallocated",
    LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL.key: "the recovery point is checkpointed when a flush completes, "
    "not on a timer",
    REMOTE_FS_WRITE_BUFFER_SIZE.key: "remote files are written through fsspec, which buffers on its own",
}

# ----------------------------------------------------------------------------------- table options

TABLE_REPLICATION_FACTOR: ConfigOption[int | None] = ConfigOption(
    "table.replication.factor",
    int,
    None,
    "Replicas per bucket. Filled from default.replication.factor when the table is created.",
)
TABLE_LOG_FORMAT: ConfigOption[LogFormat] = ConfigOption(
    "table.log.format",
    LogFormat,
    LogFormat.ARROW,
    "Record format of the log: ARROW (columnar; needed for projection pushdown), INDEXED or COMPACTED.",
)
TABLE_LOG_ARROW_COMPRESSION_TYPE: ConfigOption[ArrowCompressionType] = ConfigOption(
    "table.log.arrow.compression.type",
    ArrowCompressionType,
    ArrowCompressionType.ZSTD,
    "Compression of ARROW log batches: NONE, LZ4_FRAME or ZSTD.",
)
TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL: ConfigOption[int] = ConfigOption(
    "table.log.arrow.compression.zstd.level", int, 3, "ZSTD level for ARROW log batches, 1 to 22."
)
TABLE_KV_FORMAT: ConfigOption[KvFormat] = ConfigOption(
    "table.kv.format",
    KvFormat,
    KvFormat.COMPACTED,
    "Row format of primary-key table values: COMPACTED or INDEXED.",
)
TABLE_KV_FORMAT_VERSION: ConfigOption[int | None] = ConfigOption(
    "table.kv.format-version",
    int,
    None,
    "Version of the key encoding; new primary-key tables get the current version (2) at creation. "
    "Version 1 encodes keys with the lake format's encoder.",
)
TABLE_KV_STANDBY_REPLICA_ENABLED: ConfigOption[bool | None] = ConfigOption(
    "table.kv.standby-replica.enabled",
    bool,
    None,
    "Whether followers of a primary-key table keep warm kv state for fast leader promotion.",
)
TABLE_AUTO_PARTITION_ENABLED: ConfigOption[bool] = ConfigOption(
    "table.auto-partition.enabled",
    bool,
    False,
    "Whether the coordinator creates and expires time partitions of this partitioned table itself.",
)
TABLE_AUTO_PARTITION_KEY: ConfigOption[str | None] = ConfigOption(
    "table.auto-partition.key",
    str,
    None,
    "The time partition key of an auto-partitioned table with several partition keys.",
)
TABLE_AUTO_PARTITION_TIME_UNIT: ConfigOption[AutoPartitionTimeUnit] = ConfigOption(
    "table.auto-partition.time-unit",
    AutoPartitionTimeUnit,
    AutoPartitionTimeUnit.DAY,
    "One auto partition per YEAR, QUARTER, MONTH, DAY or HOUR.",
)
TABLE_AUTO_PARTITION_TIME_FORMAT: ConfigOption[str | None] = ConfigOption(
    "table.auto-partition.time-format",
    str,
    None,
    "Date-time pattern of auto partition values; by default yyyy, yyyyQ, yyyyMM, yyyyMMdd or yyyyMMddHH "
    "according to the time unit.",
)
TABLE_AUTO_PARTITION_TIME_ZONE: ConfigOption[str] = ConfigOption(
    "table.auto-partition.time-zone",
    str,
    _system_zone_id(),
    "Time zone in which auto partition boundaries are computed; the server's zone by default.",
)
TABLE_AUTO_PARTITION_NUM_PRECREATE: ConfigOption[int] = ConfigOption(
    "table.auto-partition.num-precreate", int, 2, "How many future auto partitions to create ahead of time."
)
TABLE_AUTO_PARTITION_NUM_RETENTION: ConfigOption[int] = ConfigOption(
    "table.auto-partition.num-retention",
    int,
    7,
    "How many past auto partitions to keep; older ones are dropped. Negative keeps all.",
)
TABLE_LOG_TTL: ConfigOption[timedelta] = ConfigOption(
    "table.log.ttl",
    timedelta,
    timedelta(days=7),
    "How long log data is kept (locally, or remotely once tiered). 0 keeps it forever.",
)
TABLE_LOG_LOCAL_TTL: ConfigOption[timedelta | None] = ConfigOption(
    "table.log.local-ttl",
    timedelta,
    None,
    "With remote storage, a bucket leader deletes its local copy of a segment already copied there once "
    "it is older than this (besides the table.log.tiered.local-segments count; the lake retention hold "
    "still applies); inherits table.log.ttl, 0 disables it. Without remote storage, and on followers, "
    "table.log.ttl alone rules local retention. Must not exceed table.log.ttl.",
)
TABLE_TIERED_LOG_LOCAL_SEGMENTS: ConfigOption[int] = ConfigOption(
    "table.log.tiered.local-segments",
    int,
    2,
    "Segments kept on local disk after they were copied to remote storage (> 0).",
)
TABLE_DATALAKE_ENABLED: ConfigOption[bool] = ConfigOption(
    "table.datalake.enabled", bool, False, "Whether the tiering service copies this table into the lake."
)
TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED: ConfigOption[bool] = ConfigOption(
    "table.datalake.historical-partition.enabled",
    bool,
    False,
    "Route lookups of expired auto partitions to the lake (auto-partitioned Paimon primary-key tables).",
)
TABLE_DATALAKE_FORMAT: ConfigOption[DataLakeFormat | None] = ConfigOption(
    "table.datalake.format",
    DataLakeFormat,
    None,
    "The table's lake format; the cluster's datalake.format is stamped on new tables.",
)
TABLE_DATALAKE_FRESHNESS: ConfigOption[timedelta] = ConfigOption(
    "table.datalake.freshness",
    timedelta,
    timedelta(minutes=3),
    "Target lag of the lake copy behind the table.",
)
TABLE_DATALAKE_RETENTION_HOLD_MAX_DURATION: ConfigOption[timedelta | None] = ConfigOption(
    "table.datalake.retention-hold.max-duration",
    timedelta,
    None,
    "(Strom) Lake-enabled tables keep log segments past table.log.ttl until the lake has their records; this "
    "bounds that wait (past the TTL), after which they are deleted anyway. Unset: wait for the lake.",
)
TABLE_DATALAKE_REMOTE_LOG_DROP_TIERED: ConfigOption[bool] = ConfigOption(
    "table.datalake.remote-log.drop-tiered",
    bool,
    False,
    "(Strom) Delete remote log segments as soon as the lake holds all their records, before table.log.ttl: "
    "the lake becomes the only long-term copy.",
)
TABLE_DATALAKE_AUTO_COMPACTION: ConfigOption[bool] = ConfigOption(
    "table.datalake.auto-compaction", bool, False, "Whether tiering also compacts the lake table."
)
TABLE_DATALAKE_AUTO_EXPIRE_SNAPSHOT: ConfigOption[bool] = ConfigOption(
    "table.datalake.auto-expire-snapshot",
    bool,
    False,
    "Whether tiering commits also expire old lake snapshots.",
)
TABLE_DATALAKE_AUTO_MAINTENANCE: ConfigOption[bool | None] = ConfigOption(
    "table.datalake.auto-maintenance",
    bool,
    None,
    "Whether tiering also compacts small lake files per bucket and expires old lake snapshots (the Iceberg "
    "design's single switch; when unset, auto-compaction and auto-expire-snapshot decide).",
)
TABLE_MERGE_ENGINE: ConfigOption[MergeEngineType | None] = ConfigOption(
    "table.merge-engine",
    MergeEngineType,
    None,
    "How an upsert combines with the stored row of a primary-key table: unset keeps the last row; "
    "FIRST_ROW keeps the first; VERSIONED keeps the row with the highest version column; AGGREGATION "
    "aggregates each column by its function (`fields.<column>.agg`, docs/merge-engines.md).",
)
TABLE_MERGE_ENGINE_VERSION_COLUMN: ConfigOption[str | None] = ConfigOption(
    "table.merge-engine.versioned.ver-column",
    str,
    None,
    "The version column of the VERSIONED merge engine (INT, BIGINT, TIMESTAMP or TIMESTAMP_LTZ).",
)
TABLE_DELETE_BEHAVIOR: ConfigOption[DeleteBehavior] = ConfigOption(
    "table.delete.behavior",
    DeleteBehavior,
    DeleteBehavior.ALLOW,
    "What a delete on a primary-key table does: ALLOW, IGNORE (drop silently) or DISABLE (reject). "
    "Tables with a merge engine get IGNORE unless set.",
)
TABLE_AUTO_INCREMENT_CACHE_SIZE: ConfigOption[int] = ConfigOption(
    "table.auto-increment.cache-size",
    int,
    100_000,
    "Auto-increment ids a bucket leader reserves from the table sequence at a time (larger: fewer "
    "requests to the coordinator, larger gaps after restarts).",
)
TABLE_CHANGELOG_IMAGE: ConfigOption[ChangelogImage] = ConfigOption(
    "table.changelog.image",
    ChangelogImage,
    ChangelogImage.FULL,
    "Changelog of a primary-key table: FULL emits -U/+U pairs; WAL emits only +U and may skip reading "
    "the old row.",
)
TABLE_STATISTICS_COLUMNS: ConfigOption[str | None] = ConfigOption(
    "table.statistics.columns",
    str,
    None,
    "Columns whose min/max/null counts each log batch carries: '*' or a comma-separated list. Log "
    "tables only; makes clients write V1 batches.",
)
TABLE_UNCLEAN_LEADER_ELECTION_ENABLED: ConfigOption[bool] = ConfigOption(
    "table.unclean.leader.election.enabled",
    bool,
    False,
    "(Strom) Kafka's unclean.leader.election.enable: when no replica known to hold every "
    "acknowledged record is live, elect any live replica at once instead of waiting, accepting the loss.",
)

TABLE_OPTIONS: dict[str, ConfigOption[Any]] = _catalogue(
    [
        TABLE_REPLICATION_FACTOR,
        TABLE_LOG_FORMAT,
        TABLE_LOG_ARROW_COMPRESSION_TYPE,
        TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL,
        TABLE_KV_FORMAT,
        TABLE_KV_FORMAT_VERSION,
        TABLE_KV_STANDBY_REPLICA_ENABLED,
        TABLE_AUTO_PARTITION_ENABLED,
        TABLE_AUTO_PARTITION_KEY,
        TABLE_AUTO_PARTITION_TIME_UNIT,
        TABLE_AUTO_PARTITION_TIME_FORMAT,
        TABLE_AUTO_PARTITION_TIME_ZONE,
        TABLE_AUTO_PARTITION_NUM_PRECREATE,
        TABLE_AUTO_PARTITION_NUM_RETENTION,
        TABLE_LOG_TTL,
        TABLE_LOG_LOCAL_TTL,
        TABLE_TIERED_LOG_LOCAL_SEGMENTS,
        TABLE_DATALAKE_ENABLED,
        TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED,
        TABLE_DATALAKE_FORMAT,
        TABLE_DATALAKE_FRESHNESS,
        TABLE_DATALAKE_RETENTION_HOLD_MAX_DURATION,
        TABLE_DATALAKE_REMOTE_LOG_DROP_TIERED,
        TABLE_DATALAKE_AUTO_COMPACTION,
        TABLE_DATALAKE_AUTO_EXPIRE_SNAPSHOT,
        TABLE_DATALAKE_AUTO_MAINTENANCE,
        TABLE_MERGE_ENGINE,
        TABLE_MERGE_ENGINE_VERSION_COLUMN,
        TABLE_DELETE_BEHAVIOR,
        TABLE_AUTO_INCREMENT_CACHE_SIZE,
        TABLE_CHANGELOG_IMAGE,
        TABLE_STATISTICS_COLUMNS,
        TABLE_UNCLEAN_LEADER_ELECTION_ENABLED,
    ]
)

# Table options that AlterTable may change.
ALTERABLE_TABLE_OPTIONS: frozenset[str] = frozenset(
    {
        TABLE_DATALAKE_ENABLED.key,
        TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED.key,
        TABLE_DATALAKE_FRESHNESS.key,
        TABLE_DATALAKE_AUTO_COMPACTION.key,
        TABLE_DATALAKE_RETENTION_HOLD_MAX_DURATION.key,
        TABLE_DATALAKE_REMOTE_LOG_DROP_TIERED.key,
        TABLE_LOG_TTL.key,
        TABLE_TIERED_LOG_LOCAL_SEGMENTS.key,
        TABLE_LOG_LOCAL_TTL.key,
        TABLE_AUTO_PARTITION_ENABLED.key,
        TABLE_AUTO_PARTITION_NUM_RETENTION.key,
        TABLE_AUTO_PARTITION_NUM_PRECREATE.key,
        TABLE_STATISTICS_COLUMNS.key,
        TABLE_KV_STANDBY_REPLICA_ENABLED.key,
        TABLE_UNCLEAN_LEADER_ELECTION_ENABLED.key,
    }
)

TABLE_PREFIX = "table."


def is_table_storage_option(key: str) -> bool:
    """Keys under ``table.`` belong to Fluss; anything else must go into custom properties."""
    return key.startswith(TABLE_PREFIX)


# ----------------------------------------------------------------------------------- client options

CLIENT_WRITER_BATCH_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "client.writer.batch-size", MemorySize, MemorySize(2 << 20), "Target size of one write batch per bucket."
)
CLIENT_WRITER_BATCH_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "client.writer.batch-timeout",
    timedelta,
    timedelta(milliseconds=100),
    "Longest a non-full batch waits before it is sent.",
)
CLIENT_WRITER_BUFFER_MEMORY_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "client.writer.buffer.memory-size",
    MemorySize,
    MemorySize(64 << 20),
    "Memory for batches waiting to be sent; writers block when it is full.",
)
CLIENT_WRITER_ACKS: ConfigOption[str] = ConfigOption(
    "client.writer.acks", str, "all", "Acknowledgements a write waits for: 0, 1 or all (-1)."
)
CLIENT_WRITER_REQUEST_MAX_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "client.writer.request-max-size", MemorySize, MemorySize(10 << 20), "Largest produce request sent."
)
CLIENT_WRITER_RETRIES: ConfigOption[int] = ConfigOption(
    "client.writer.retries", int, (1 << 31) - 1, "Retries of a failed batch with a retriable error."
)
CLIENT_WRITER_ENABLE_IDEMPOTENCE: ConfigOption[bool] = ConfigOption(
    "client.writer.enable-idempotence",
    bool,
    True,
    "Writer ids and batch sequences so retried batches are not written twice.",
)
CLIENT_WRITER_MAX_INFLIGHT_REQUESTS_PER_BUCKET: ConfigOption[int] = ConfigOption(
    "client.writer.max-inflight-requests-per-bucket",
    int,
    5,
    "Unacknowledged batches per bucket with idempotence on.",
)
CLIENT_WRITER_BUCKET_NO_KEY_ASSIGNER: ConfigOption[NoKeyAssigner] = ConfigOption(
    "client.writer.bucket.no-key-assigner",
    NoKeyAssigner,
    NoKeyAssigner.STICKY,
    "Bucket choice for tables without a bucket key: STICKY or ROUND_ROBIN.",
)
CLIENT_REQUEST_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "client.request-timeout", timedelta, timedelta(seconds=30), "Timeout of one client request."
)
CLIENT_CONNECT_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "client.connect-timeout", timedelta, timedelta(seconds=120), "Timeout for opening a connection."
)
CLIENT_SCANNER_LOG_MAX_POLL_RECORDS: ConfigOption[int] = ConfigOption(
    "client.scanner.log.max-poll-records", int, 500, "Most records one poll returns."
)
CLIENT_SCANNER_LOG_FETCH_MAX_BYTES: ConfigOption[MemorySize] = ConfigOption(
    "client.scanner.log.fetch.max-bytes", MemorySize, MemorySize(16 << 20), "Most bytes one fetch returns."
)
CLIENT_SCANNER_LOG_FETCH_MAX_BYTES_FOR_BUCKET: ConfigOption[MemorySize] = ConfigOption(
    "client.scanner.log.fetch.max-bytes-for-bucket",
    MemorySize,
    MemorySize(1 << 20),
    "Most bytes one fetch returns per bucket.",
)
CLIENT_SCANNER_LOG_FETCH_WAIT_MAX_TIME: ConfigOption[timedelta] = ConfigOption(
    "client.scanner.log.fetch.wait-max-time",
    timedelta,
    timedelta(milliseconds=500),
    "Longest the server holds a fetch waiting for data.",
)
CLIENT_SCANNER_LOG_FETCH_MIN_BYTES: ConfigOption[MemorySize] = ConfigOption(
    "client.scanner.log.fetch.min-bytes", MemorySize, MemorySize(1), "Bytes a fetch waits for."
)
CLIENT_LOOKUP_MAX_BATCH_SIZE: ConfigOption[int] = ConfigOption(
    "client.lookup.max-batch-size", int, 128, "Most keys per lookup request."
)
CLIENT_LOOKUP_BATCH_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "client.lookup.batch-timeout",
    timedelta,
    timedelta(milliseconds=100),
    "Longest a lookup waits to be batched with others.",
)

BOOTSTRAP_SERVERS: ConfigOption[list[str]] = ConfigOption(
    "bootstrap.servers",
    list,
    ["127.0.0.1:9123"],  # what `strom local` prints, and pyfluss's default
    "host:port pairs for the first connection; the client learns the whole cluster from them.",
)
CLIENT_ID: ConfigOption[str] = ConfigOption("client.id", str, "", "A name for this client in server logs.")
CLIENT_WRITER_BUFFER_PAGE_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "client.writer.buffer.page-size", MemorySize, MemorySize(128 << 10), "Size of one writer buffer page."
)
CLIENT_WRITER_BUFFER_PER_REQUEST_MEMORY_SIZE: ConfigOption[MemorySize] = ConfigOption(
    "client.writer.buffer.per-request-memory-size",
    MemorySize,
    MemorySize(16 << 20),
    "Memory the writer allocates at once for one request's batches.",
)
CLIENT_WRITER_BUFFER_WAIT_TIMEOUT: ConfigOption[timedelta | None] = ConfigOption(
    "client.writer.buffer.wait-timeout",
    timedelta,
    None,
    "Longest a write blocks waiting for buffer memory; unset means no limit.",
)
CLIENT_WRITER_DYNAMIC_BATCH_SIZE_ENABLED: ConfigOption[bool] = ConfigOption(
    "client.writer.dynamic-batch-size.enabled",
    bool,
    True,
    "Size new batches from recent write sizes, between the page size and client.writer.batch-size.",
)
CLIENT_WRITER_DYNAMIC_CREATE_PARTITION_ENABLED: ConfigOption[bool] = ConfigOption(
    "client.writer.dynamic-create-partition.enabled",
    bool,
    True,
    "Create a missing partition when a row is written to it.",
)
CLIENT_WRITER_KV_BACKPRESSURE_MAX_THROTTLE: ConfigOption[timedelta] = ConfigOption(
    "client.writer.kv-backpressure.max-throttle",
    timedelta,
    timedelta(milliseconds=3000),
    "Upper bound of the per-bucket delay applied when the server reports KV write pressure.",
)
CLIENT_SCANNER_LOG_CHECK_CRC: ConfigOption[bool] = ConfigOption(
    "client.scanner.log.check-crc", bool, True, "Check the CRC of every fetched record batch."
)
CLIENT_SCANNER_LOG_READ_PREFERENCE: ConfigOption[str] = ConfigOption(
    "client.scanner.log.read-preference",
    str,
    "local-first",
    "Where a log scanner prefers to read from: local-first or remote-first.",
)
CLIENT_SCANNER_REMOTE_LOG_PREFETCH_NUM: ConfigOption[int] = ConfigOption(
    "client.scanner.remote-log.prefetch-num", int, 4, "Remote log segments downloaded ahead of the reader."
)
CLIENT_SCANNER_IO_TMPDIR: ConfigOption[str] = ConfigOption(
    "client.scanner.io.tmpdir",
    str,
    f"{tempfile.gettempdir()}/fluss",
    "Local directory for downloaded log segments and kv snapshot files.",
)
CLIENT_REMOTE_FILE_DOWNLOAD_THREAD_NUM: ConfigOption[int] = ConfigOption(
    "client.remote-file.download-thread-num", int, 3, "Parallel downloads of remote files."
)
CLIENT_LOOKUP_QUEUE_SIZE: ConfigOption[int] = ConfigOption(
    "client.lookup.queue-size", int, 25600, "Most lookups waiting to be sent."
)
CLIENT_LOOKUP_MAX_INFLIGHT_REQUESTS: ConfigOption[int] = ConfigOption(
    "client.lookup.max-inflight-requests", int, 128, "Most unanswered lookup requests."
)
CLIENT_LOOKUP_MAX_RETRIES: ConfigOption[int] = ConfigOption(
    "client.lookup.max-retries", int, (1 << 31) - 1, "Retries of a lookup that failed with a retriable error."
)
CLIENT_SECURITY_PROTOCOL: ConfigOption[str] = ConfigOption(
    "client.security.protocol",
    str,
    "PLAINTEXT",
    "PLAINTEXT, SASL (SASL/PLAIN authentication), SSL (TLS) or SASL_SSL (SASL/PLAIN over TLS).",
)
CLIENT_SSL_TRUSTSTORE_LOCATION: ConfigOption[str | None] = ConfigOption(
    "client.security.ssl.truststore.location",
    str,
    None,
    "With SSL or SASL_SSL: PEM file of the CA certificates the client trusts (the system's CAs when "
    "unset). A server's certificate must also name the host the client connects to.",
)
CLIENT_SSL_KEYSTORE_LOCATION: ConfigOption[str | None] = ConfigOption(
    "client.security.ssl.keystore.location",
    str,
    None,
    "With SSL or SASL_SSL: PEM file holding the client's private key and certificate chain, presented "
    "to servers that ask for client certificates (security.ssl.client.auth).",
)
CLIENT_SSL_KEY_PASSWORD: ConfigOption[str | None] = ConfigOption(
    "client.security.ssl.key.password",
    str,
    None,
    "Password of the private key in client.security.ssl.keystore.location, when it is encrypted.",
)
CLIENT_SASL_MECHANISM: ConfigOption[str] = ConfigOption(
    "client.security.sasl.mechanism", str, "PLAIN", "SASL mechanism; only PLAIN is supported."
)
CLIENT_SASL_JAAS_CONFIG: ConfigOption[str | None] = ConfigOption(
    "client.security.sasl.jaas.config",
    str,
    None,
    "JAAS line carrying username and password (older form of the two options below).",
)
CLIENT_SASL_USERNAME: ConfigOption[str | None] = ConfigOption(
    "client.security.sasl.username", str, None, "SASL/PLAIN user name."
)
CLIENT_SASL_PASSWORD: ConfigOption[str | None] = ConfigOption(
    "client.security.sasl.password", str, None, "SASL/PLAIN password."
)
CLIENT_FS_TOKEN_RENEWAL_BACKOFF: ConfigOption[timedelta] = ConfigOption(
    "client.filesystem.security.token.renewal.backoff",
    timedelta,
    timedelta(hours=1),
    "Wait before asking again for a file-system token after a failure.",
)
CLIENT_FS_TOKEN_RENEWAL_TIME_RATIO: ConfigOption[float] = ConfigOption(
    "client.filesystem.security.token.renewal.time-ratio",
    float,
    0.75,
    "Share of a file-system token's lifetime after which it is renewed.",
)
CLIENT_METRICS_ENABLED: ConfigOption[bool] = ConfigOption(
    "client.metrics.enabled", bool, False, "Collect client metrics."
)

CLIENT_OPTIONS: dict[str, ConfigOption[Any]] = _catalogue(
    [
        BOOTSTRAP_SERVERS,
        CLIENT_ID,
        CLIENT_WRITER_BUFFER_PAGE_SIZE,
        CLIENT_WRITER_BUFFER_PER_REQUEST_MEMORY_SIZE,
        CLIENT_WRITER_BUFFER_WAIT_TIMEOUT,
        CLIENT_WRITER_DYNAMIC_BATCH_SIZE_ENABLED,
        CLIENT_WRITER_DYNAMIC_CREATE_PARTITION_ENABLED,
        CLIENT_WRITER_KV_BACKPRESSURE_MAX_THROTTLE,
        CLIENT_SCANNER_LOG_CHECK_CRC,
        CLIENT_SCANNER_LOG_READ_PREFERENCE,
        CLIENT_SCANNER_REMOTE_LOG_PREFETCH_NUM,
        CLIENT_SCANNER_IO_TMPDIR,
        CLIENT_REMOTE_FILE_DOWNLOAD_THREAD_NUM,
        CLIENT_LOOKUP_QUEUE_SIZE,
        CLIENT_LOOKUP_MAX_INFLIGHT_REQUESTS,
        CLIENT_LOOKUP_MAX_RETRIES,
        CLIENT_SECURITY_PROTOCOL,
        CLIENT_SSL_TRUSTSTORE_LOCATION,
        CLIENT_SSL_KEYSTORE_LOCATION,
        CLIENT_SSL_KEY_PASSWORD,
        CLIENT_SASL_MECHANISM,
        CLIENT_SASL_JAAS_CONFIG,
        CLIENT_SASL_USERNAME,
        CLIENT_SASL_PASSWORD,
        CLIENT_FS_TOKEN_RENEWAL_BACKOFF,
        CLIENT_FS_TOKEN_RENEWAL_TIME_RATIO,
        CLIENT_METRICS_ENABLED,
        CLIENT_WRITER_BATCH_SIZE,
        CLIENT_WRITER_BATCH_TIMEOUT,
        CLIENT_WRITER_BUFFER_MEMORY_SIZE,
        CLIENT_WRITER_ACKS,
        CLIENT_WRITER_REQUEST_MAX_SIZE,
        CLIENT_WRITER_RETRIES,
        CLIENT_WRITER_ENABLE_IDEMPOTENCE,
        CLIENT_WRITER_MAX_INFLIGHT_REQUESTS_PER_BUCKET,
        CLIENT_WRITER_BUCKET_NO_KEY_ASSIGNER,
        CLIENT_REQUEST_TIMEOUT,
        CLIENT_CONNECT_TIMEOUT,
        CLIENT_SCANNER_LOG_MAX_POLL_RECORDS,
        CLIENT_SCANNER_LOG_FETCH_MAX_BYTES,
        CLIENT_SCANNER_LOG_FETCH_MAX_BYTES_FOR_BUCKET,
        CLIENT_SCANNER_LOG_FETCH_WAIT_MAX_TIME,
        CLIENT_SCANNER_LOG_FETCH_MIN_BYTES,
        CLIENT_LOOKUP_MAX_BATCH_SIZE,
        CLIENT_LOOKUP_BATCH_TIMEOUT,
    ]
)

# ----------------------------------------------------------------------------------- connector options
# Fluss's connectors take a table's bucket count and bucket key as options of CREATE TABLE (Flink's
# 'bucket.num' and 'bucket.key'). They are the table's distribution, never stored as properties. The
# bucket key cannot change: AlterTable refuses it, as Fluss's Flink catalog does. Setting 'bucket.num'
# rescales the table online (Strom only; docs/operations.md, "Rescaling buckets").

BUCKET_NUM: ConfigOption[int | None] = ConfigOption(
    "bucket.num",
    int,
    None,
    "Number of buckets (the cluster's default.bucket.number when unset at creation); AlterTable setting "
    "it alone rescales the table online to more buckets.",
)
BUCKET_KEY: ConfigOption[list[str] | None] = ConfigOption(
    "bucket.key",
    list,
    None,
    "Comma-separated bucket key columns, fixed at creation (by default the primary key minus partition "
    "keys); AlterTable refuses it.",
)

CONNECTOR_OPTIONS: dict[str, ConfigOption[Any]] = _catalogue([BUCKET_NUM, BUCKET_KEY])
