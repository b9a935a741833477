"""Unsigned LEB128 varints as Fluss writes them (ints and longs as their two's-complement bits)."""

from __future__ import annotations

__all__ = [
    "encode_uvarint",
    "read_varint32",
    "read_varint64",
    "uvarint_size",
    "write_varint32",
    "write_varint64",
]

Buffer = bytes | bytearray | memoryview

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def encode_uvarint(value: int) -> bytes:
    """LEB128 of a non-negative int (callers mask negatives to 32 or 64 bits first)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uvarint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def write_varint32(out: bytearray, value: int) -> None:
    """Append a Java int: range-checked, negatives as their 32-bit pattern (5 bytes)."""
    if not _INT_MIN <= value <= _INT_MAX:
        raise OverflowError(f"{value} does not fit in a 32-bit int")
    value &= _M32
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint64(out: bytearray, value: int) -> None:
    """Append a Java long: range-checked, negatives as their 64-bit pattern (10 bytes)."""
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError(f"{value} does not fit in a 64-bit long")
    value &= _M64
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# The readers are unrolled: on the PK path they run for every multi-byte int, long and timestamp,
# and the unrolled form is about a third faster than a loop.


def read_varint32(buf: Buffer, pos: int) -> tuple[int, int]:
    """(signed 32-bit value, next position); at most 5 bytes. IndexError when truncated."""
    b = buf[pos]
    r = b & 127
    if b < 128:
        return r, pos + 1
    b = buf[pos + 1]
    r |= (b & 127) << 7
    if b < 128:
        return r, pos + 2
    b = buf[pos + 2]
    r |= (b & 127) << 14
    if b < 128:
        return r, pos + 3
    b = buf[pos + 3]
    r |= (b & 127) << 21
    if b < 128:
        return r, pos + 4
    b = buf[pos + 4]
    if b < 128:
        r = (r | (b << 28)) & _M32
        return (r - (1 << 32) if r > _INT_MAX else r), pos + 5
    raise ValueError("varint32 longer than 5 bytes")


def read_varint64(buf: Buffer, pos: int) -> tuple[int, int]:
    """(signed 64-bit value, next position); at most 10 bytes. IndexError when truncated."""
    b = buf[pos]
    r = b & 127
    if b < 128:
        return r, pos + 1
    b = buf[pos + 1]
    r |= (b & 127) << 7
    if b < 128:
        return r, pos + 2
    b = buf[pos + 2]
    r |= (b & 127) << 14
    if b < 128:
        return r, pos + 3
    b = buf[pos + 3]
    r |= (b & 127) << 21
    if b < 128:
        return r, pos + 4
    b = buf[pos + 4]
    r |= (b & 127) << 28
    if b < 128:
        return r, pos + 5
    b = buf[pos + 5]
    r |= (b & 127) << 35
    if b < 128:
        return r, pos + 6
    b = buf[pos + 6]
    r |= (b & 127) << 42
    if b < 128:
        return r, pos + 7
    b = buf[pos + 7]
    r |= (b & 127) << 49
    if b < 128:
        return r, pos + 8
    b = buf[pos + 8]
    r |= (b & 127) << 56
    if b < 128:
        return r, pos + 9
    b = buf[pos + 9]
    if b < 128:
        r = (r | (b << 63)) & _M64
        return (r - (1 << 64) if r > _LONG_MAX else r), pos + 10
    raise ValueError("varint64 longer than 10 bytes")
