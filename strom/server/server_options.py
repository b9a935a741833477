"""What a server makes of its configuration at start-up, before it binds anything.

A Fluss `server.yaml` is a valid input on its own: every key Strom declares is honoured where it
applies, refused here with a message, or named in `config.ACCEPTED_WITHOUT_EFFECT` and logged as
having no effect. A key Strom does not know is logged with the nearest known key, since a typo would
otherwise leave the server on a default without a word.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError
from strom.security.listeners import parse_endpoints

log = logging.getLogger(__name__)

T = TypeVar("T")

# Key families a server accepts besides the declared options: the lake's catalog properties, per-listener
# SASL settings, the Prometheus reporter's settings and the client options servers use for their own calls.
_PREFIXES = ("datalake.", "security.sasl.listener.name.", "metrics.reporter.", "client.")


def known_keys() -> set[str]:
    keys = set(options.SERVER_OPTIONS)
    for option in options.SERVER_OPTIONS.values():
        keys.update(option.fallback_keys)
    return keys


def unknown_key_warnings(keys: Iterable[str]) -> list[str]:
    """One message per key no server option has, naming the closest known key when there is one."""
    known = known_keys()
    messages = []
    for key in keys:
        if key in known or key.startswith(_PREFIXES):
            continue
        nearest = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean '{nearest[0]}'?" if nearest else ""
        messages.append(f"unknown configuration key '{key}' is ignored{hint}")
    return messages


def check_server_config(config: Configuration) -> None:
    """Refuse what Strom cannot do, warn about what it ignores. Raises InvalidConfigError."""
    remote_data_dir(config)  # refuses several remote data dirs now rather than at the first upload
    for message in unknown_key_warnings(config):
        log.warning(message)
    for key, reason in options.ACCEPTED_WITHOUT_EFFECT.items():
        if key in config:
            log.warning(
                "configuration key '%s' is accepted for compatibility and has no effect: %s", key, reason
            )


def option_value(config: Configuration, option: options.ConfigOption[T]) -> T:
    """The option's value, which its default makes present."""
    value: T | None = config.get(option)
    if value is None:
        raise InvalidConfigError(f"{option.key} must be set")
    return value


def remote_data_dir(config: Configuration) -> str | None:
    """The remote storage root: `remote.data.dirs` when it lists one directory, else `remote.data.dir`.

    Fluss spreads new tables over several `remote.data.dirs`; Strom keeps one root per cluster, so a
    list of several is refused instead of silently using one of them.
    """
    dirs = config.get(options.REMOTE_DATA_DIRS) or []
    if len(dirs) > 1:
        raise InvalidConfigError(
            f"remote.data.dirs lists {len(dirs)} directories, but Strom keeps all remote data under one: "
            "list one, or set remote.data.dir."
        )
    if dirs:
        return dirs[0]
    return config.get_optional(options.REMOTE_DATA_DIR)


def data_dir(flag: Path | None, config: Configuration) -> Path:
    """`--data-dir` wins over `data.dir`, which defaults to Fluss's /tmp/fluss-data."""
    if flag is not None:
        return flag
    return Path(option_value(config, options.DATA_DIR))


def listen_address(
    host: str | None,
    port: int | None,
    file_config: dict[str, str],
    pairs: dict[str, str],
    host_option: options.ConfigOption[str | None],
    port_option: options.ConfigOption[str],
    default_host: str,
) -> tuple[str, int, dict[str, str]]:
    """Where a server listens, and its configuration to pass on (`pairs`, the --config ones, over
    the file's).

    `bind.listeners` given as --config decides. Otherwise `--host`/`--port` win: they replace the
    file's `bind.listeners` with one listener there. Without them the file's `bind.listeners` decides
    (ListenerSettings reads it), else Fluss's deprecated `coordinator.host`/`.port` or
    `tablet-server.host`/`.port`, else the defaults.
    """
    config = {**file_config, **pairs}
    conf = Configuration(config)
    flags = host is not None or port is not None
    if conf.contains(options.BIND_LISTENERS) and (options.BIND_LISTENERS.key in pairs or not flags):
        # bind.listeners names the addresses; the first one's host is where metrics bind too
        endpoints = parse_endpoints(conf.get(options.BIND_LISTENERS) or "")
        return (endpoints[0].host if endpoints else default_host), 0, config
    if flags:
        config = {k: v for k, v in config.items() if k != options.BIND_LISTENERS.key}
    resolved_host = host if host is not None else (conf.get(host_option) or default_host)
    raw_port = str(port) if port is not None else conf.get(port_option)
    try:
        resolved_port = int(str(raw_port).strip())
    except ValueError:
        raise InvalidConfigError(f"{port_option.key}: '{raw_port}' is not a port number") from None
    return resolved_host, resolved_port, config


def tablet_server_id(flag: int | None, config: Configuration) -> int:
    """`--server-id` wins over `tablet-server.id`; one of them is required, as in Fluss."""
    server_id = flag if flag is not None else config.get_optional(options.TABLET_SERVER_ID)
    if server_id is None:
        raise InvalidConfigError("a tablet server needs an id: set tablet-server.id or give --server-id")
    if server_id < 0:
        raise InvalidConfigError(f"tablet-server.id must be >= 0, got {server_id}")
    return server_id
