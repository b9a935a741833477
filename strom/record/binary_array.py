"""Fluss BinaryArray and BinaryMap layouts, the bytes of ARRAY and MAP values inside a CompactedRow.

BinaryArray: int32 element count, a null bitset padded to 4-byte words, one fixed-size slot per
element (1, 2, 4 or 8 bytes by type), the fixed part rounded up to 8 bytes, then a variable part of
8-byte-aligned chunks. Variable-length elements hold `offset << 32 | length` in an 8-byte slot (offset
from the array start); strings and binaries of at most 7 bytes sit inline in the slot instead, with
`0x80 | length` in its top byte. Nested arrays, maps and rows always go to the variable part (rows as
CompactedRows). Non-compact decimals reserve 16 bytes; non-compact timestamps store their millis
(8 bytes) in the variable part and `offset << 32 | nano_of_milli` in the slot.

BinaryMap: int32 byte size of the key array, the key array, then the value array.
All integers are little-endian.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from strom.common.types import DataType, DataTypeRoot
from strom.record import values as conv

__all__ = ["ArrayCodec", "MapCodec", "codec_for_nested", "element_codec"]

Buffer = bytes | bytearray | memoryview

_R = DataTypeRoot
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_INLINE_MAX = 7
_INLINE_MARK = 1 << 63
_NON_COMPACT_DECIMAL_SIZE = 16

# Fixed-size element encodings: struct format of the slot.
_PRIMITIVE_FORMATS: dict[DataTypeRoot, str] = {
    _R.BOOLEAN: "?",
    _R.TINYINT: "b",
    _R.SMALLINT: "h",
    _R.INTEGER: "i",
    _R.DATE: "i",
    _R.TIME_WITHOUT_TIME_ZONE: "i",
    _R.FLOAT: "f",
    _R.BIGINT: "q",
    _R.DOUBLE: "d",
}
_VAR_BYTES_ROOTS = frozenset({_R.CHAR, _R.STRING, _R.BINARY, _R.BYTES})
_NESTED_ROOTS = frozenset({_R.ARRAY, _R.MAP, _R.ROW})


def _round_to_word(n: int) -> int:
    return (n + 7) & ~7


def _header_size(n: int) -> int:
    return 4 + ((n + 31) // 32) * 4


def _append_var(buf: bytearray, payload: bytes | bytearray | memoryview, reserve: int = 0) -> int:
    """Append `payload` to the variable part (word-aligned); returns the `offset << 32 | len` slot."""
    at = len(buf)
    size = len(payload)
    buf += payload
    buf += bytes(_round_to_word(max(size, reserve)) - size)
    return (at << 32) | size


def _bytes_slot(buf: bytearray, payload: bytes) -> int:
    if len(payload) <= _INLINE_MAX:
        return _INLINE_MARK | (len(payload) << 56) | int.from_bytes(payload, "little")
    return _append_var(buf, payload)


def _read_var_bytes(data: Buffer, slot_pos: int) -> Buffer:
    slot = _U64.unpack_from(data, slot_pos)[0]
    if slot & _INLINE_MARK:
        size = (slot >> 56) & 0x7F
        if size > _INLINE_MAX:
            raise ValueError(f"inline element length {size} exceeds {_INLINE_MAX}")
        return data[slot_pos : slot_pos + size]
    offset = slot >> 32
    size = slot & 0xFFFFFFFF
    if offset + size > len(data):
        raise ValueError(f"array element at {offset}+{size} overruns the {len(data)}-byte array")
    return data[offset : offset + size]


# An element writer stores one non-null value: (array buffer, slot position, value) -> None.
_Writer = Callable[[bytearray, int, Any], None]
# An element reader returns one non-null value: (array bytes, slot position) -> value.
_Reader = Callable[[Buffer, int], Any]


def element_codec(t: DataType) -> tuple[int, _Writer, _Reader]:
    """(slot size, writer, reader) for elements of type `t`."""
    root = t.root
    fmt = _PRIMITIVE_FORMATS.get(root)
    if fmt is not None:
        s = struct.Struct("<" + fmt)
        pack_into, unpack_from = s.pack_into, s.unpack_from
        if root is _R.DATE:
            return (
                4,
                lambda b, p, v: pack_into(b, p, conv.date_to_days(v)),
                (lambda d, p: conv.days_to_date(unpack_from(d, p)[0])),
            )
        if root is _R.TIME_WITHOUT_TIME_ZONE:
            return (
                4,
                lambda b, p, v: pack_into(b, p, conv.time_to_millis(v)),
                (lambda d, p: conv.millis_to_time(unpack_from(d, p)[0])),
            )
        return s.size, pack_into, lambda d, p: unpack_from(d, p)[0]
    if root in _VAR_BYTES_ROOTS:
        if root in (_R.CHAR, _R.STRING):
            return (
                8,
                lambda b, p, v: _U64.pack_into(b, p, _bytes_slot(b, v.encode())),
                (lambda d, p: str(_read_var_bytes(d, p), "utf-8")),
            )
        return (
            8,
            lambda b, p, v: _U64.pack_into(b, p, _bytes_slot(b, bytes(v))),
            (lambda d, p: bytes(_read_var_bytes(d, p))),
        )
    if root is _R.DECIMAL:
        precision, scale = t.precision or 10, t.scale or 0
        if precision <= conv.COMPACT_DECIMAL_MAX_PRECISION:
            return (
                8,
                lambda b, p, v: _I64.pack_into(b, p, conv.decimal_to_unscaled(v, precision, scale)),
                (lambda d, p: conv.unscaled_to_decimal(_I64.unpack_from(d, p)[0], scale)),
            )

        def write_big_decimal(b: bytearray, p: int, v: Any) -> None:
            raw = conv.unscaled_to_bytes(conv.decimal_to_unscaled(v, precision, scale))
            _U64.pack_into(b, p, _append_var(b, raw, _NON_COMPACT_DECIMAL_SIZE))

        def read_big_decimal(d: Buffer, p: int) -> Any:
            slot = _U64.unpack_from(d, p)[0]
            offset, size = slot >> 32, slot & 0xFFFFFFFF
            return conv.unscaled_to_decimal(conv.unscaled_from_bytes(d[offset : offset + size]), scale)

        return 8, write_big_decimal, read_big_decimal
    if root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
        utc = root is _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE
        if (t.precision or 0) <= conv.COMPACT_TIMESTAMP_MAX_PRECISION:
            return (
                8,
                lambda b, p, v: _I64.pack_into(b, p, conv.timestamp_to_parts(v)[0]),
                (lambda d, p: conv.timestamp_from_parts(_I64.unpack_from(d, p)[0], 0, utc)),
            )

        def write_timestamp(b: bytearray, p: int, v: Any) -> None:
            millis, nanos = conv.timestamp_to_parts(v)
            at = len(b)
            b += _I64.pack(millis)
            _U64.pack_into(b, p, (at << 32) | nanos)

        def read_timestamp(d: Buffer, p: int) -> Any:
            slot = _U64.unpack_from(d, p)[0]
            millis = _I64.unpack_from(d, slot >> 32)[0]
            return conv.timestamp_from_parts(millis, slot & 0xFFFFFFFF, utc)

        return 8, write_timestamp, read_timestamp
    if root in _NESTED_ROOTS:
        encode, decode = codec_for_nested(t)
        return (
            8,
            lambda b, p, v: _U64.pack_into(b, p, _append_var(b, encode(v))),
            (lambda d, p: decode(_read_var_bytes(d, p))),
        )
    raise ValueError(f"type {t} not supported in arrays")


def codec_for_nested(t: DataType) -> tuple[Callable[[Any], bytes], Callable[[Buffer], Any]]:
    """(encode, decode) between a Python value and the bytes of an ARRAY, MAP or ROW value."""
    if t.root is _R.ARRAY:
        array = ArrayCodec(t.element_type)  # type: ignore[arg-type]
        return array.encode, array.decode
    if t.root is _R.MAP:
        mapping = MapCodec(t.key_type, t.value_type)  # type: ignore[arg-type]
        return mapping.encode, mapping.decode
    if t.root is _R.ROW:
        from strom.record.compacted_row import NestedRowCodec  # circular: rows contain arrays

        row = NestedRowCodec(t)
        return row.encode, row.decode
    raise ValueError(f"{t} is not a nested type")


class ArrayCodec:
    """Python list <-> Fluss BinaryArray bytes for one element type."""

    __slots__ = ("_bulk", "_read", "_size", "_write", "element_type")

    def __init__(self, element_type: DataType) -> None:
        self.element_type = element_type
        self._size, self._write, self._read = element_codec(element_type)
        fmt = _PRIMITIVE_FORMATS.get(element_type.root)
        # Plain numeric arrays convert in one struct call when they hold no nulls.
        self._bulk = (
            fmt if fmt is not None and element_type.root not in (_R.DATE, _R.TIME_WITHOUT_TIME_ZONE) else None
        )

    def encode(self, values: Sequence[Any]) -> bytes:
        if not isinstance(values, Sequence) or isinstance(values, str | bytes):
            values = list(values)
        n = len(values)
        header = _header_size(n)
        size = self._size
        buf = bytearray(_round_to_word(header + size * n))
        _I32.pack_into(buf, 0, n)
        if self._bulk is not None and None not in values:
            struct.pack_into(f"<{n}{self._bulk}", buf, header, *values)
            return bytes(buf)
        write = self._write
        pos = header
        for i, v in enumerate(values):
            if v is None:
                buf[4 + (i >> 3)] |= 1 << (i & 7)
            else:
                write(buf, pos, v)
            pos += size
        return bytes(buf)

    def decode(self, data: Buffer) -> list[Any]:
        if len(data) < 4:
            raise ValueError(f"array of {len(data)} bytes has no header")
        n = _I32.unpack_from(data, 0)[0]
        header = _header_size(n)
        if n < 0 or _round_to_word(header + self._size * n) > len(data):
            raise ValueError(f"array of {n} elements does not fit in {len(data)} bytes")
        nulls = bytes(data[4:header])
        has_nulls = any(nulls)
        if self._bulk is not None:
            out = list(struct.unpack_from(f"<{n}{self._bulk}", data, header))
            if has_nulls:
                for i in range(n):
                    if nulls[i >> 3] & (1 << (i & 7)):
                        out[i] = None
            return out
        read = self._read
        size = self._size
        if not has_nulls:
            return [read(data, header + i * size) for i in range(n)]
        return [None if nulls[i >> 3] & (1 << (i & 7)) else read(data, header + i * size) for i in range(n)]


class MapCodec:
    """Python mapping (dict or sequence of pairs) <-> Fluss BinaryMap bytes; decodes to a list of
    (key, value) tuples, as pyarrow's to_pylist() shows maps."""

    __slots__ = ("_keys", "_values")

    def __init__(self, key_type: DataType, value_type: DataType) -> None:
        self._keys = ArrayCodec(key_type)
        self._values = ArrayCodec(value_type)

    def encode(self, mapping: Any) -> bytes:
        pairs = mapping.items() if hasattr(mapping, "items") else mapping
        keys: list[Any] = []
        values: list[Any] = []
        for k, v in pairs:
            if k is None:
                raise ValueError("map keys cannot be null")
            keys.append(k)
            values.append(v)
        key_bytes = self._keys.encode(keys)
        return _I32.pack(len(key_bytes)) + key_bytes + self._values.encode(values)

    def decode(self, data: Buffer) -> list[tuple[Any, Any]]:
        if len(data) < 4:
            raise ValueError(f"map of {len(data)} bytes has no header")
        key_size = _I32.unpack_from(data, 0)[0]
        if key_size < 0 or 4 + key_size > len(data):
            raise ValueError(f"map key array of {key_size} bytes overruns the {len(data)}-byte map")
        keys = self._keys.decode(data[4 : 4 + key_size])
        values = self._values.decode(data[4 + key_size :])
        if len(keys) != len(values):
            raise ValueError(f"map has {len(keys)} keys but {len(values)} values")
        return list(zip(keys, values, strict=True))
