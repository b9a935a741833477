"""Asyncio RPC client for the Fluss framing: request ids, pipelining, timeouts and reconnects.

Used by `strom.client` and by the servers for their calls to each other. A `RpcConnection` is one TCP
connection with many requests in flight; a `ConnectionPool` keeps one connection per address and
opens a new one when the old one broke.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import Message

from strom.common.errors import (
    AuthenticateError,
    FlussError,
    NetworkError,
    RequestTimeoutError,
    error_for_code,
)
from strom.rpc.api import ApiKey, ServerType, api_spec
from strom.rpc.framing import RESPONSE_HEADER, RESPONSE_SUCCESS, encode_request
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.security.tls import describe_handshake_failure

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
CLIENT_SOFTWARE_NAME = "strom-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"


@dataclass(frozen=True, slots=True)
class SaslPlain:
    username: str
    password: str


class RpcConnection(asyncio.Protocol):
    """One connection to one server. Create it with `RpcConnection.connect`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pending: dict[int, tuple[asyncio.Future[bytes], ApiKey]] = {}
        self.next_request_id = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.server_type: int | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        expected_server_type: ServerType | None = None,
        sasl: SaslPlain | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> RpcConnection:
        """With `tls`, the connection is TLS, and the server's certificate must name `host`."""
        loop = asyncio.get_running_loop()
        address = f"{host}:{port}"
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: cls(address),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    ssl_handshake_timeout=connect_timeout if tls is not None else None,
                ),
                connect_timeout,
            )
        except ssl.SSLError as e:
            # not retriable: a certificate that is refused now is refused on every retry
            raise AuthenticateError(describe_handshake_failure(address, e)) from e
        except (OSError, TimeoutError) as e:
            raise NetworkError(f"cannot connect to {address}: {e}") from e
        try:
            await connection._handshake(expected_server_type, sasl, connect_timeout)
        except NetworkError as e:
            # closed by the server (perhaps not yet reported as lost), not timed out
            lost = connection.transport is None or connection.transport.is_closing()
            connection.close()
            if tls is not None and lost and connection.server_type is None:
                # TLS 1.3 servers verify client certificates after the client's side of the handshake
                # is done: a refused (or missing) certificate shows only as the connection closing
                raise NetworkError(
                    f"{e} right after the TLS handshake; a server with security.ssl.client.auth refuses "
                    "clients without a certificate it trusts (client.security.ssl.keystore.location)"
                ) from e
            raise
        except BaseException:
            connection.close()
            raise
        return connection

    async def _handshake(self, expected: ServerType | None, sasl: SaslPlain | None, timeout: float) -> None:
        response = await self.request(
            ApiKey.API_VERSIONS,
            pb.ApiVersionsRequest(
                client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
            ),
            timeout=timeout,
        )
        self.api_versions = {v.api_key: (v.min_version, v.max_version) for v in response.api_versions}
        self.server_type = response.server_type if response.HasField("server_type") else None
        if expected is not None and self.server_type is not None and self.server_type != expected:
            raise NetworkError(
                f"{self.address} is a {ServerType(self.server_type).name}, expected {expected.name}"
            )
        if sasl is not None:
            token = b"\0" + sasl.username.encode() + b"\0" + sasl.password.encode()
            await self.request(
                ApiKey.AUTHENTICATE, pb.AuthenticateRequest(protocol="PLAIN", token=token), timeout=timeout
            )

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        error = NetworkError(f"connection to {self.address} lost" + (f": {exc}" if exc else ""))
        for future, _ in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        pos = 0
        end = len(buffer)
        while end - pos >= RESPONSE_HEADER.size:
            length = int.from_bytes(buffer[pos : pos + 4], "big", signed=True)
            if end - pos - 4 < length:
                break
            _, response_type, request_id = RESPONSE_HEADER.unpack_from(buffer, pos)
            body = bytes(buffer[pos + RESPONSE_HEADER.size : pos + 4 + length])
            pos += 4 + length
            entry = self.pending.pop(request_id, None)
            if entry is None:
                continue  # timed out already
            future, _ = entry
            if future.done():
                continue
            if response_type == RESPONSE_SUCCESS:
                future.set_result(body)
            else:
                error = pb.ErrorResponse()
                try:
                    error.ParseFromString(body)
                    future.set_exception(error_for_code(error.error_code, error.error_message or None))
                except Exception as e:  # a broken error frame is still an error
                    future.set_exception(NetworkError(f"unreadable error response: {e}"))
        if pos:
            del buffer[:pos]

    # ---- requests

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def version_for(self, key: ApiKey) -> int:
        """The highest version both sides support (what the official client does)."""
        spec = api_spec(key)
        server = self.api_versions.get(int(key))
        if server is None:
            return spec.max_version
        return min(spec.max_version, server[1])

    async def request(
        self,
        api_key: ApiKey,
        message: Message,
        *,
        version: int | None = None,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> Any:
        spec = api_spec(api_key)
        body = await self.request_raw(api_key, message.SerializeToString(), version=version, timeout=timeout)
        response = spec.response_type()
        response.ParseFromString(body)
        return response

    async def request_raw(
        self,
        api_key: ApiKey,
        body: bytes,
        *,
        version: int | None = None,
        timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    ) -> bytes:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise NetworkError(f"connection to {self.address} is closed")
        request_id = self.next_request_id
        self.next_request_id = (request_id + 1) & 0x7FFFFFFF
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        self.pending[request_id] = (future, api_key)
        if version is None:
            version = self.version_for(api_key) if api_key != ApiKey.API_VERSIONS else 0
        transport.write(encode_request(int(api_key), version, request_id, body))
        if timeout is None:
            return await future
        # A timer on the request's own future: asyncio.wait_for wraps it in a waiter future and
        # callbacks, a cost every request paid (lookups send thousands per second).
        timer = loop.call_later(timeout, self._time_out, request_id, timeout)
        try:
            return await future
        finally:
            timer.cancel()

    def _time_out(self, request_id: int, timeout: float) -> None:
        entry = self.pending.pop(request_id, None)
        if entry is not None and not entry[0].done():
            future, api_key = entry
            future.set_exception(
                RequestTimeoutError(f"{api_key.name} to {self.address} timed out after {timeout:.1f}s")
            )

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """One lazily (re)opened connection per server address."""

    def __init__(
        self,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        sasl: SaslPlain | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.sasl = sasl
        self.tls = tls
        self._connections: dict[tuple[str, int], RpcConnection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[RpcConnection]] = {}

    async def get(self, host: str, port: int) -> RpcConnection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is not None and connection.is_open:
            return connection
        waiting = self._connecting.get(key)
        if waiting is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[RpcConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            connection = await RpcConnection.connect(
                host, port, connect_timeout=self.connect_timeout, sasl=self.sasl, tls=self.tls
            )
            self._connections[key] = connection
            future.set_result(connection)
            return connection
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # mark retrieved: nobody else may be waiting
            raise
        finally:
            del self._connecting[key]

    async def request(
        self, host: str, port: int, api_key: ApiKey, message: Message, *, timeout: float | None = None
    ) -> Any:
        """Send one request on the pooled connection (reopened first if it broke).

        A request that was sent and then lost with its connection is not resent here: only the caller
        knows whether it is safe to repeat.
        """
        connection = await self.get(host, port)
        return await connection.request(
            api_key, message, timeout=timeout if timeout is not None else self.request_timeout
        )

    async def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


__all__ = ["ConnectionPool", "FlussError", "RpcConnection", "SaslPlain"]
