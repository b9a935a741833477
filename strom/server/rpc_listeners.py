"""One RPC server per configured listener, sharing one set of handlers and one security layer."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from strom.rpc.api import ApiKey, ServerType
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.limits import RpcLimits
from strom.rpc.server import Handler, Refusal, RequestObserver, RpcServer
from strom.security.layer import SecurityLayer
from strom.security.listeners import ListenerSettings, format_endpoints


class ListenerServer(Protocol):
    """A listener that speaks another protocol than Fluss's (the Kafka listener)."""

    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class ListenerGroup:
    """The sockets of one server process. `port` is the internal listener's (what peers use).

    `others` serve the listeners, by name, that do not speak Fluss; they are started, advertised and
    closed with the rest."""

    def __init__(
        self,
        *,
        name: str,
        listeners: ListenerSettings,
        handlers: dict[ApiKey, Handler],
        server_type: ServerType,
        limits: RpcLimits,
        security: SecurityLayer,
        observer: RequestObserver | None = None,
        others: Mapping[str, ListenerServer] | None = None,
    ) -> None:
        self.listeners = listeners
        self.security = security
        others = others or {}
        self.servers: dict[str, Any] = {
            endpoint.listener: RpcServer(
                name=name,
                host=endpoint.host,
                port=endpoint.port,
                handlers=handlers,
                server_type=server_type,
                limits=limits,
                listener=endpoint.listener,
                guard=security,
                observer=observer,
                tls=security.settings.tls_for(endpoint.listener),
            )
            for endpoint in listeners.bind
            if endpoint.listener not in others
        }
        self.servers.update(others)

    async def start(self) -> None:
        for server in self.servers.values():
            await server.start()
        # listeners bound to port 0 advertise the port they got
        self.listeners = self.listeners.with_bound_ports({n: s.port for n, s in self.servers.items()})

    async def drain(self, refusal: Refusal, grace_s: float, finish: frozenset[ApiKey]) -> int:
        """Every listener drains at once (RpcServer.drain); how many requests outlived the grace."""
        servers = self.servers.values()
        return sum(await asyncio.gather(*(server.drain(refusal, grace_s, finish) for server in servers)))

    async def quiet(self, quiet_s: float, max_s: float) -> None:
        """Until no listener refused a request for `quiet_s` (RpcServer.quiet), at most `max_s`."""
        await asyncio.gather(*(server.quiet(quiet_s, max_s) for server in self.servers.values()))

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers.values()))

    @property
    def port(self) -> int:
        return self.servers[self.listeners.internal].port

    def describe(self, node_id: int) -> pb.PbServerNode:
        """This server as peers reach it (internal listener) plus every advertised listener."""
        internal = self.listeners.internal_endpoint
        return pb.PbServerNode(
            node_id=node_id,
            host=internal.host,
            port=internal.port,
            listeners=format_endpoints(self.listeners.advertised),
        )
