"""Bucket ids for a whole Arrow batch at once: bucket-key bytes and their hashes computed column-wise.

Routing must agree byte for byte with the scalar path (`strom.record.key_encoder` +
`strom.common.bucketing`, which match pyfluss), so this module produces exactly the same key bytes, only
with numpy/pyarrow instead of a Python loop per row:

* Key bytes. For the common key types (booleans, integers, floats, strings, binaries, dates,
  millisecond timestamps) each column's encoding is built with numpy into an Arrow binary array.
  Columns of other types are encoded in Python once per *distinct* value (``dictionary_encode``)
  and expanded with ``take``. A compacted key is the concatenation of its fields' encodings, so
  several columns are joined with ``binary_join_element_wise``. Paimon keys (a BinaryRow over all
  key columns) with more than one column fall back to one Python call per row.
* Hashes. MurmurHash3 over variable-length keys runs block by block across all rows (one numpy
  pass per 4-byte block of the longest key), for both the Flink variant (Fluss, Paimon) and the
  standard one (Iceberg).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.common.types import DataType, DataTypeRoot
from strom.record.key_encoder import CompactedKeyEncoder, RowKeyEncoder, bucket_key_encoder

__all__ = [
    "ColumnEncoder",
    "ColumnarBucketer",
    "binary_array_from_parts",
    "compacted_column_encoder",
    "fixed_width_bytes",
    "fluss_buckets",
    "iceberg_buckets",
    "paimon_buckets",
    "varint_bytes",
]

_R = DataTypeRoot
_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_FLINK_SEED = 42
_EMPTY = pa.scalar(b"", pa.large_binary())

# A column's key encoding: the Arrow column in, one binary value per row out.
ColumnEncoder = Callable[[pa.Array], pa.Array]


# ------------------------------------------------------------------------------------------ hashing


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def _mix_k1(k: np.ndarray) -> np.ndarray:
    return _rotl(k * _C1, 15) * _C2


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl(h ^ k, 13) * _U32(5) + _U32(0xE6546B64)


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U32(16))
    h = h * _U32(0x85EBCA6B)
    h = h ^ (h >> _U32(13))
    h = h * _U32(0xC2B2AE35)
    return h ^ (h >> _U32(16))


def _binary_buffers(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes as uint8 with 3 bytes of zero padding, int64 offsets) of a binary array."""
    if keys.null_count:
        raise ValueError("bucket keys must not be null")
    keys = keys.cast(pa.large_binary()) if not pa.types.is_large_binary(keys.type) else keys
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[keys.offset : keys.offset + len(keys) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return np.concatenate([data[: offsets[-1]], np.zeros(3, np.uint8)]), offsets


def _read_u32(data: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Little-endian uint32 at arbitrary (unaligned) byte positions."""
    k = data[positions].astype(_U32)
    k |= data[positions + 1].astype(_U32) << _U32(8)
    k |= data[positions + 2].astype(_U32) << _U32(16)
    k |= data[positions + 3].astype(_U32) << _U32(24)
    return k


def _murmur_blocks(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """The MurmurHash3 state after every full 4-byte block of every key."""
    h = np.full(len(starts), seed, dtype=_U32)
    blocks = lengths >> 2
    most = int(blocks.max()) if len(blocks) else 0
    for j in range(most):
        rows = np.nonzero(blocks > j)[0]
        if len(rows) == len(h):
            h = _mix_h1(h, _mix_k1(_read_u32(data, starts + 4 * j)))
        else:
            h[rows] = _mix_h1(h[rows], _mix_k1(_read_u32(data, starts[rows] + 4 * j)))
    return h


def flink_murmur_hashes(keys: pa.Array, seed: int = _FLINK_SEED) -> np.ndarray:
    """`strom.common.bucketing.flink_murmur3_32` of every key, as int32 (trailing bytes mixed one by one)."""
    data, offsets = _binary_buffers(keys)
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = _murmur_blocks(data, starts, lengths, seed)
    tail_start = starts + (lengths & ~3)
    tails = lengths & 3
    for t in range(3):
        rows = np.nonzero(tails > t)[0]
        if len(rows):
            h[rows] = _mix_h1(h[rows], _mix_k1(data[tail_start[rows] + t].astype(_U32)))
    return _fmix(h ^ lengths.astype(_U32)).view(np.int32)


def murmur_hashes(keys: pa.Array, seed: int = 0) -> np.ndarray:
    """`strom.common.bucketing.murmur3_32` (standard tail handling) of every key, as uint32."""
    data, offsets = _binary_buffers(keys)
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = _murmur_blocks(data, starts, lengths, seed)
    tail_start = starts + (lengths & ~3)
    tails = lengths & 3
    k = np.zeros(len(h), dtype=_U32)
    for t in range(3):
        rows = np.nonzero(tails > t)[0]
        k[rows] |= data[tail_start[rows] + t].astype(_U32) << _U32(8 * t)
    has_tail = tails > 0
    h[has_tail] ^= _mix_k1(k[has_tail])
    return _fmix(h ^ lengths.astype(_U32))


def fluss_buckets(keys: pa.Array, num_buckets: int) -> np.ndarray:
    """`strom.common.bucketing.fluss_bucket` per key: Flink hash, Flink's murmurHash(int) rehash, modulo."""
    h = flink_murmur_hashes(keys).view(_U32)
    r = _fmix(_mix_h1(np.zeros_like(h), _mix_k1(h)) ^ _U32(4)).view(np.int32).astype(np.int64)
    r = np.where(r == -(2**31), 0, np.abs(r))
    return (r % num_buckets).astype(np.int32)


def paimon_buckets(keys: pa.Array, num_buckets: int) -> np.ndarray:
    h = flink_murmur_hashes(keys).astype(np.int64)
    return (np.abs(h) % num_buckets).astype(np.int32)


def iceberg_buckets(keys: pa.Array, num_buckets: int) -> np.ndarray:
    h = murmur_hashes(keys) & _U32(0x7FFFFFFF)
    return (h.astype(np.int64) % num_buckets).astype(np.int32)


def key_bytes_buckets(keys: pa.Array, num_buckets: int, lake_format: str | None) -> np.ndarray:
    """The bucket of each encoded key of a table whose bucket key is its primary key: the hash its
    clients use (`bucket_function_for`), which follows `table.datalake.format` when one is set."""
    fmt = None if lake_format is None else str(lake_format).strip().lower()
    if fmt == "paimon":
        return paimon_buckets(keys, num_buckets)
    if fmt == "iceberg":
        return iceberg_buckets(keys, num_buckets)
    return fluss_buckets(keys, num_buckets)


# ------------------------------------------------------------------------------------- key bytes


def binary_array_from_parts(lengths: np.ndarray, data: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def fixed_width_bytes(values: np.ndarray, dtype: str) -> pa.Array:
    """Every value as its little-endian bytes of a fixed width."""
    raw = np.ascontiguousarray(values.astype(dtype, copy=False)).view(np.uint8)
    width = np.dtype(dtype).itemsize
    return binary_array_from_parts(np.full(len(values), width, dtype=np.int64), raw)


def _varint_parts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsigned LEB128 of uint64 values: (lengths, a row-major byte matrix, mask of used bytes)."""
    v = values.astype(np.uint64, copy=False)
    lengths = np.ones(len(v), dtype=np.int64)
    rest = v >> np.uint64(7)
    while True:
        more = rest != 0
        if not more.any():
            break
        lengths += more
        rest = rest >> np.uint64(7)
    width = int(lengths.max()) if len(lengths) else 1
    columns = np.arange(width, dtype=np.uint64)
    groups = ((v[:, None] >> (np.uint64(7) * columns[None, :])) & np.uint64(0x7F)).astype(np.uint8)
    used = columns[None, :].astype(np.int64) < lengths[:, None]
    # Every byte but the last of a value carries the continuation bit.
    groups |= np.where(columns[None, :].astype(np.int64) < (lengths - 1)[:, None], 0x80, 0).astype(np.uint8)
    return lengths, groups, used


def varint_bytes(values: np.ndarray) -> pa.Array:
    lengths, groups, used = _varint_parts(values)
    return binary_array_from_parts(lengths, groups[used])


def _length_prefixed(column: pa.Array) -> pa.Array:
    """varint(byte length) followed by the bytes: the compacted encoding of strings and binaries."""
    binary = column.cast(pa.large_binary())
    lengths = pc.binary_length(binary).to_numpy(zero_copy_only=False)
    # Only the prefixes are built here; Arrow concatenates them with the values in C++.
    return pc.binary_join_element_wise(varint_bytes(lengths), binary, _EMPTY)


def _numpy(column: pa.Array, dtype: str) -> np.ndarray:
    return column.cast(pa.from_numpy_dtype(np.dtype(dtype))).to_numpy(zero_copy_only=False)


def compacted_column_encoder(t: DataType, arrow_type: pa.DataType) -> ColumnEncoder | None:
    root = t.root
    if root is _R.BOOLEAN:
        return lambda c: fixed_width_bytes(_numpy(c, "uint8"), "uint8")
    if root is _R.TINYINT:
        return lambda c: fixed_width_bytes(_numpy(c, "int8"), "<i1")
    if root is _R.SMALLINT:
        return lambda c: fixed_width_bytes(_numpy(c, "int16"), "<i2")
    if root is _R.INTEGER:
        # varint of the 32-bit two's complement: negatives take 5 bytes, as in the scalar encoder.
        return lambda c: varint_bytes(_numpy(c, "int32").astype(np.int64) & 0xFFFFFFFF)
    if root is _R.DATE:
        return lambda c: varint_bytes(_numpy(c.cast(pa.int32()), "int32").astype(np.int64) & 0xFFFFFFFF)
    if root is _R.BIGINT:
        return lambda c: varint_bytes(_numpy(c, "int64").view(np.uint64))
    if root is _R.FLOAT:
        return lambda c: fixed_width_bytes(_numpy(c, "float32"), "<f4")
    if root is _R.DOUBLE:
        return lambda c: fixed_width_bytes(_numpy(c, "float64"), "<f8")
    if root in (_R.STRING, _R.CHAR, _R.BYTES, _R.BINARY):
        return _length_prefixed
    if (
        root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE)
        and (t.precision or 0) <= 3
    ):
        unit = arrow_type.unit if pa.types.is_timestamp(arrow_type) else None
        if unit == "ms":
            return lambda c: varint_bytes(c.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64))
        if unit == "s":
            return lambda c: varint_bytes(
                (c.cast(pa.int64()).to_numpy(zero_copy_only=False) * 1000).view(np.uint64)
            )
    return None


def _iceberg_vector_encoder(t: DataType) -> ColumnEncoder | None:
    root = t.root
    if root in (_R.INTEGER, _R.BIGINT):
        return lambda c: fixed_width_bytes(_numpy(c, "int64"), "<i8")
    if root is _R.DATE:
        return lambda c: fixed_width_bytes(_numpy(c.cast(pa.int32()), "int64"), "<i8")
    if root in (_R.STRING, _R.CHAR, _R.BYTES, _R.BINARY):
        return lambda c: c.cast(pa.large_binary())
    return None


def _encode_one_with(encoder: CompactedKeyEncoder) -> Callable[[Any], bytes]:
    """One value's key bytes by `encoder` (bound now, for encoders built in a loop)."""
    return lambda value: encoder.encode([value])


def _per_distinct_value(encode_one: Callable[[Any], bytes]) -> ColumnEncoder:
    """Encode each distinct value once in Python and expand the result to all rows."""

    def encode(column: pa.Array) -> pa.Array:
        try:
            encoded = pc.dictionary_encode(column)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return pa.array([encode_one(v) for v in column.to_pylist()], pa.large_binary())
        uniques = pa.array([encode_one(v) for v in encoded.dictionary.to_pylist()], pa.large_binary())
        return uniques.take(encoded.indices)

    return encode


def _checked(name: str, encoder: ColumnEncoder) -> ColumnEncoder:
    def encode(column: pa.Array) -> pa.Array:
        if column.null_count:
            raise ValueError(f"bucket key column '{name}' must not be null")
        return encoder(column)

    return encode


class ColumnarBucketer:
    """Computes the bucket of every row of a batch from the table's bucket-key columns."""

    def __init__(
        self,
        row_type: Sequence[DataType],
        arrow_schema: pa.Schema,
        key_indexes: Sequence[int],
        lake_format: str | None,
        num_buckets: int,
    ) -> None:
        self.key_indexes = tuple(key_indexes)
        self.num_buckets = num_buckets
        fmt = None if lake_format is None else str(lake_format).strip().lower()
        # The scalar encoder decides what the bytes must be; everything below reproduces it.
        self._row_encoder: RowKeyEncoder = bucket_key_encoder(row_type, key_indexes, fmt)
        key_types = [row_type[i] for i in key_indexes]
        names = [arrow_schema.field(i).name for i in key_indexes]
        self._whole_row = False
        self._encoders: list[ColumnEncoder] = []
        if fmt in (None, "lance"):
            for name, t, i in zip(names, key_types, key_indexes, strict=True):
                vector = compacted_column_encoder(t, arrow_schema.field(i).type)
                single = CompactedKeyEncoder([t])
                self._encoders.append(
                    _checked(name, vector or _per_distinct_value(_encode_one_with(single)))
                )
        elif fmt == "iceberg" or len(key_types) == 1:
            encoder = self._row_encoder.encoder
            vector = _iceberg_vector_encoder(key_types[0]) if fmt == "iceberg" else None
            self._encoders.append(
                _checked(names[0], vector or _per_distinct_value(lambda v: encoder.encode([v])))
            )
        else:
            self._whole_row = True  # a multi-column Paimon BinaryRow is not a concatenation
        if fmt == "paimon":
            self._bucket_of_keys: Callable[[pa.Array, int], np.ndarray] = paimon_buckets
        elif fmt == "iceberg":
            self._bucket_of_keys = iceberg_buckets
        else:
            self._bucket_of_keys = fluss_buckets

    def key_bytes(self, batch: pa.RecordBatch) -> pa.Array:
        """The encoded bucket key of every row (a large_binary array)."""
        if self._whole_row:
            columns = [batch.column(i).to_pylist() for i in self.key_indexes]
            encode = self._row_encoder.encoder.encode
            return pa.array([encode(values) for values in zip(*columns, strict=True)], pa.large_binary())
        parts = [encode(batch.column(i)) for encode, i in zip(self._encoders, self.key_indexes, strict=True)]
        if len(parts) == 1:
            return parts[0]
        return pc.binary_join_element_wise(*parts, _EMPTY)

    def buckets(self, batch: pa.RecordBatch) -> np.ndarray:
        """The bucket id (int32) of every row."""
        if batch.num_rows == 0:
            return np.zeros(0, dtype=np.int32)
        return self._bucket_of_keys(self.key_bytes(batch), self.num_buckets)
