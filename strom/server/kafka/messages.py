"""Kafka's request and response messages, through kio's generated data types.

kio has one module per API version, each with its own dataclasses. Handlers describe a response once,
as plain dicts and lists with the fields of the newest version they serve; `build` turns that into the
dataclasses of the version the client asked for, dropping fields the version does not have. The
framing (a 4-byte length before each message) and the header choice (flexible versions use request
header v2 and response header v1, except ApiVersions, whose response header is always v0) are here
too, so the listener only moves bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import io
import struct
import types
import typing
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9


_HEAD = struct.Struct(">hh")
_SIZE = struct.Struct(">i")


class UnsupportedVersion(Exception):
    """A request of an API or version this listener does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"API key {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request dataclass of that version


def parse_request(frame: bytes, served: dict[int, tuple[int, int]]) -> Request:
    """Decode one request frame (without its length prefix). Raises UnsupportedVersion for an API or
    version outside `served` (key -> (min, max)), and ValueError for bytes that do not decode."""
    api_key, api_version = _HEAD.unpack_from(frame, 0)
    span = served.get(api_key)
    if span is None or not span[0] <= api_version <= span[1]:
        correlation_id = _SIZE.unpack_from(frame, 4)[0] if len(frame) >= 8 else -1
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    schema = load_request_schema(api_key, api_version)
    header_type = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    header: Any
    header, size = entity_reader(header_type)(frame, 0)
    body, body_size = entity_reader(schema)(frame, size)
    if size + body_size != len(frame):
        raise ValueError(
            f"request of API key {api_key} v{api_version}: {len(frame) - size - body_size} bytes left over"
        )
    return Request(api_key, api_version, header.correlation_id, header.client_id, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A complete response frame (length prefix, header, body)."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    flexible = type(body).__flexible__ and api_key != ApiKey.API_VERSIONS
    if flexible:
        entity_writer(ResponseHeaderV1)(out, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(out, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def response(api_key: int, api_version: int, values: dict[str, Any]) -> Any:
    """The kio response of that version built from `values` (see `build`)."""
    return build(load_response_schema(api_key, api_version), values)


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type hint, has a default) of each field of a kio dataclass."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


def build(cls: Any, values: dict[str, Any]) -> Any:
    """An instance of kio dataclass `cls` from a dict: nested dataclasses from dicts, tuples of them
    from lists, error codes from ints, durations from milliseconds. Keys the class has no field for
    are dropped (older versions lack newer fields); fields without a value keep their default, or are
    null when they have none and may be."""
    kwargs: dict[str, Any] = {}
    for name, hint, has_default in _fields(cls):
        if name not in values:
            if has_default:
                continue
            if not _nullable(hint):
                raise ValueError(f"{cls.__qualname__} v{cls.__version__} needs a value for {name}")
            kwargs[name] = None  # a nullable field without a default: null unless given
            continue
        kwargs[name] = _convert(hint, values[name])
    return cls(**kwargs)


def _nullable(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin is tuple:
        element = typing.get_args(hint)[0]
        return tuple(_convert(element, v) for v in value)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(options[0], value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return build(typing.cast(type, hint), value)
    if hint is ErrorCode:
        return ErrorCode(int(value))
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta) and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value
