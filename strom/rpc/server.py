"""Asyncio RPC server speaking the Fluss framing.

Frames are read continuously from a buffered `asyncio.Protocol` and each request runs as its own task,
so pipelined requests on one connection are answered as they complete (possibly out of order, which
the client allows). Every request gets an answer: a success frame or an error frame with a Fluss code.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.message import DecodeError, Message

from strom.common.errors import (
    AuthenticateError,
    CorruptMessageError,
    FlussError,
    NetworkError,
    UnsupportedVersionError,
)
from strom.common.supervision import TaskSet, supervise
from strom.rpc.api import ApiKey, ServerType, api_spec
from strom.rpc.encoded import EncodedResponse
from strom.rpc.framing import (
    REQUEST_HEADER,
    RESPONSE_ERROR,
    RESPONSE_SUCCESS,
    RequestHeader,
    response_header,
)
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.limits import MemoryBudget, RpcLimits
from strom.rpc.request_parse import parse_request

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestContext:
    """What a handler may want to know about the request besides its message."""

    api_version: int
    peer: str
    session: Session
    body: bytes | bytearray = b""  # the encoded request, for handlers that take views of its large fields


@dataclass(slots=True)
class Session:
    """Per-connection state: the listener it came through and who authenticated on it."""

    peer: str
    listener: str = ""
    principal: Any = None  # set by the guard: anonymous on PLAINTEXT, the SASL user after Authenticate
    authentication_failed: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.peer.rpartition(":")[0] or self.peer


class RequestObserver(Protocol):
    """Sees every answered request (`strom.metrics.requests.RequestMetrics`)."""

    def observe(self, api_key: int, seconds: float, failed: bool, request_bytes: int) -> None: ...


class RequestGuard(Protocol):
    """The security layer (`strom.security.layer.SecurityLayer`), called before and after handlers."""

    def requires_authentication(self, listener: str) -> bool: ...

    def authenticate(self, listener: str, mechanism: str, token: bytes) -> Any: ...

    def anonymous(self) -> Any: ...

    def check(self, key: ApiKey, request: Any, listener: str, principal: Any, host: str) -> None: ...

    def filter(
        self, key: ApiKey, request: Any, response: Any, listener: str, principal: Any, host: str
    ) -> None: ...


Handler = Callable[[Any, RequestContext], Awaitable["Message | EncodedResponse"]]

# While a server drains (a graceful stop), what a request is answered with instead of being served:
# called with the API key and the parsed request, it returns the (retriable) error to answer, or None to
# serve it anyway; called with None for the request, the error for one still running when the server
# closes. Fluss's clients take a retriable error as "ask the metadata again and retry".
Refusal = Callable[[ApiKey, Any], "FlussError | None"]


class RpcServer:
    """One listening socket serving a fixed set of API handlers for one server role."""

    def __init__(
        self,
        *,
        name: str,
        host: str,
        port: int,
        handlers: dict[ApiKey, Handler],
        server_type: ServerType | None,
        limits: RpcLimits | None = None,
        listener: str = "FLUSS",
        guard: RequestGuard | None = None,
        observer: RequestObserver | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.tls = tls  # the listener speaks TLS (SSL / SASL_SSL)
        self.host = host
        self._port = port
        self.handlers = dict(handlers)
        self.server_type = server_type
        self.limits = limits or RpcLimits()
        self.budget = MemoryBudget(self.limits.max_buffered_bytes)
        self.listener = listener
        self.guard = guard
        self.observer = observer
        self.sasl = guard is not None and guard.requires_authentication(listener)
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self.refusal: Refusal | None = None  # set by drain(): the server is stopping
        self.last_refused = 0.0  # loop time of the last request refused while draining
        self._sweeper: asyncio.Task[None] | None = None
        self._api_versions_body = self._build_api_versions()
        # what the socket is read into between large frames; one for all connections, as each read is
        # consumed before the loop reads again
        self.receive_buffer = bytearray(RECEIVE_BUFFER_BYTES)

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return self._server.sockets[0].getsockname()[1]
        return self._port

    def _build_api_versions(self) -> bytes:
        response = pb.ApiVersionsResponse()
        keys = {ApiKey.API_VERSIONS, *self.handlers}
        if self.sasl:
            keys.add(ApiKey.AUTHENTICATE)
        for key in sorted(keys):
            if key >= 9000:  # Strom-internal keys are not part of the Fluss handshake
                continue
            spec = api_spec(key)
            response.api_versions.add(
                api_key=int(key), min_version=spec.min_version, max_version=spec.max_version
            )
        if self.server_type is not None:
            response.server_type = int(self.server_type)
        return response.SerializeToString()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self.host,
            self._port,
            reuse_address=True,
            ssl=self.tls,
            ssl_handshake_timeout=self.limits.frame_timeout if self.tls is not None else None,
        )
        log.info(
            "%s listening on %s:%d (listener %s%s)",
            self.name,
            self.host,
            self.port,
            self.listener,
            ", TLS" if self.tls is not None else "",
        )
        self._sweeper = supervise(self._sweep, name=f"{self.name} idle connections")

    async def _sweep(self) -> None:
        """Closes idle connections and connections whose started frame stopped making progress."""
        limits = self.limits
        period = max(0.5, min(limits.idle_timeout, limits.frame_timeout) / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for connection in list(self._connections):
                reason = connection.expired(now, limits)
                if reason is not None:
                    log.warning(
                        "%s: closing the connection from %s: %s", self.name, connection.session.peer, reason
                    )
                    connection.abort()

    async def drain(self, refusal: Refusal, grace_s: float, finish: frozenset[ApiKey]) -> int:
        """The first step of a graceful stop: from now on requests are answered with `refusal`'s error
        (those it lets through are served), and the running requests of the `finish` APIs get up to
        `grace_s` to complete (others, such as long-polling fetches, are answered with an error when
        the server closes). Returns how many were still running then; close() answers those too.
        Without this a stop aborted the connections under its requests: a client whose request
        vanished with its connection could wait out its own timeout before retrying elsewhere."""
        self.refusal = refusal
        running = [
            task
            for connection in list(self._connections)
            for task, key in list(connection.running.items())
            if key in finish
        ]
        if not running:
            return 0
        _, pending = await asyncio.wait(running, timeout=grace_s)
        return len(pending)

    async def quiet(self, quiet_s: float, max_s: float) -> None:
        """Waits (at most `max_s`) until no request was refused for `quiet_s`: clients told to go
        elsewhere have asked for new metadata and gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_s
        while True:
            now = loop.time()
            wait = self.last_refused + quiet_s - now
            if wait <= 0 or now >= deadline:
                return
            await asyncio.sleep(min(wait, deadline - now))

    async def close(self) -> None:
        """Stops listening, answers every request still running with an error (after drain(): its
        refusal; otherwise a network error), then closes the connections once those answers are
        written (aborting those whose peer does not read them within a second)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is None:
            return
        self._server.close()
        if self.refusal is None:
            self.refusal = _shutting_down
        connections = list(self._connections)
        running: list[asyncio.Task[Any]] = []
        for connection in connections:
            running.extend(connection.tasks)
            connection.tasks.cancel()  # each answers its request as it ends (_handle)
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        for connection in connections:
            connection.close()
        try:
            await asyncio.wait_for(self._server.wait_closed(), 1.0)
        except TimeoutError:
            for connection in list(self._connections):
                connection.abort()
            await self._server.wait_closed()
        self._server = None


def _abandoned() -> NetworkError:
    return NetworkError("the server is shutting down; retry on another server")


def _shutting_down(key: ApiKey, request: Any) -> FlussError | None:
    """A stop without drain(): what runs is answered with a network error (retriable)."""
    return _abandoned() if request is None else None


# frames at least this large are received into a buffer of their own (see _Connection.frame)
DIRECT_FRAME_BYTES = 256 * 1024
RECEIVE_BUFFER_BYTES = 256 * 1024

# requests that cannot be understood at all: worth a line in the log (with the peer, not the payload)
_MALFORMED = (CorruptMessageError, UnsupportedVersionError)


class _Connection(asyncio.BufferedProtocol):
    def __init__(self, server: RpcServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.discard = 0  # bytes of an oversized frame still to skip
        # A large request body being received straight into a buffer of its own: appending megabytes to
        # `buffer` and slicing them out again cost two copies per frame on the produce path.
        self.frame: bytearray | None = None
        self.frame_filled = 0
        self.frame_header: RequestHeader | None = None
        # The transport reads the socket straight into `frame` while one is being received, otherwise
        # into the server's receive buffer (asyncio.BufferedProtocol): no copy between the socket and
        # a large body.
        self.reading_into_frame = False
        # one task per request in flight: held here until answered, an unexpected error of one logged
        self.tasks = TaskSet(f"{server.name} connection")
        self.running: dict[asyncio.Task[None], int] = {}  # the same tasks, with their API keys
        self.session = Session(peer="?", listener=server.listener)
        if server.guard is not None and not server.sasl:
            self.session.principal = server.guard.anonymous()
        # flow control (strom.rpc.limits): why reading is paused, and when the peer last made progress
        self.held = 0  # request bytes this connection holds against the server's budget
        self.writes_paused = False
        self.reading_paused = False
        self.last_request = self.last_data = time.monotonic()

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self.session.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        self.server.budget.forget(self)
        self.tasks.cancel()
        self._hold(-len(self.buffer))
        self.buffer.clear()
        if self.frame is not None:
            self._hold(-(REQUEST_HEADER.size + len(self.frame)))
            self.frame = None
        self.transport = None

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close after the answers already written are sent."""
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self.writes_paused = True  # the peer is not reading our answers
        self._update_reading()

    def resume_writing(self) -> None:
        self.writes_paused = False
        self._update_reading()

    # ---- flow control

    def _hold(self, size: int) -> None:
        if size:
            self.held += size
            if size > 0:
                self.server.budget.take(size)
            else:
                self.server.budget.release(-size)

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None:
            return
        budget = self.server.budget
        pause = (
            self.writes_paused
            or len(self.tasks) >= self.server.limits.max_pending_requests
            or (budget.exhausted and self.held > 0)
        )
        if pause and not self.reading_paused:
            self.reading_paused = True
            transport.pause_reading()
            if budget.exhausted:
                budget.wait(self, self._update_reading)
        elif not pause and self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    def expired(self, now: float, limits: RpcLimits) -> str | None:
        """Why the sweeper should close this connection, if it should."""
        if self.tasks or self.reading_paused:
            return None  # busy, or waiting on us: not the peer's fault
        if (self.buffer or self.frame is not None) and now - self.last_data > limits.frame_timeout:
            return f"a request frame made no progress for {limits.frame_timeout:.0f}s"
        if now - self.last_request > limits.idle_timeout:
            return f"no request for {limits.idle_timeout:.0f}s"
        return None

    def get_buffer(self, sizehint: int) -> memoryview:
        self.reading_into_frame = self.frame is not None and not self.discard
        if self.reading_into_frame:
            assert self.frame is not None
            return memoryview(self.frame)[self.frame_filled :]
        return memoryview(self.server.receive_buffer)

    def buffer_updated(self, nbytes: int) -> None:
        if not self.reading_into_frame:
            self.data_received(memoryview(self.server.receive_buffer)[:nbytes])
            return
        self.last_data = time.monotonic()
        self.frame_filled += nbytes
        assert self.frame is not None
        if self.frame_filled == len(self.frame):
            self._frame_complete()
        self._update_reading()

    def data_received(self, data: bytes | memoryview) -> None:
        """Bytes read from the socket into the receive buffer, consumed (copied to the connection
        buffer or a frame) before this returns; frames are cut from the connection buffer."""
        self.last_data = time.monotonic()
        if self.discard:
            skipped = min(self.discard, len(data))
            self.discard -= skipped
            data = data[skipped:]
            if not data:
                return
        if self.frame is not None:
            data = self._fill_frame(data)
            if not data:
                self._update_reading()
                return
        buffer = self.buffer
        buffer += data
        self._hold(len(data))
        pos = 0
        end = len(buffer)
        max_frame = self.server.limits.max_frame_size
        while end - pos >= 4:
            length = int.from_bytes(buffer[pos : pos + 4], "big", signed=True)
            if length < 8:
                log.warning(
                    "%s: malformed frame length %d from %s; closing",
                    self.server.name,
                    length,
                    self.session.peer,
                )
                del buffer[:pos]  # what was dispatched is held by its requests
                self.abort()
                return
            if length > max_frame:
                if end - pos < REQUEST_HEADER.size:
                    break
                _, key, _, request_id = REQUEST_HEADER.unpack_from(buffer, pos)
                available = end - pos - 4
                self.discard = length - available if available < length else 0
                consumed = min(length, available)
                pos += 4 + consumed
                self._hold(-(4 + consumed))  # skipped, not kept
                log.warning(
                    "%s: refused a %d-byte frame (api key %d) from %s",
                    self.server.name,
                    length,
                    key,
                    self.session.peer,
                )
                self._send_error(
                    request_id,
                    CorruptMessageError(
                        f"request frame of {length} bytes (api key {key}) exceeds the maximum frame "
                        f"size of {max_frame} bytes (rpc.max-frame-size)"
                    ),
                )
                continue
            if end - pos - 4 < length:
                if length >= DIRECT_FRAME_BYTES and end - pos >= REQUEST_HEADER.size:
                    self._start_frame(buffer, pos, end, length)
                    pos = end
                break
            _, key, version, request_id = REQUEST_HEADER.unpack_from(buffer, pos)
            body = bytes(buffer[pos + REQUEST_HEADER.size : pos + 4 + length])
            pos += 4 + length
            self.last_request = self.last_data
            self._dispatch(RequestHeader(key, version, request_id), body, 4 + length)
        if pos:
            del buffer[:pos]
        self._update_reading()

    def _start_frame(self, buffer: bytearray, pos: int, end: int, length: int) -> None:
        """Receive the rest of the frame at `pos` into its own body buffer. The whole buffer counts
        against the memory budget from now on (not only the bytes received so far): a peer that
        declares large frames and sends nothing more cannot make the server allocate past the budget."""
        _, key, version, request_id = REQUEST_HEADER.unpack_from(buffer, pos)
        start = pos + REQUEST_HEADER.size
        frame = bytearray(4 + length - REQUEST_HEADER.size)
        frame[: end - start] = memoryview(buffer)[start:end]
        self._hold(len(frame) - (end - start))  # what was received is held already
        self.frame, self.frame_filled = frame, end - start
        self.frame_header = RequestHeader(key, version, request_id)

    def _fill_frame(self, data: bytes | memoryview) -> bytes | memoryview:
        """Copy incoming bytes into the frame being received; dispatch it once complete. Returns what
        follows the frame in `data`."""
        frame = self.frame
        assert frame is not None
        n = min(len(frame) - self.frame_filled, len(data))
        memoryview(frame)[self.frame_filled : self.frame_filled + n] = memoryview(data)[:n]
        self.frame_filled += n
        if self.frame_filled < len(frame):
            return b""
        self._frame_complete()
        return data[n:]

    def _frame_complete(self) -> None:
        frame, header = self.frame, self.frame_header
        assert frame is not None and header is not None
        self.frame, self.frame_header, self.frame_filled = None, None, 0
        self.last_request = self.last_data
        self._dispatch(header, frame, REQUEST_HEADER.size + len(frame))

    # ---- request handling

    def _dispatch(self, header: RequestHeader, body: bytes | bytearray, size: int) -> None:
        """Handle a request in its own task; its bytes stay held until it is answered."""
        task = self.tasks.spawn(self._handle(header, body), name="rpc-request")
        self.running[task] = header.api_key
        task.add_done_callback(lambda t: self._done(t, size))

    def _done(self, task: asyncio.Task[None], size: int) -> None:
        self.running.pop(task, None)
        self._hold(-size)
        self._update_reading()

    async def _handle(self, header: RequestHeader, body: bytes | bytearray) -> None:
        server = self.server
        started = time.perf_counter()
        failed = True
        try:
            key = header.api_key
            if key == ApiKey.API_VERSIONS:
                self._send(RESPONSE_SUCCESS, header.request_id, server._api_versions_body)
                failed = False
                return
            try:
                spec = api_spec(key)
            except (KeyError, ValueError):
                raise UnsupportedVersionError(f"unknown API key {key}") from None
            if key == ApiKey.AUTHENTICATE and server.sasl:
                await self._authenticate(header, body)
                failed = self.session.authentication_failed
                return
            handler = server.handlers.get(ApiKey(key))
            if handler is None:
                raise UnsupportedVersionError(
                    f"API {ApiKey(key).name} ({key}) is not served by the {server.name}"
                )
            if not spec.min_version <= header.api_version <= spec.max_version:
                raise UnsupportedVersionError(
                    f"API {spec.key.name} version {header.api_version} is not supported "
                    f"(supported: {spec.min_version}..{spec.max_version})"
                )
            session = self.session
            if server.sasl and session.principal is None:
                raise AuthenticateError(
                    f"{spec.key.name} refused: the connection has not completed SASL authentication"
                )
            try:
                request = parse_request(spec, body)
            except DecodeError as e:
                raise CorruptMessageError(f"cannot parse {spec.request_type.__name__}: {e}") from None
            guard = server.guard
            if guard is not None:
                guard.check(spec.key, request, session.listener, session.principal, session.host)
            if server.refusal is not None:
                refused = server.refusal(spec.key, request)
                if refused is not None:
                    server.last_refused = asyncio.get_running_loop().time()
                    raise refused
            response = await handler(request, RequestContext(header.api_version, session.peer, session, body))
            if guard is not None:
                guard.filter(spec.key, request, response, session.listener, session.principal, session.host)
            if isinstance(response, EncodedResponse):
                self._send_pieces(header.request_id, response)
            else:
                self._send(RESPONSE_SUCCESS, header.request_id, response.SerializeToString())
            failed = False
        except asyncio.CancelledError:
            if server.refusal is not None:  # the server is closing under this request: say so
                try:
                    abandoned = server.refusal(ApiKey(header.api_key), None)
                except ValueError:  # an API key we do not know
                    abandoned = None
                self._send_error(header.request_id, abandoned or _abandoned())
            raise
        except FlussError as e:
            if isinstance(e, _MALFORMED):
                log.warning(
                    "%s: refused api key %d from %s: %s", server.name, header.api_key, self.session.peer, e
                )
            self._send_error(header.request_id, e)
        except Exception as e:
            log.exception("%s: unexpected error handling api key %d", server.name, header.api_key)
            self._send_error(header.request_id, e)
        finally:
            if server.observer is not None:
                server.observer.observe(header.api_key, time.perf_counter() - started, failed, len(body))

    async def _authenticate(self, header: RequestHeader, body: bytes | bytearray) -> None:
        """One SASL step. A failure is answered and then the connection is closed: nothing else is
        served on it."""
        session = self.session
        guard = self.server.guard
        assert guard is not None
        try:
            if session.principal is not None:
                raise AuthenticateError("the connection is already authenticated")
            request = pb.AuthenticateRequest()
            try:
                request.ParseFromString(body)
            except DecodeError as e:
                raise AuthenticateError(f"malformed Authenticate request: {e}") from None
            session.principal = guard.authenticate(session.listener, request.protocol, request.token)
        except AuthenticateError as e:
            session.authentication_failed = True
            log.warning("%s: SASL authentication from %s failed: %s", self.server.name, session.peer, e)
            self._send_error(header.request_id, e)
            if self.transport is not None:
                self.transport.close()  # flushes the answer first
            return
        self._send(RESPONSE_SUCCESS, header.request_id, pb.AuthenticateResponse().SerializeToString())

    def _send_error(self, request_id: int, error: BaseException) -> None:
        response = pb.ErrorResponse()
        if isinstance(error, FlussError):
            response.error_code = error.code
            response.error_message = error.message
        else:
            response.error_code = -1
            response.error_message = f"{type(error).__name__}: {error}"
        self._send(RESPONSE_ERROR, request_id, response.SerializeToString())

    def _send_pieces(self, request_id: int, response: EncodedResponse) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.writelines([response_header(RESPONSE_SUCCESS, request_id, response.size), *response.chunks])

    def _send(self, response_type: int, request_id: int, body: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        head = response_header(response_type, request_id, len(body))
        if len(body) > 65536:
            transport.writelines((head, body))
        else:
            transport.write(head + body)
