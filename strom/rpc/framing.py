"""Fluss RPC framing on TCP (big-endian headers, protobuf bodies).

Request:  int32 length (= 8 + body) | int16 api_key | int16 api_version | int32 request_id | body
Response: int32 length (= 5 + body) | int8 type | int32 request_id | body
Type 0 carries the response message, type 1 an `ErrorResponse`. Fluss's type 2 (server failure)
frames have no request id and make the Rust client hang, so Strom never sends them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

REQUEST_HEADER = struct.Struct(">ihhi")  # length, api key, api version, request id
RESPONSE_HEADER = struct.Struct(">ibi")  # length, response type, request id
REQUEST_HEADER_BODY_OFFSET = 8  # bytes the request length counts besides the body
RESPONSE_HEADER_BODY_OFFSET = 5

RESPONSE_SUCCESS = 0
RESPONSE_ERROR = 1


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    request_id: int


def encode_request(api_key: int, api_version: int, request_id: int, body: bytes) -> bytes:
    return (
        REQUEST_HEADER.pack(len(body) + REQUEST_HEADER_BODY_OFFSET, api_key, api_version, request_id) + body
    )


def response_header(response_type: int, request_id: int, body_size: int) -> bytes:
    return RESPONSE_HEADER.pack(body_size + RESPONSE_HEADER_BODY_OFFSET, response_type, request_id)
