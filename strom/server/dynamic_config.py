"""Dynamic cluster configs (Fluss 1.0, DescribeClusterConfigs 1045 / AlterClusterConfigs 1046).

Fluss lets a few server options change at run time for the whole cluster (its `DynamicServerConfig`
list). Strom takes the same list, and of it applies live the options it has: any other key is refused
with Fluss's CONFIG_EXCEPTION, and a Fluss-dynamic key Strom cannot apply live is refused too (never
stored and ignored). The coordinator keeps the dynamic values in its metadata store and applies them;
tablet servers read them from the coordinator (DescribeClusterConfigs) every
`server.dynamic-config.refresh-interval` and apply what changed.

Describe answers every option of the server's own configuration that no dynamic value overrides
(INITIAL_SERVER_CONFIG) and every dynamic value (DYNAMIC_SERVER_CONFIG), secrets redacted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import ConfigError

log = logging.getLogger(__name__)

INITIAL = "INITIAL_SERVER_CONFIG"
DYNAMIC = "DYNAMIC_SERVER_CONFIG"
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# Fluss 1.0 DynamicServerConfig.ALLOWED_CONFIG_KEYS (plus every "datalake." key)
FLUSS_DYNAMIC_KEYS = frozenset(
    {
        "datalake.format",
        "log.retention.roll-active-segment.enabled",
        "log.replica.min-in-sync-replicas-number",
        "kv.leader-replica.memory-reserved",
        "kv.shared-rate-limiter.bytes-per-sec",
        "kv.snapshot.interval",
        "server.data-disk.write-recover-ratio",
        "server.data-disk.write-limit-ratio",
        "server.historical-partition.lookup-cache.max-disk-ratio",
        "server.historical-partition.lookuper-cache.expire-after-access",
        "remote.data.dirs",
        "remote.data.dirs.strategy",
        "remote.data.dirs.weights",
        "security.sasl.credentials",
    }
)
FLUSS_DYNAMIC_PREFIXES = ("datalake.",)

# the ones Strom applies on live servers
APPLIED_LIVE: dict[str, options.ConfigOption[Any]] = {
    options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER.key: options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER,
    options.KV_SNAPSHOT_INTERVAL.key: options.KV_SNAPSHOT_INTERVAL,
    options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO.key: options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO,
    options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO.key: options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO,
}

_SECRET_MARKERS = ("password", "jaas", "credentials", "secret", "token")
REDACTED = "******"


def is_fluss_dynamic(key: str) -> bool:
    return key in FLUSS_DYNAMIC_KEYS or key.startswith(FLUSS_DYNAMIC_PREFIXES)


def redact(key: str, value: str) -> str:
    return REDACTED if any(marker in key.lower() for marker in _SECRET_MARKERS) else value


def altered(current: Mapping[str, str], changes: list[tuple[str, str | None, int]]) -> dict[str, str]:
    """The dynamic values after `changes` (key, value, op type), each checked: ConfigError for a key
    Fluss does not allow to change, one Strom cannot apply live, an operation that does not fit, or
    a value that does not parse."""
    result = dict(current)
    for key, value, op in changes:
        if not is_fluss_dynamic(key):
            raise ConfigError(f"The config key {key} is not allowed to be changed dynamically.")
        option = APPLIED_LIVE.get(key)
        if option is None:
            raise ConfigError(
                f"The config key {key} is dynamic in Fluss, but Strom cannot apply it on live servers; "
                f"set it in the servers' configuration. Dynamic in Strom: {', '.join(sorted(APPLIED_LIVE))}."
            )
        if op == OP_DELETE:
            result.pop(key, None)
        elif op == OP_SET:
            if value is None:
                raise ConfigError(f"Setting config {key} needs a value.")
            try:
                parsed = option.parse(value)
            except ValueError as e:
                raise ConfigError(
                    f"Cannot parse '{value}' as {option.type.__name__} for config '{key}': {e}"
                ) from None
            if key == options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER.key and parsed < 1:
                raise ConfigError(f"Config {key} must be at least 1, got {value}.")
            if key == options.KV_SNAPSHOT_INTERVAL.key and parsed.total_seconds() <= 0:
                raise ConfigError(f"Config {key} must be positive, got {value}.")
            result[key] = value
        elif op in (OP_APPEND, OP_SUBTRACT):
            raise ConfigError(
                f"APPEND/SUBTRACT operations are only supported for list-typed or map-typed config keys, "
                f"and {key} is neither."
            )
        else:
            raise ConfigError(f"Unsupported config operation type {op}")
    limit_key = options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO.key
    recover_key = options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO.key
    if limit_key in result or recover_key in result:
        # checked as a pair (Fluss's ranges); a ratio not set dynamically is taken at its default
        limit = float(result.get(limit_key, options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO.default))
        recover = float(result.get(recover_key, options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO.default))
        if not 0.0 < recover < limit <= 1.0:
            raise ConfigError(
                f"{recover_key} ({recover}) and {limit_key} ({limit}) must satisfy 0 < recover < limit <= 1; "
                f"when lowering both, change them in one request"
            )
    return result


class DynamicConfig:
    """One server's configuration: what it started with, the dynamic values over it, and who applies
    a change of each live option."""

    def __init__(self, initial: Configuration) -> None:
        self.initial = initial
        self.dynamic: dict[str, str] = {}
        self._appliers: dict[str, list[Callable[[Any], None]]] = {}

    @property
    def effective(self) -> Configuration:
        return self.initial.merged(self.dynamic)

    def on_change(self, option: options.ConfigOption[Any], apply: Callable[[Any], None]) -> None:
        self._appliers.setdefault(option.key, []).append(apply)

    def update(self, dynamic: Mapping[str, str]) -> list[str]:
        """Take the cluster's dynamic values; apply each live option whose value changed (a dropped
        dynamic value falls back to the initial one). Returns the changed keys."""
        before = self.effective
        self.dynamic = {k: v for k, v in dynamic.items() if k in APPLIED_LIVE}
        after = self.effective
        changed = [key for key in APPLIED_LIVE if before.get(key) != after.get(key)]
        for key in changed:
            value = after.get(APPLIED_LIVE[key])
            for apply in self._appliers.get(key, []):
                apply(value)
            log.info("dynamic config %s is now %s", key, after.get(key) or "its default")
        return changed

    def describe(self) -> list[tuple[str, str, str]]:
        entries = [(k, redact(k, v), INITIAL) for k, v in self.initial.items() if k not in self.dynamic]
        entries += [(k, redact(k, v), DYNAMIC) for k, v in self.dynamic.items()]
        return entries
