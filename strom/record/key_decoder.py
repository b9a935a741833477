"""Key decoders: the key columns' values back from the key bytes a lake format's key encoder made.

Lookup's insert_if_not_exists carries only encoded keys, and the row it inserts needs the key columns
(Fluss: `KeyDecoder.ofPrimaryKeyDecoder`). The Compacted encoding is split field by field elsewhere
(`strom.server.tablet.kv.key_rows`); this module inverts the two lake encodings of `key_encoder`:

* Iceberg: one column in Iceberg's bucket-transform bytes (int64 LE for ints and dates, micros for
  times and timestamps, big-endian unscaled decimals, UTF-8 strings). Like Fluss's, the encoding keeps
  no nanoseconds below a microsecond, so they are not restored.
* Paimon: a BinaryRow, read slot by slot with the same element codecs that wrote it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from strom.common.types import DataType, DataTypeRoot
from strom.record import values as conv
from strom.record.binary_array import element_codec
from strom.record.key_encoder import IcebergKeyEncoder, KeyEncoder, PaimonKeyEncoder

__all__ = ["KeyDecoder", "lake_key_decoder"]

_R = DataTypeRoot
_I64 = struct.Struct("<q")
KeyDecoder = Callable[[bytes], list[Any]]


def _iceberg_field_decoder(t: DataType) -> Callable[[bytes], Any]:
    root = t.root

    def long(b: bytes) -> int:
        return int(_I64.unpack(b)[0])

    if root is _R.INTEGER or root is _R.BIGINT:
        return long
    if root is _R.DATE:
        return lambda b: conv.days_to_date(long(b))
    if root is _R.TIME_WITHOUT_TIME_ZONE:
        return lambda b: conv.millis_to_time(long(b) // 1000)
    if root is _R.FLOAT:
        return lambda b: struct.unpack("<f", b)[0]
    if root is _R.DOUBLE:
        return lambda b: struct.unpack("<d", b)[0]
    if root is _R.TIMESTAMP_WITHOUT_TIME_ZONE:

        def timestamp(b: bytes) -> Any:
            millis, micros = divmod(long(b), 1000)
            return conv.timestamp_from_parts(millis, micros * 1000, False)

        return timestamp
    if root is _R.DECIMAL:
        scale = t.scale or 0
        return lambda b: conv.unscaled_to_decimal(conv.unscaled_from_bytes(b), scale)
    if root in (_R.STRING, _R.CHAR):
        return lambda b: b.decode()
    if root in (_R.BINARY, _R.BYTES):
        return bytes
    raise ValueError(f"type {t} is not supported by the Iceberg key decoder")


def _iceberg_decoder(key_type: Sequence[DataType]) -> KeyDecoder:
    field = _iceberg_field_decoder(key_type[0])
    return lambda key: [field(bytes(key))]


def _paimon_decoder(key_type: Sequence[DataType]) -> KeyDecoder:
    arity = len(key_type)
    header = ((arity + 63 + 8) // 64) * 8  # as PaimonKeyEncoder: null bits after the row-kind byte
    readers = [element_codec(t)[2] for t in key_type]

    def decode(key: bytes) -> list[Any]:
        out: list[Any] = []
        for i, read in enumerate(readers):
            bit = i + 8
            out.append(None if key[bit >> 3] >> (bit & 7) & 1 else read(key, header + 8 * i))
        return out

    return decode


def lake_key_decoder(encoder: KeyEncoder) -> KeyDecoder:
    """The inverse of a lake format's key encoder (Iceberg, Paimon); ValueError for other encoders."""
    if isinstance(encoder, IcebergKeyEncoder):
        return _iceberg_decoder(encoder.key_type)
    if isinstance(encoder, PaimonKeyEncoder):
        return _paimon_decoder(encoder.key_type)
    raise ValueError(f"no lake key decoder for {type(encoder).__name__}")
