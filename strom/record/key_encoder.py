"""Key encoders: the bytes of primary keys, lookup keys and bucket keys.

* Compacted (no lake format, Lance): the CompactedRow field encodings concatenated, no null header.
* Iceberg: exactly one key column, encoded as Iceberg's bucket transform hashes it (ints and dates as
  int64 LE, times and timestamps as int64 micros, decimals as unscaled big-endian, strings as UTF-8).
* Paimon: a Paimon BinaryRow (row-kind byte and null bits padded to 8-byte words, then one 8-byte slot
  per field; strings of up to 7 bytes inline, longer ones in an 8-byte-aligned variable part).

Which encoder a table uses follows the Fluss clients (see `primary_key_encoder`, `bucket_key_encoder`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strom.common.types import DataType, DataTypeRoot
from strom.record import values as conv
from strom.record.binary_array import element_codec
from strom.record.compacted_row import compile_key_encoder

__all__ = [
    "CompactedKeyEncoder",
    "IcebergKeyEncoder",
    "KeyEncoder",
    "PaimonKeyEncoder",
    "RowKeyEncoder",
    "bucket_key_encoder",
    "key_encoder_for",
    "primary_key_encoder",
]

_R = DataTypeRoot
_I64 = struct.Struct("<q")


class KeyEncoder(Protocol):
    def encode(self, key_values: Sequence[Any]) -> bytes:
        """Encode the key columns' values, in key order."""
        ...


class CompactedKeyEncoder:
    """CompactedRow field encodings with a zero-width null header; null keys are rejected."""

    __slots__ = ("encode", "key_type")

    def __init__(self, key_type: Sequence[DataType]) -> None:
        self.key_type = tuple(key_type)
        for t in self.key_type:
            if t.root is _R.MAP:
                raise ValueError(f"cannot use {t} as a key column type")
        self.encode: Callable[[Sequence[Any]], bytes] = compile_key_encoder(self.key_type)


def _iceberg_field_encoder(t: DataType) -> Callable[[Any], bytes]:
    root = t.root
    pack_long = _I64.pack
    if root is _R.INTEGER or root is _R.BIGINT:
        return pack_long
    if root is _R.DATE:
        return lambda v: pack_long(conv.date_to_days(v))
    if root is _R.TIME_WITHOUT_TIME_ZONE:
        return lambda v: pack_long(conv.time_to_millis(v) * 1000)
    if root is _R.FLOAT:
        return struct.Struct("<f").pack
    if root is _R.DOUBLE:
        return struct.Struct("<d").pack
    if root is _R.TIMESTAMP_WITHOUT_TIME_ZONE:

        def micros(v: Any) -> bytes:
            millis, nanos = conv.timestamp_to_parts(v)
            return pack_long(millis * 1000 + nanos // 1000)

        return micros
    if root is _R.DECIMAL:
        precision, scale = t.precision or 10, t.scale or 0
        return lambda v: conv.unscaled_to_bytes(conv.decimal_to_unscaled(v, precision, scale))
    if root in (_R.STRING, _R.CHAR):
        return lambda v: v.encode()
    if root in (_R.BINARY, _R.BYTES):
        return bytes
    if root in (_R.ARRAY, _R.MAP):
        raise ValueError(f"{t} cannot be used as a bucket key: bucket keys must be scalar types")
    raise ValueError(f"type {t} is not supported by the Iceberg key encoder")


class IcebergKeyEncoder:
    """One key column, encoded the way Iceberg's bucket transform hashes it."""

    __slots__ = ("_encode_field", "key_type")

    def __init__(self, key_type: Sequence[DataType]) -> None:
        self.key_type = tuple(key_type)
        if len(self.key_type) != 1:
            raise ValueError(
                f"key fields must have exactly one field for iceberg format, got {len(self.key_type)}"
            )
        self._encode_field = _iceberg_field_encoder(self.key_type[0])

    def encode(self, key_values: Sequence[Any]) -> bytes:
        if len(key_values) != 1:
            raise ValueError(f"expected 1 key value, got {len(key_values)}")
        v = key_values[0]
        if v is None:
            raise ValueError("Iceberg key columns do not support null values")
        try:
            return self._encode_field(v)
        except (TypeError, AttributeError, OverflowError, struct.error) as e:
            raise ValueError(f"cannot encode key {v!r}: {e}") from e


_PAIMON_SUPPORTED = frozenset(
    {
        _R.CHAR,
        _R.STRING,
        _R.BOOLEAN,
        _R.BINARY,
        _R.BYTES,
        _R.DECIMAL,
        _R.TINYINT,
        _R.SMALLINT,
        _R.INTEGER,
        _R.DATE,
        _R.TIME_WITHOUT_TIME_ZONE,
        _R.BIGINT,
        _R.FLOAT,
        _R.DOUBLE,
        _R.TIMESTAMP_WITHOUT_TIME_ZONE,
        _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
    }
)


class PaimonKeyEncoder:
    """A Paimon BinaryRow of the key columns, row kind INSERT (0)."""

    __slots__ = ("_fixed_size", "_header", "_writers", "key_type")

    def __init__(self, key_type: Sequence[DataType]) -> None:
        self.key_type = tuple(key_type)
        for t in self.key_type:
            if t.root not in _PAIMON_SUPPORTED:
                raise ValueError(f"type {t} is not supported by the Paimon BinaryRow key encoder")
        arity = len(self.key_type)
        # The null bitset also carries the 8-bit row-kind header, in whole 8-byte words.
        self._header = ((arity + 63 + 8) // 64) * 8
        self._fixed_size = self._header + 8 * arity
        # Fixed-width values go at the start of their (zeroed) 8-byte slot, variable-length ones follow
        # the BinaryArray slot rules, so the array element writers produce exactly Paimon's bytes.
        self._writers = [element_codec(t)[1] for t in self.key_type]

    def encode(self, key_values: Sequence[Any]) -> bytes:
        if len(key_values) != len(self._writers):
            raise ValueError(f"expected {len(self._writers)} key values, got {len(key_values)}")
        buf = bytearray(self._fixed_size)
        pos = self._header
        try:
            for i, (write, v) in enumerate(zip(self._writers, key_values, strict=True)):
                if v is None:
                    bit = i + 8
                    buf[bit >> 3] |= 1 << (bit & 7)
                else:
                    write(buf, pos, v)
                pos += 8
        except (TypeError, AttributeError, OverflowError, struct.error) as e:
            raise ValueError(f"cannot encode key {key_values!r}: {e}") from e
        return bytes(buf)


@dataclass(frozen=True, slots=True)
class RowKeyEncoder:
    """A key encoder bound to the key columns' positions in a full row."""

    encoder: KeyEncoder
    key_indexes: tuple[int, ...]

    def encode_key(self, row: Sequence[Any]) -> bytes:
        """Encode the key of a full row (values for every column of the row type)."""
        return self.encoder.encode([row[i] for i in self.key_indexes])

    def encode(self, key_values: Sequence[Any]) -> bytes:
        """Encode key values given in key order."""
        return self.encoder.encode(key_values)


def _lake_format(lake_format: str | None) -> str | None:
    if lake_format is None:
        return None
    name = lake_format.strip().lower()
    if name not in ("paimon", "iceberg", "lance", "hudi", "delta"):
        raise ValueError(f"unknown datalake format {lake_format!r}")
    return name


def _key_type(row_type: Sequence[DataType], key_indexes: Sequence[int]) -> list[DataType]:
    return [row_type[i] for i in key_indexes]


def _lake_key_encoder(key_type: list[DataType], lake_format: str | None) -> KeyEncoder:
    if lake_format == "paimon":
        return PaimonKeyEncoder(key_type)
    if lake_format == "iceberg":
        return IcebergKeyEncoder(key_type)
    if lake_format == "hudi":
        raise ValueError("the Hudi bucket key encoder is not supported yet")
    return CompactedKeyEncoder(key_type)  # no lake format, Lance or Delta


def bucket_key_encoder(
    row_type: Sequence[DataType], key_indexes: Sequence[int], lake_format: str | None
) -> RowKeyEncoder:
    """The bucket-key encoder: always the lake format's, so Fluss and lake buckets agree."""
    fmt = _lake_format(lake_format)
    return RowKeyEncoder(_lake_key_encoder(_key_type(row_type, key_indexes), fmt), tuple(key_indexes))


def primary_key_encoder(
    row_type: Sequence[DataType],
    key_indexes: Sequence[int],
    lake_format: str | None,
    kv_format_version: int | None,
    is_default_bucket_key: bool,
) -> RowKeyEncoder:
    """The primary-key (and lookup-key) encoder, chosen as the Fluss clients do.

    kv format version 1 (also when absent, i.e. legacy tables), or 2 with the default bucket key: the
    lake format's encoder. Version 2 with a custom bucket key: Compacted, so that an encoded bucket key
    is a prefix of the encoded primary key (prefix lookups). Hudi tables always use Compacted.
    """
    fmt = _lake_format(lake_format)
    key_type = _key_type(row_type, key_indexes)
    version = 1 if kv_format_version is None else kv_format_version
    encoder: KeyEncoder
    if fmt == "hudi" or (version == 2 and not is_default_bucket_key):
        encoder = CompactedKeyEncoder(key_type)
    elif version in (1, 2):
        encoder = _lake_key_encoder(key_type, fmt)
    else:
        raise ValueError(f"unsupported kv format version: {kv_format_version}")
    return RowKeyEncoder(encoder, tuple(key_indexes))


key_encoder_for = primary_key_encoder
