"""KV records of a whole Arrow batch at once: keys, CompactedRow values and record framing built
column-wise, so that Arrow upserts run without a Python step per row for the common column types.

A CompactedRow is a null bitset followed by the non-null fields' encodings, and a KV record is
``int32 LE length | varint key length | key | value`` (no value: a delete). Both are concatenations,
so each piece is computed for every row as an Arrow binary column (numpy for the bitset, integers
and lengths; the compacted field encodings the bucket-key code already produces column-wise) and
Arrow joins them row by row in C++. The records of a batch are then the data buffer of one binary
array, ready to be cut into KvRecordBatches.

Columns of other types (decimals, times, sub-millisecond timestamps, nested types) are encoded one
value at a time with the precompiled per-field encoder; keys of lake formats fall back the same way
inside `ColumnarBucketer`. Everything must equal `CompactedRowEncoder` byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType
from strom.record.columnar_keys import (
    ColumnarBucketer,
    ColumnEncoder,
    binary_array_from_parts,
    compacted_column_encoder,
    fixed_width_bytes,
    varint_bytes,
)
from strom.record.compacted_row import compile_key_encoder, null_bitset_size

__all__ = ["KvRecordEncoder", "KvRecords"]

_EMPTY = pa.scalar(b"", pa.large_binary())


class KvRecords:
    """Consecutive KV records (a slice of what `KvRecordEncoder.records` gives): bytes and offsets."""

    __slots__ = ("data", "offsets")

    def __init__(self, records: pa.Array) -> None:
        buffers = records.buffers()
        start = records.offset
        self.offsets = np.frombuffer(buffers[1], dtype=np.int64)[start : start + len(records) + 1]
        self.data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def chunks(self, limit: int) -> list[tuple[memoryview, int]]:
        """Consecutive runs of records of about `limit` bytes each: (bytes, record count)."""
        offsets = self.offsets
        count = len(offsets) - 1
        out: list[tuple[memoryview, int]] = []
        i = 0
        while i < count:
            # the last record that still ends within `limit` of this chunk's start (at least one)
            j = int(np.searchsorted(offsets, offsets[i] + limit, side="right")) - 1
            j = min(max(j, i + 1), count)
            out.append((self.data[int(offsets[i]) : int(offsets[j])], j - i))
            i = j
        return out


def _zero(t: pa.DataType) -> pa.Scalar:
    """A placeholder for null slots (their encoding is discarded)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_fixed_size_binary(t):
        return pa.scalar(b"\0" * t.byte_width, t)
    if pa.types.is_boolean(t):
        return pa.scalar(False, t)
    if pa.types.is_floating(t):
        return pa.scalar(0.0, t)
    if pa.types.is_date32(t):
        return pa.scalar(0, pa.int32()).cast(t)
    if pa.types.is_timestamp(t):
        return pa.scalar(0, pa.int64()).cast(t)
    return pa.scalar(0, t)


def _field_encoder(t: DataType, arrow_type: pa.DataType) -> tuple[ColumnEncoder, bool]:
    """The column encoder of one field, and whether it is vectorised (else Python per value)."""
    vector = compacted_column_encoder(t, arrow_type)
    if vector is not None:
        zero = _zero(arrow_type)

        def encode(column: pa.Array) -> pa.Array:
            if column.null_count:
                column = pc.fill_null(column, zero)
            return vector(column)

        return encode, True
    one = compile_key_encoder([t.copy(nullable=False)])

    def encode_each(column: pa.Array) -> pa.Array:
        return pa.array([b"" if v is None else one((v,)) for v in column.to_pylist()], pa.large_binary())

    return encode_each, False


class KvRecordEncoder:
    """Encodes batches of a table's Arrow schema into KV records (upserts, or deletes by mask)."""

    def __init__(self, info: TableInfo, key_indexes: Sequence[int], key_format: str | None) -> None:
        schema = info.schema
        arrow_schema = schema.to_arrow_schema()
        row_type = schema.row_type
        self.width = len(row_type)
        self.nullable = [t.nullable for t in row_type]
        self._bitset_bytes = null_bitset_size(self.width)
        # The key bytes are the primary-key encoding (`key_format` None: Compacted; else the lake's).
        self._keys = ColumnarBucketer(row_type, arrow_schema, key_indexes, key_format, 1)
        encoders = [_field_encoder(t, f.type) for t, f in zip(row_type, arrow_schema, strict=True)]
        self._fields = [e for e, _ in encoders]
        self.vectorised = all(v for _, v in encoders)

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """The primary-key bytes of every row (large_binary)."""
        try:
            return self._keys.key_bytes(batch)
        except (ValueError, TypeError, pa.ArrowException) as e:
            raise ValueError(f"cannot encode a primary key: {e}") from e

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        """The CompactedRow of every row (large_binary)."""
        n = batch.num_rows
        parts: list[pa.Array] = [self._bitsets(batch)]
        for i, encode in enumerate(self._fields):
            column = batch.column(i)
            if column.null_count and not self.nullable[i]:
                raise ValueError(f"column '{batch.schema.field(i).name}' is NOT NULL but has nulls")
            try:
                encoded = encode(column)
            except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
                raise ValueError(f"column '{batch.schema.field(i).name}': {e}") from e
            if column.null_count:
                encoded = pc.if_else(column.is_valid(), encoded, _EMPTY)
            parts.append(encoded)
        if n == 0:
            return pa.array([], pa.large_binary())
        return pc.binary_join_element_wise(*parts, _EMPTY)

    def _bitsets(self, batch: pa.RecordBatch) -> pa.Array:
        n = batch.num_rows
        bits = np.zeros((n, self._bitset_bytes), dtype=np.uint8)
        for i in range(self.width):
            column = batch.column(i)
            if column.null_count:
                nulls = column.is_null().to_numpy(zero_copy_only=False)
                bits[nulls, i >> 3] |= np.uint8(1 << (i & 7))
        return _fixed_width_rows(bits)

    def records(self, batch: pa.RecordBatch, deletes: np.ndarray | None = None) -> pa.Array:
        """The KV record of every row (large_binary): upserts, except rows marked in `deletes`."""
        keys = self.keys(batch)
        if deletes is not None and deletes.all():
            values: pa.Array = pa.nulls(batch.num_rows, pa.large_binary()).fill_null(b"")
        else:
            values = self.values(batch)
            if deletes is not None and deletes.any():
                values = pc.if_else(pa.array(~deletes), values, _EMPTY)
        key_lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False).astype(np.int64)
        value_lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
        key_length_bytes = varint_bytes(key_lengths)
        body_lengths = pc.binary_length(key_length_bytes).to_numpy(zero_copy_only=False) + key_lengths
        body_lengths = body_lengths + value_lengths
        return pc.binary_join_element_wise(
            fixed_width_bytes(body_lengths, "<i4"), key_length_bytes, keys, values, _EMPTY
        )


def _fixed_width_rows(matrix: np.ndarray) -> pa.Array:
    """Each row of a uint8 matrix as one binary value."""
    rows, width = matrix.shape
    return binary_array_from_parts(
        np.full(rows, width, dtype=np.int64), np.ascontiguousarray(matrix).reshape(-1)
    )
