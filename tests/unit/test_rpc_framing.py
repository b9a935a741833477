"""Fluss framing byte for byte, and the asyncio server/client over a loopback socket."""

from __future__ import annotations

import asyncio
import hashlib
import random
import struct
from typing import Any

import pytest
import uvloop

from strom.common.errors import (
    CorruptMessageError,
    NetworkError,
    RequestTimeoutError,
    TableNotExistError,
    UnknownServerError,
    UnsupportedVersionError,
)
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import RpcConnection
from strom.rpc.framing import encode_request, response_header
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.limits import RpcLimits
from strom.rpc.server import Handler, RequestContext, RpcServer


def test_first_bytes_of_the_official_client_handshake() -> None:
    body = pb.ApiVersionsRequest(client_software_name="fluss-rust", client_software_version="1.0.0")
    frame = encode_request(1000, 0, 0, body.SerializeToString())
    expected = bytes.fromhex("0000001b03e8000000000000") + b"\x0a\x0afluss-rust\x12\x051.0.0"
    assert frame == expected


def test_empty_metadata_request_frame() -> None:
    assert encode_request(1012, 0, 1, pb.MetadataRequest().SerializeToString()) == bytes.fromhex(
        "0000000803f4000000000001"
    )


def test_response_header_layout() -> None:
    assert response_header(1, 7, 10) == struct.pack(">ibi", 15, 1, 7)


async def _serve(handlers: dict[ApiKey, Handler], **kwargs: Any) -> RpcServer:
    server = RpcServer(
        name="test server",
        host="127.0.0.1",
        port=0,
        handlers=handlers,
        server_type=ServerType.TABLET_SERVER,
        **kwargs,
    )
    await server.start()
    return server


def test_pipelined_requests_are_answered_out_of_order() -> None:
    async def list_tables(request: pb.ListTablesRequest, ctx: RequestContext) -> pb.ListTablesResponse:
        delay = int(request.database_name) / 1000
        await asyncio.sleep(delay)
        return pb.ListTablesResponse(table_name=[request.database_name])

    async def main() -> None:
        server = await _serve({ApiKey.LIST_TABLES: list_tables})
        connection = await RpcConnection.connect("127.0.0.1", server.port)
        finished: list[str] = []

        async def call(delay_ms: int) -> None:
            response = await connection.request(
                ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name=str(delay_ms))
            )
            assert list(response.table_name) == [str(delay_ms)]
            finished.append(str(delay_ms))

        await asyncio.gather(*(call(d) for d in (200, 10, 100, 0)))
        assert finished == ["0", "10", "100", "200"]  # all in flight at once on one connection
        assert connection.server_type == ServerType.TABLET_SERVER
        advertised = set(connection.api_versions)
        assert advertised == {ApiKey.API_VERSIONS, ApiKey.LIST_TABLES}
        connection.close()
        await server.close()

    asyncio.run(main())


def test_errors_are_error_frames_and_the_connection_survives() -> None:
    async def get_table_info(request: pb.GetTableInfoRequest, ctx: RequestContext) -> pb.GetTableInfoResponse:
        if request.table_path.table_name == "boom":
            raise RuntimeError("kaputt")
        raise TableNotExistError(
            f"Table '{request.table_path.database_name}.{request.table_path.table_name}' does not exist."
        )

    async def main() -> None:
        server = await _serve({ApiKey.GET_TABLE_INFO: get_table_info}, limits=RpcLimits(max_frame_size=1024))
        connection = await RpcConnection.connect("127.0.0.1", server.port)
        request = pb.GetTableInfoRequest()
        request.table_path.database_name = "db"
        request.table_path.table_name = "t"
        with pytest.raises(TableNotExistError, match=r"db\.t"):
            await connection.request(ApiKey.GET_TABLE_INFO, request)
        request.table_path.table_name = "boom"
        with pytest.raises(UnknownServerError, match="kaputt"):
            await connection.request(ApiKey.GET_TABLE_INFO, request)
        with pytest.raises(UnsupportedVersionError, match="not served"):
            await connection.request(ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name="x"))
        with pytest.raises(UnsupportedVersionError, match="unknown API key 4242"):
            await connection.request_raw(4242, b"", version=0)  # type: ignore[arg-type]
        with pytest.raises(UnsupportedVersionError, match="version 3"):
            await connection.request_raw(ApiKey.GET_TABLE_INFO, request.SerializeToString(), version=3)
        with pytest.raises(CorruptMessageError, match="GetTableInfoRequest"):
            await connection.request_raw(ApiKey.GET_TABLE_INFO, b"\xff\xff\xff", version=0)
        with pytest.raises(CorruptMessageError, match="exceeds the maximum frame size"):
            await connection.request_raw(ApiKey.GET_TABLE_INFO, b"\x00" * 5000, version=0)
        # still usable after all of that
        request.table_path.table_name = "t"
        with pytest.raises(TableNotExistError):
            await connection.request(ApiKey.GET_TABLE_INFO, request)
        connection.close()
        await server.close()

    asyncio.run(main())


def test_requests_time_out_and_closed_connections_fail_fast() -> None:
    async def slow(request: pb.ListTablesRequest, ctx: RequestContext) -> pb.ListTablesResponse:
        await asyncio.sleep(5)
        return pb.ListTablesResponse()

    async def main() -> None:
        server = await _serve({ApiKey.LIST_TABLES: slow})
        connection = await RpcConnection.connect("127.0.0.1", server.port)
        with pytest.raises(RequestTimeoutError):
            await connection.request(ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name="x"), timeout=0.2)
        pending = asyncio.ensure_future(
            connection.request(ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name="x"))
        )
        await asyncio.sleep(0.05)
        await server.close()
        # a closing server answers what still runs (a retriable network error) before it closes
        with pytest.raises(NetworkError, match="shutting down"):
            await pending
        with pytest.raises(NetworkError, match=r"lost|closed"):
            await connection.request(ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name="x"))

    asyncio.run(main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_large_and_small_frames_split_anywhere_are_received_whole(loop: str) -> None:
    """Large request bodies are read from the socket straight into a buffer of their own, small ones
    through the connection buffer: a stream of both, cut into pieces at every kind of place (inside a
    length, a header, a large body, with the next frames in the same piece), is received intact."""

    async def echo(request: pb.ListTablesRequest, ctx: RequestContext) -> pb.ListTablesResponse:
        name = request.database_name
        return pb.ListTablesResponse(table_name=[f"{len(name)}:{hashlib.sha256(name.encode()).hexdigest()}"])

    sizes = [10, 300_000, 5, 2_000_000, 1, 70_000, 1_000_000, 3]

    def names(connection: int) -> list[str]:
        return [random.Random(connection * 100 + i).choice("abcdefgh") * n for i, n in enumerate(sizes)]

    def stream(connection: int) -> bytes:
        requests = [pb.ListTablesRequest(database_name=n) for n in names(connection)]
        return b"".join(
            encode_request(ApiKey.LIST_TABLES, 0, i, r.SerializeToString()) for i, r in enumerate(requests)
        )

    rng = random.Random(7)

    async def main() -> None:
        server = await _serve({ApiKey.LIST_TABLES: echo})
        # two connections sending at once: they share the server's receive buffer
        connections = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        streams = [stream(c) for c in range(2)]
        positions = [0, 0]
        while any(pos < len(s) for pos, s in zip(positions, streams, strict=True)):
            for c, (_, writer) in enumerate(connections):
                step = rng.choice([1, 3, 7, 4096, 65_536, 300_001, 1_500_000])
                writer.write(streams[c][positions[c] : positions[c] + step])
                positions[c] += step
            await asyncio.gather(*(writer.drain() for _, writer in connections))
            await asyncio.sleep(0)
        for c, (reader, writer) in enumerate(connections):
            answers = {}
            for _ in sizes:
                length, kind, request_id = struct.unpack(">ibi", await reader.readexactly(9))
                assert kind == 0
                answers[request_id] = pb.ListTablesResponse.FromString(await reader.readexactly(length - 5))
            for i, n in enumerate(names(c)):
                assert list(answers[i].table_name) == [f"{len(n)}:{hashlib.sha256(n.encode()).hexdigest()}"]
            writer.close()
        await server.close()

    if loop == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())
