"""The Kafka listener's sockets: frames in, one request at a time per connection, frames out.

Kafka clients expect the answers of one connection in the order of their requests, and a broker
handles one request of a connection at a time (it mutes the channel meanwhile); so does this
listener, while connections run side by side. Frames larger than the RPC server's
`max_frame_size` close the connection, as a broker does with `socket.request.max.bytes`; so do
frames that do not decode, after a log line. A request of an API or version that is not served
closes the connection too, except ApiVersions, which is answered in version 0 with
UNSUPPORTED_VERSION and the versions served (Kafka's rule, so the client can retry lower).

On a listener mapped to SSL or SASL_SSL the connection is TLS, with the server's `security.ssl.*` key
store (strom/security/tls.py), as on Fluss listeners. On a listener mapped to SASL or SASL_SSL a
connection must
authenticate with SaslHandshake v1 and SaslAuthenticate before anything but ApiVersions is answered,
as a Kafka broker requires; the PLAIN tokens are checked against the listener's users by the tablet
server's security layer, the one the Fluss listeners use. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED and the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from typing import Any

from strom.common.errors import AuthenticateError, FlussError
from strom.common.supervision import TaskSet
from strom.rpc.limits import RpcLimits
from strom.rpc.server import RequestObserver, Session
from strom.security.acl import ANONYMOUS
from strom.security.layer import SecurityLayer
from strom.security.sasl import PLAIN
from strom.server.kafka import errors as kafka
from strom.server.kafka.broker import SERVED_VERSIONS, Broker, api_versions_response
from strom.server.kafka.messages import (
    ApiKey,
    UnsupportedVersion,
    encode_response,
    parse_request,
    response,
)

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Metrics keys of Kafka requests: Kafka's key plus this, apart from Fluss's keys (1000 and up)
KAFKA_METRIC_KEY_BASE = 20000
# what a connection may ask before it authenticated on a SASL listener
_BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_MECHANISM = "kafka_sasl_mechanism"
_FAILED_AUTHENTICATION_DELAY_S = 0.1


class KafkaListener:
    def __init__(
        self,
        *,
        name: str,
        host: str,
        port: int,
        broker: Broker,
        limits: RpcLimits,
        observer: RequestObserver | None = None,
        listener: str = "KAFKA",
        security: SecurityLayer | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.tls = tls
        self.listener = listener
        self.security = security
        # SASL before anything else on a SASL listener; elsewhere callers are anonymous, as on Fluss's
        self.requires_sasl = security is not None and security.requires_authentication(listener)
        self.host = host
        self._port = port
        self.broker = broker
        self.limits = limits
        self.observer = observer
        self._server: asyncio.Server | None = None
        self._connections = TaskSet(f"{name} Kafka connections")
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept,
            self.host,
            self._port,
            ssl=self.tls,
            ssl_handshake_timeout=self.limits.frame_timeout if self.tls is not None else None,
        )
        log.info(
            "%s serves the Kafka protocol on %s:%d%s",
            self.name,
            self.host,
            self.port,
            " (TLS)" if self.tls is not None else "",
        )

    async def drain(self, refusal: Any, grace_s: float, finish: frozenset[Any]) -> int:
        """The listener group's graceful stop step (RpcServer.drain). Kafka requests are not refused
        while the server drains: a Kafka client learns of the new leaders from NOT_LEADER_OR_FOLLOWER
        answers once the replicas moved, and close() ends the connections."""
        return 0

    async def quiet(self, quiet_s: float, max_s: float) -> None:
        """Nothing to wait for: drain() refuses no Kafka request (RpcServer.quiet)."""

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._connections.close()
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def _sasl(self) -> dict[int, Any]:
        return {
            ApiKey.SASL_HANDSHAKE: self._sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self._sasl_authenticate,
        }

    async def _sasl_handshake(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        if not self.requires_sasl or session.principal is not None:
            return {"error_code": kafka.ILLEGAL_SASL_STATE, "mechanisms": []}
        if request.mechanism.upper() != PLAIN:
            return {"error_code": kafka.UNSUPPORTED_SASL_MECHANISM, "mechanisms": [PLAIN]}
        session.attributes[_MECHANISM] = PLAIN
        return {"error_code": kafka.NONE, "mechanisms": [PLAIN]}

    async def _sasl_authenticate(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        mechanism = session.attributes.get(_MECHANISM)
        if mechanism is None or session.principal is not None or self.security is None:
            session.authentication_failed = True  # out of order: answered, then closed
            return {
                "error_code": kafka.ILLEGAL_SASL_STATE,
                "error_message": "SaslAuthenticate needs a SaslHandshake first, once per connection",
                "auth_bytes": b"",
            }
        try:
            session.principal = self.security.authenticate(self.listener, mechanism, request.auth_bytes)
        except AuthenticateError as e:
            log.warning("Kafka SASL authentication from %s failed: %s", session.peer, e.message)
            session.authentication_failed = True
            return {
                "error_code": kafka.SASL_AUTHENTICATION_FAILED,
                "error_message": e.message,
                "auth_bytes": b"",
            }
        return {"error_code": kafka.NONE, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.spawn(self._serve(reader, writer), name="kafka-connection")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        session = Session(peer=f"{peer[0]}:{peer[1]}" if peer else "?", listener=self.listener)
        if not self.requires_sasl:
            session.principal = ANONYMOUS
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readexactly(4), self.limits.idle_timeout)
                except (asyncio.IncompleteReadError, TimeoutError):
                    return
                (size,) = _SIZE.unpack(head)
                if size < 8 or size > self.limits.max_frame_size:
                    log.warning(
                        "closing Kafka connection from %s: frame of %d bytes (limit %d)",
                        session.peer,
                        size,
                        self.limits.max_frame_size,
                    )
                    return
                frame = await asyncio.wait_for(reader.readexactly(size), self.limits.frame_timeout)
                answer = await self._answer(frame, session)
                if answer is False:
                    return
                if isinstance(answer, bytes):
                    writer.write(answer)
                    await writer.drain()
                if session.authentication_failed:
                    # Kafka closes the connection after a failed SaslAuthenticate, 100 ms later
                    # (connection.failed.authentication.delay.ms): clients read the answer first, and
                    # password guessing slows down
                    await asyncio.sleep(_FAILED_AUTHENTICATION_DELAY_S)
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, frame: bytes, session: Session) -> bytes | bool | None:
        """The response frame, None when none is due (acks=0), False to close the connection."""
        started = time.monotonic()
        try:
            request = parse_request(frame, SERVED_VERSIONS)
        except UnsupportedVersion as e:
            if e.api_key == ApiKey.API_VERSIONS:
                body = response(ApiKey.API_VERSIONS, 0, api_versions_response(kafka.UNSUPPORTED_VERSION))
                return encode_response(ApiKey.API_VERSIONS, 0, e.correlation_id, body)
            log.warning("closing Kafka connection from %s: %s", session.peer, e)
            return False
        except Exception as e:  # kio raises assorted errors for bytes that do not decode
            log.warning("closing Kafka connection from %s: undecodable request: %r", session.peer, e)
            return False
        failed = False
        session.attributes["kafka_client_id"] = request.client_id
        if session.principal is None and request.api_key not in _BEFORE_LOGIN:
            log.warning(
                "closing Kafka connection from %s: API key %d before SASL authentication on listener %s",
                session.peer,
                request.api_key,
                self.listener,
            )
            return False
        try:
            handler = self._sasl.get(request.api_key) or self.broker.handlers[request.api_key]
            values: Any = await handler(request.body, request.api_version, session)
            if values is None:
                return None
            body = response(request.api_key, request.api_version, values)
            return encode_response(request.api_key, request.api_version, request.correlation_id, body)
        except FlussError as e:
            # a failure the handler did not place in a field (the coordinator is unreachable, say):
            # Kafka has no request-level error in most responses, so the connection closes and the
            # client retries elsewhere
            log.warning("Kafka request %d from %s failed: %s", request.api_key, session.peer, e)
            failed = True
            return False
        except Exception:
            log.exception("Kafka request %d from %s failed", request.api_key, session.peer)
            failed = True
            return False
        finally:
            if self.observer is not None:
                self.observer.observe(
                    KAFKA_METRIC_KEY_BASE + request.api_key, time.monotonic() - started, failed, len(frame)
                )
