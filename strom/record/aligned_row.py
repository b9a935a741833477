"""Fluss's AlignedRow (BinaryRow layout) for the scalar types a log batch's statistics carry.

Layout, all little-endian: a null bit set (8 header bits, then one bit per field, rounded up to whole
8-byte words), one 8-byte slot per field, then a variable part. Fixed-width values sit in their slot;
strings of at most 7 bytes are inlined in the slot (bytes first, top byte = 0x80 | length), longer
ones live in the variable part (slot = offset << 32 | length, data padded to 8 bytes). Non-compact
decimals (precision > 18) take 16 bytes of the variable part (slot = offset << 32 | byte count);
non-compact timestamps (precision > 3) keep their epoch millis in 8 bytes of the variable part and
the nano-of-millisecond in the slot's low half.

Values are given and returned in the comparable form `batch_statistics` uses: ints for the integer
types, DATE (days), TIME (millis), compact DECIMAL and non-compact DECIMAL (unscaled) and TIMESTAMP
(nanoseconds since the epoch); floats; bools; strs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from strom.common.errors import CorruptRecordError
from strom.record.values import COMPACT_DECIMAL_MAX_PRECISION, unscaled_from_bytes, unscaled_to_bytes

__all__ = ["decode_aligned_row", "encode_aligned_row", "supports_statistics"]

Buffer = bytes | bytearray | memoryview

_HEADER_BITS = 8
_MAX_INLINE = 7
_NON_COMPACT_DECIMAL_SIZE = 16
_NANOS_PER_MILLI = 1_000_000
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_SLOT_FORMAT = {8: "<b", 16: "<h", 32: "<i", 64: "<q"}


def null_bits_size(arity: int) -> int:
    return ((arity + 63 + _HEADER_BITS) // 64) * 8


def supports_statistics(arrow_type: pa.DataType) -> bool:
    """The Arrow types of the columns Fluss collects statistics for."""
    return (
        pa.types.is_boolean(arrow_type)
        or (pa.types.is_integer(arrow_type) and pa.types.is_signed_integer(arrow_type))
        or pa.types.is_float32(arrow_type)
        or pa.types.is_float64(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_decimal128(arrow_type)
        or pa.types.is_date32(arrow_type)
        or pa.types.is_time(arrow_type)
        or pa.types.is_timestamp(arrow_type)
    )


def _compact_timestamp(arrow_type: pa.DataType) -> bool:
    return arrow_type.unit in ("s", "ms")  # precision <= 3


def _compact_decimal(arrow_type: pa.DataType) -> bool:
    return int(arrow_type.precision) <= COMPACT_DECIMAL_MAX_PRECISION


def encode_aligned_row(values: Sequence[Any], types: Sequence[pa.DataType]) -> bytes:
    """One AlignedRow of `values` (None = null) typed by `types`."""
    arity = len(types)
    bits = null_bits_size(arity)
    fixed = bytearray(bits + 8 * arity)
    var = bytearray()
    fixed_size = len(fixed)
    for i, (value, t) in enumerate(zip(values, types, strict=True)):
        slot = bits + 8 * i
        if value is None:
            bit = i + _HEADER_BITS
            fixed[bit >> 3] |= 1 << (bit & 7)
            continue
        if pa.types.is_boolean(t):
            fixed[slot] = 1 if value else 0
        elif pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_time(t):
            width = t.bit_width if pa.types.is_integer(t) else 32  # DATE and TIME are ints in Fluss
            struct.pack_into(_SLOT_FORMAT[width], fixed, slot, value)
        elif pa.types.is_float32(t):
            struct.pack_into("<f", fixed, slot, value)
        elif pa.types.is_float64(t):
            struct.pack_into("<d", fixed, slot, value)
        elif pa.types.is_string(t):
            data = value.encode("utf-8")
            if len(data) <= _MAX_INLINE:
                fixed[slot : slot + len(data)] = data
                fixed[slot + 7] = 0x80 | len(data)
            else:
                _U64.pack_into(fixed, slot, (fixed_size + len(var)) << 32 | len(data))
                var += data + bytes(-len(data) % 8)
        elif pa.types.is_decimal128(t):
            if _compact_decimal(t):
                _I64.pack_into(fixed, slot, value)
            else:
                data = unscaled_to_bytes(value)
                _U64.pack_into(fixed, slot, (fixed_size + len(var)) << 32 | len(data))
                var += data + bytes(_NON_COMPACT_DECIMAL_SIZE - len(data))
        elif pa.types.is_timestamp(t):
            millis, nanos = divmod(value, _NANOS_PER_MILLI)
            if _compact_timestamp(t):
                _I64.pack_into(fixed, slot, millis)
            else:
                _U64.pack_into(fixed, slot, (fixed_size + len(var)) << 32 | nanos)
                var += _I64.pack(millis)
        else:
            raise ValueError(f"no statistics for Arrow type {t}")
    return bytes(fixed + var)


def decode_aligned_row(buf: Buffer, begin: int, end: int, types: Sequence[pa.DataType]) -> list[Any]:
    """The values of the AlignedRow in buf[begin:end]; CorruptRecordError when a field points outside
    the row or the row is shorter than its fixed part."""
    arity = len(types)
    bits = null_bits_size(arity)
    size = end - begin
    if size < bits + 8 * arity:
        raise CorruptRecordError(f"statistics row of {size} bytes is shorter than its {arity} fields")
    view = memoryview(buf)[begin:end]
    out: list[Any] = []

    def var_part(offset: int, length: int) -> bytes:
        if offset < bits + 8 * arity or length < 0 or offset + length > size:
            raise CorruptRecordError(f"statistics row field points outside its {size} bytes")
        return bytes(view[offset : offset + length])

    for i, t in enumerate(types):
        bit = i + _HEADER_BITS
        if view[bit >> 3] & (1 << (bit & 7)):
            out.append(None)
            continue
        slot = bits + 8 * i
        if pa.types.is_boolean(t):
            out.append(bool(view[slot]))
        elif pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_time(t):
            width = t.bit_width if pa.types.is_integer(t) else 32
            out.append(struct.unpack_from(_SLOT_FORMAT[width], view, slot)[0])
        elif pa.types.is_float32(t):
            out.append(struct.unpack_from("<f", view, slot)[0])
        elif pa.types.is_float64(t):
            out.append(struct.unpack_from("<d", view, slot)[0])
        elif pa.types.is_string(t):
            raw = _U64.unpack_from(view, slot)[0]
            if raw >> 63:
                length = (raw >> 56) & 0x7F
                if length > _MAX_INLINE:
                    raise CorruptRecordError(f"statistics row: inline string of {length} bytes")
                data = bytes(view[slot : slot + length])
            else:
                data = var_part(raw >> 32, raw & 0xFFFFFFFF)
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError:
                raise CorruptRecordError("statistics row: a string bound is not UTF-8") from None
        elif pa.types.is_decimal128(t):
            if _compact_decimal(t):
                out.append(_I64.unpack_from(view, slot)[0])
            else:
                raw = _U64.unpack_from(view, slot)[0]
                length = raw & 0xFFFFFFFF
                if not 0 < length <= _NON_COMPACT_DECIMAL_SIZE:
                    raise CorruptRecordError(f"statistics row: decimal of {length} bytes")
                out.append(unscaled_from_bytes(var_part(raw >> 32, length)))
        elif pa.types.is_timestamp(t):
            if _compact_timestamp(t):
                out.append(_I64.unpack_from(view, slot)[0] * _NANOS_PER_MILLI)
            else:
                raw = _U64.unpack_from(view, slot)[0]
                nanos = raw & 0xFFFFFFFF
                if nanos >= _NANOS_PER_MILLI:
                    raise CorruptRecordError(f"statistics row: {nanos} nanoseconds of a millisecond")
                millis = _I64.unpack(var_part(raw >> 32, 8))[0]
                out.append(millis * _NANOS_PER_MILLI + nanos)
        else:
            raise CorruptRecordError(f"statistics for a column of Arrow type {t}, which Fluss never collects")
    return out
