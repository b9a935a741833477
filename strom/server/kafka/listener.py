"""The Kafka listener's sockets: frames in, one request at a time per connection, frames out.

Kafka clients expect the answers of one connection in the order of their requests, and a broker
handles one request of a connection at a time (it mutes the channel meanwhile); so does this
listener, while connections run side by side. Frames larger than the RPC server's
`max_frame_size` close the connection, as a broker does with `socket.request.max.bytes`; so do
frames that do not decode, after a log line. A request of an API or version that is not served
closes the connection too, except ApiVersions, which is answered in version 0 with
UNSUPPORTED_VERSION and the versions served (Kafka's rule, so the client can retry lower).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from strom.common.errors import FlussError
from strom.common.supervision import TaskSet
from strom.rpc.limits import RpcLimits
from strom.rpc.server import RequestObserver, Session
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
    ) -> None:
        self.name = name
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
        self._server = await asyncio.start_server(self._accept, self.host, self._port)
        log.info("%s serves the Kafka protocol on %s:%d", self.name, self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._connections.close()
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.spawn(self._serve(reader, writer), name="kafka-connection")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        session = Session(peer=f"{peer[0]}:{peer[1]}" if peer else "?", listener="KAFKA")
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
        try:
            handler = self.broker.handlers[request.api_key]
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
