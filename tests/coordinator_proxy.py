"""TCP proxies on loopback in front of a cluster's servers; one of them cuts connections at one moment.

A proxy reads the Fluss frames going both ways (requests: length, api key, version, request id;
responses: length, type, request id), so it knows which answer belongs to which API. Every proxy
rewrites the server addresses in Metadata answers to the proxies' (clients also learn the coordinator
from tablet servers' answers), so a client that bootstrapped through them stays behind them. The
proxy with `cut_after`, right after it passed on an answer to that API, closes both sides and refuses
new connections for `refuse_seconds`: the client got its answer, and its next call finds no server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from strom.rpc.api import ApiKey
from strom.rpc.framing import (
    REQUEST_HEADER,
    RESPONSE_HEADER,
    RESPONSE_HEADER_BODY_OFFSET,
    RESPONSE_SUCCESS,
)
from strom.rpc.gen import fluss_api_pb2 as pb


class CuttingProxy:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        cut_after: ApiKey | None = None,
        refuse_seconds: float = 1.0,
        rewrite: dict[tuple[str, int], int] | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.cut_after = cut_after
        self.refuse_seconds = refuse_seconds
        # (host, port) of a server -> the port of the proxy in front of it, shared by all proxies
        self.rewrite = rewrite if rewrite is not None else {}
        self.cuts = 0  # answers to `cut_after` passed on, each followed by a cut
        self.refused = 0  # connections refused while the coordinator "was gone"
        self._refuse_until = 0.0
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.rewrite[self.upstream] = self.port
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def close(self) -> None:
        """Close the listener and every connection; the pumps then end on their own (cancelling a
        start_server callback task makes asyncio log an error)."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._pumps:
            await asyncio.wait(list(self._pumps), timeout=5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        api_of: dict[int, int] = {}  # request id -> api key, for the answers
        down = asyncio.current_task()
        assert down is not None
        self._pumps.add(down)
        up = asyncio.create_task(self._requests(reader, up_writer, api_of))
        self._pumps.add(up)
        try:
            await self._responses(up_reader, writer, api_of)
        finally:
            up.cancel()
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)
            self._pumps.discard(up)
            self._pumps.discard(down)

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_of: dict[int, int]
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readexactly(REQUEST_HEADER.size)
                length, api_key, _, request_id = REQUEST_HEADER.unpack(head)
                body = await reader.readexactly(length - (REQUEST_HEADER.size - 4))
                api_of[request_id] = api_key
                writer.write(head + body)
                await writer.drain()

    async def _responses(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_of: dict[int, int]
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readexactly(RESPONSE_HEADER.size)
                length, response_type, request_id = RESPONSE_HEADER.unpack(head)
                body = await reader.readexactly(length - RESPONSE_HEADER_BODY_OFFSET)
                api_key = api_of.pop(request_id, None)
                if api_key == ApiKey.GET_METADATA and response_type == RESPONSE_SUCCESS:
                    body = self._through_me(body)
                    head = RESPONSE_HEADER.pack(
                        len(body) + RESPONSE_HEADER_BODY_OFFSET, response_type, request_id
                    )
                writer.write(head + body)
                await writer.drain()
                if self.cut_after is not None and api_key == self.cut_after:
                    self.cuts += 1
                    self._refuse_until = time.monotonic() + self.refuse_seconds
                    return  # the caller closes both sides: the answer is out, nothing more is

    def _through_me(self, body: bytes) -> bytes:
        metadata = pb.MetadataResponse()
        metadata.ParseFromString(body)
        nodes = list(metadata.tablet_servers)
        if metadata.HasField("coordinator_server"):
            nodes.append(metadata.coordinator_server)
        for node in nodes:
            port = self.rewrite.get((node.host, node.port))
            if port is not None:
                node.host, node.port = "127.0.0.1", port
                node.ClearField("listeners")
        return metadata.SerializeToString()
