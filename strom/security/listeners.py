"""Listeners: the named endpoints a server binds, advertises and secures (Fluss's `bind.listeners`,
`advertised.listeners`, `internal.listener.name` and `security.protocol.map`).

A server binds one socket per listener. Clients get, in Metadata, the addresses of the listener they
connected through; servers reach each other through the internal listener. Each listener speaks
PLAINTEXT, SASL, SSL (TLS, `tls.py`) or SASL_SSL (SASL inside TLS).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError

PLAINTEXT = "PLAINTEXT"
SASL = "SASL"
SSL = "SSL"
SASL_SSL = "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SASL, SSL, SASL_SSL)
SASL_PROTOCOLS = (SASL, SASL_SSL)
TLS_PROTOCOLS = (SSL, SASL_SSL)
DEFAULT_LISTENER_NAME = "FLUSS"

_ENDPOINT = re.compile(r"^([A-Za-z0-9_\-]+)://(\[[^\]]+\]|[^:/\s]*):(\d+)$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_endpoints(text: str, key: str = "bind.listeners") -> list[Endpoint]:
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _ENDPOINT.match(item)
        if match is None:
            raise InvalidConfigError(f"{key}: '{item}' is not of the form LISTENER_NAME://host:port")
        name, host, port = match.group(1), match.group(2).strip("[]"), int(match.group(3))
        if port > 65535:
            raise InvalidConfigError(f"{key}: port {port} of listener {name} is out of range")
        if any(e.listener == name for e in endpoints):
            raise InvalidConfigError(f"{key}: listener {name} is listed twice")
        endpoints.append(Endpoint(name, host, port))
    return endpoints


def format_endpoints(endpoints: Iterable[Endpoint]) -> str:
    return ",".join(str(e) for e in endpoints)


def parse_protocol_map(text: str) -> dict[str, str]:
    protocols: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip():
            raise InvalidConfigError(f"security.protocol.map: '{item}' is not of the form LISTENER:PROTOCOL")
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(
                f"security.protocol.map: listener {name.strip()} has unknown protocol '{protocol}' "
                f"(supported: {', '.join(PROTOCOLS)})"
            )
        protocols[name.strip()] = protocol
    return protocols


@dataclass(frozen=True)
class ListenerSettings:
    """Where one server listens, what it publishes, and how each listener authenticates."""

    bind: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]
    internal: str
    protocols: Mapping[str, str]

    @classmethod
    def from_config(cls, config: Configuration, host: str, port: int) -> ListenerSettings:
        """Listeners from the configuration; without `bind.listeners`, one listener at host:port.

        That single listener is named `internal.listener.name` when set, else after the one listener of
        `security.protocol.map` when it names exactly one (so `CLIENT:SASL` alone secures it), else FLUSS.
        """
        protocols = parse_protocol_map(config.get(options.SECURITY_PROTOCOL_MAP) or "")
        internal = config.get_optional(options.INTERNAL_LISTENER_NAME)
        bind_text = config.get_optional(options.BIND_LISTENERS)
        if bind_text:
            bind = parse_endpoints(bind_text)
            if not bind:
                raise InvalidConfigError("bind.listeners lists no listener")
        else:
            if internal:
                name = internal
            elif len(protocols) == 1:
                name = next(iter(protocols))
            else:
                name = DEFAULT_LISTENER_NAME
            bind = [Endpoint(name, host, port)]
        names = [e.listener for e in bind]
        if internal is None:
            internal = names[0] if len(names) == 1 else DEFAULT_LISTENER_NAME
        if internal not in names:
            raise InvalidConfigError(
                f"internal.listener.name {internal} is not one of the bound listeners ({', '.join(names)})"
            )
        advertised_text = config.get_optional(options.ADVERTISED_LISTENERS)
        advertised = (
            {e.listener: e for e in parse_endpoints(advertised_text, "advertised.listeners")}
            if (advertised_text)
            else {}
        )
        unknown = set(advertised) - set(names)
        if unknown:
            raise InvalidConfigError(
                f"advertised.listeners names listeners that are not bound: {', '.join(sorted(unknown))}"
            )
        return cls(
            bind=tuple(bind),
            advertised=tuple(advertised.get(e.listener, e) for e in bind),
            internal=internal,
            protocols={name: protocols.get(name, PLAINTEXT) for name in names},
        )

    def protocol(self, listener: str) -> str:
        return self.protocols.get(listener, PLAINTEXT)

    def with_bound_ports(self, ports: Mapping[str, int]) -> ListenerSettings:
        """After binding: port 0 replaced by the port the OS chose, in bind and advertised endpoints."""

        def fix(e: Endpoint) -> Endpoint:
            return Endpoint(e.listener, e.host, ports[e.listener]) if e.port == 0 else e

        return ListenerSettings(
            tuple(fix(e) for e in self.bind),
            tuple(fix(e) for e in self.advertised),
            self.internal,
            self.protocols,
        )

    def advertised_endpoint(self, listener: str) -> Endpoint:
        for endpoint in self.advertised:
            if endpoint.listener == listener:
                return endpoint
        raise KeyError(listener)

    @property
    def internal_endpoint(self) -> Endpoint:
        return self.advertised_endpoint(self.internal)

    def uses_sasl(self, listener: str) -> bool:
        return self.protocol(listener) in SASL_PROTOCOLS

    def uses_tls(self, listener: str) -> bool:
        return self.protocol(listener) in TLS_PROTOCOLS

    @property
    def sasl_enabled(self) -> bool:
        return any(p in SASL_PROTOCOLS for p in self.protocols.values())

    @property
    def tls_enabled(self) -> bool:
        return any(p in TLS_PROTOCOLS for p in self.protocols.values())


def endpoint_map(listeners: str | None) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` (PbServerNode.listeners) as {name: (host, port)}; {} when absent."""
    if not listeners:
        return {}
    return {e.listener: (e.host, e.port) for e in parse_endpoints(listeners, "listeners")}


def endpoint_on(
    listener: str | None, listeners: str | None, default: tuple[str, int]
) -> tuple[str, int] | None:
    """A server's address on `listener`: `default` when it advertises no listeners (or none is asked
    for), None when it does not have that listener."""
    if not listener or not listeners:
        return default
    return endpoint_map(listeners).get(listener)


def internal_listener_name(config: Configuration) -> str:
    """The name of the listener servers use among themselves, as every server of the cluster derives it."""
    return ListenerSettings.from_config(config, "0.0.0.0", 0).internal
