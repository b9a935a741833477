"""Views of length-delimited fields inside an encoded protobuf message, without copying them.

Protobuf's Python objects copy a `bytes` field each time it is read. The produce path wants the
records of a request as views of the request body it received, so it walks the (already parsed, so
well-formed) message for them here.
"""

from __future__ import annotations

from collections.abc import Iterator

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(message: memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start, data start, end) of each top-level field of `message`; for a
    length-delimited field the data is its contents, for the others its value."""
    pos, end = 0, len(message)
    while pos < end:
        start = pos
        key, pos = _varint(message, pos)
        wire_type = key & 7
        data = pos
        if wire_type == _VARINT:
            _, pos = _varint(message, pos)
        elif wire_type == _I64:
            pos += 8
        elif wire_type == _I32:
            pos += 4
        elif wire_type == _LEN:
            size, data = _varint(message, pos)
            pos = data + size
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
        if pos > end:
            raise ValueError("field runs past the end of the message")
        yield key >> 3, wire_type, start, data, pos


def length_delimited(message: memoryview, field_number: int) -> Iterator[memoryview]:
    """Every occurrence of length-delimited field `field_number` at the top level of `message`, in
    order, as views of `message`."""
    for number, wire_type, _, data, end in _fields(message):
        if number == field_number and wire_type == _LEN:
            yield message[data:end]


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def without_contents(message: memoryview, path: tuple[int, ...]) -> bytearray:
    """A copy of `message` in which every length-delimited field reached by the field numbers `path`
    (e.g. (4, 3): field 3 of every field-4 message) is present but empty. Lets protobuf parse a
    request without copying the large fields a handler reads as views of the original. Raises
    ValueError on anything it cannot walk (the caller then parses the original, which says why)."""
    out = bytearray()
    for number, wire_type, start, data, end in _fields(message):
        if number == path[0] and wire_type == _LEN:
            inner = b"" if len(path) == 1 else without_contents(message[data:end], path[1:])
            _, key_end = _varint(message, start)
            out += message[start:key_end]
            out += _varint_bytes(len(inner))
            out += inner
        else:
            out += message[start:end]
    return out
