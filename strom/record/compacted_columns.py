"""Column-wise decoding of many CompactedRows into Arrow arrays with numpy, no per-row Python.

The rows of a batch are joined into one byte buffer, and each field is read for all rows at once at a
per-row position that advances field by field: fixed-width fields are gathered, varints are read a
byte column at a time (only as many rounds as the longest varint), and strings and bytes become an
Arrow offsets buffer plus one gather of their bytes. Null fields (the row's null bitset) do not
advance. Every step checks that the reads stay inside each row and that each row ends exactly where
its last field does, so a malformed row is refused as the per-row decoder refuses it.

Covers the scalar types the PK write path sees most; `ColumnarRowDecoder.supports` says whether a row
type is covered (DECIMAL and nested types are not: the per-row decoder handles them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from strom.common.types import DataType, DataTypeRoot

__all__ = ["ColumnarRowDecoder", "MalformedRows"]

Buffer = bytes | bytearray | memoryview
_R = DataTypeRoot
# Reads may run up to a varint's 10 bytes past the end of the last row before the bounds check
# refuses it; the joined buffer carries this many zero bytes so those reads stay inside it.
_PAD = 16


class MalformedRows(ValueError):
    """A row is not a CompactedRow of the row type (the message names the first bad row)."""


def _first(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def _read_varints(buf: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(unsigned values, byte lengths) of the LEB128 varints at `pos`; at most `max_bytes` each."""
    value = np.zeros(len(pos), np.uint64)
    length = np.zeros(len(pos), np.int64)
    rows = np.arange(len(pos))
    for k in range(max_bytes):
        b = buf[pos[rows] + k]
        value[rows] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        length[rows] += 1
        more = b >= 0x80
        rows = rows[more]
        if not len(rows):
            return value, length
    raise MalformedRows(
        f"row {int(np.flatnonzero(length == max_bytes)[0])}: varint longer than {max_bytes} bytes"
    )


# A field's values: one array, or (offsets, data) for strings and bytes.
_Values: TypeAlias = np.ndarray | tuple[np.ndarray, np.ndarray]
_Reader = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[_Values, np.ndarray]]
_NumberReader = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class _Field:
    """How to read one field for all (non-null) rows: returns (values or (offsets, data), bytes read)."""

    def __init__(self, index: int, t: DataType) -> None:
        self.index = index
        self.type = t
        self.arrow_type = t.to_arrow()
        self.nullable = t.nullable
        self.read: _Reader
        root = t.root
        if root is _R.BOOLEAN:
            self.read = lambda buf, pos, _: (buf[pos] != 0, np.ones(len(pos), np.int64))
        elif root is _R.TINYINT:
            self.read = lambda buf, pos, _: (buf[pos].view(np.int8), np.ones(len(pos), np.int64))
        elif root in (_R.SMALLINT, _R.FLOAT, _R.DOUBLE):
            dtype = {_R.SMALLINT: "<i2", _R.FLOAT: "<f4", _R.DOUBLE: "<f8"}[root]
            width = np.dtype(dtype).itemsize
            spread = np.arange(width)

            def fixed(buf: np.ndarray, pos: np.ndarray, _: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                raw = np.ascontiguousarray(buf[pos[:, None] + spread])
                return raw.view(dtype).ravel(), np.full(len(pos), width, np.int64)

            self.read = fixed
        elif root in (_R.INTEGER, _R.DATE):
            self.read = self._int32
        elif root is _R.BIGINT:
            self.read = self._int64
        elif root is _R.TIME_WITHOUT_TIME_ZONE:
            self.read = self._from_millis(self._int32, self.arrow_type)  # millis of the day
        elif root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
            if (t.precision or 0) <= 3:
                self.read = self._from_millis(self._int64, self.arrow_type)  # epoch millis
            else:
                self.read = self._timestamp  # epoch millis, then nano-of-milli
        elif root in (_R.CHAR, _R.STRING, _R.BYTES):  # BINARY(n) is fixed-size in Arrow: per row
            self.read = self._span
        else:
            raise ValueError(f"type {t} is not decoded column-wise")

    @staticmethod
    def _from_millis(read: _NumberReader, arrow_type: pa.DataType) -> _Reader:
        """`read`, with its millis converted to the Arrow type's unit (floor division for seconds)
        and width, as the per-row decoder converts them."""
        unit = arrow_type.unit
        dtype = np.int32 if arrow_type.bit_width == 32 else np.int64

        def convert(buf: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            value, length = read(buf, pos, ends)
            v = value.astype(np.int64)
            if unit == "s":
                v //= 1000
            elif unit != "ms":
                v *= 1000 if unit == "us" else 1000000
            return v.astype(dtype), length

        return convert

    @staticmethod
    def _int32(buf: np.ndarray, pos: np.ndarray, _: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value, length = _read_varints(buf, pos, 5)
        # the 5th byte's bits above the 32nd are dropped, as the per-row reader masks them
        return (value & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32), length

    @staticmethod
    def _int64(buf: np.ndarray, pos: np.ndarray, _: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        value, length = _read_varints(buf, pos, 10)
        return value.view(np.int64), length

    def _timestamp(self, buf: np.ndarray, pos: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        millis, first = self._int64(buf, pos, ends)
        _check_inside(pos + first, ends)
        nanos, second = self._int32(buf, pos + first, ends)
        unit = self.arrow_type.unit
        per_milli, nanos_per_unit = {"us": (1000, 1000), "ns": (1000000, 1)}[unit]
        value = millis * per_milli + nanos.astype(np.int64) // nanos_per_unit
        return value, first + second

    @staticmethod
    def _span(
        buf: np.ndarray, pos: np.ndarray, ends: np.ndarray
    ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        n, header = _Field._int32(buf, pos, ends)
        n = n.astype(np.int64)
        if (n < 0).any():
            bad = _first(n < 0)
            raise MalformedRows(f"row {bad}: negative length {int(n[bad])}")
        start = pos + header
        if (start + n > ends).any():
            bad = _first(start + n > ends)
            raise MalformedRows(f"row {bad}: a {int(n[bad])}-byte field overruns the row")
        offsets = np.zeros(len(n) + 1, np.int64)
        np.cumsum(n, out=offsets[1:])
        total = int(offsets[-1])
        # every byte's index in `buf`: its field's start plus its place in the field
        take = np.arange(total, dtype=np.int64) + np.repeat(start - offsets[:-1], n)
        return (offsets, buf[take]), header + n


def _check_inside(pos: np.ndarray, ends: np.ndarray) -> None:
    if (pos > ends).any():
        bad = _first(pos > ends)
        raise MalformedRows(f"row {bad}: fields run past the row's {int(ends[bad])}-byte end")


class ColumnarRowDecoder:
    """Decodes CompactedRows of one row type column-wise into a RecordBatch."""

    def __init__(self, row_type: Sequence[DataType]) -> None:
        self.fields = [_Field(i, t) for i, t in enumerate(row_type)]
        self.header = (len(self.fields) + 7) // 8

    @staticmethod
    def supports(row_type: Sequence[DataType]) -> bool:
        try:
            for i, t in enumerate(row_type):
                _Field(i, t)
        except ValueError:
            return False
        return True

    def columns(self, rows: Sequence[Buffer], skip: int = 0) -> list[pa.Array]:
        """One Arrow array per field; each row's first `skip` bytes are not part of it (a schema id
        prefix). Raises MalformedRows."""
        count = len(rows)
        lengths = np.fromiter(map(len, rows), np.int64, count) - skip
        if count and (lengths < self.header).any():
            bad = _first(lengths < self.header)
            raise MalformedRows(f"row {bad}: {int(lengths[bad])} bytes, shorter than its null bitset")
        buf = np.frombuffer(b"".join(rows) + bytes(_PAD), np.uint8)
        starts = np.zeros(count, np.int64)
        np.cumsum(lengths[:-1] + skip, out=starts[1:])
        starts += skip
        ends = starts + lengths
        pos = starts + self.header
        arrays: list[pa.Array] = []
        for f in self.fields:
            nulls = None
            if f.nullable:
                is_null = (buf[starts + (f.index >> 3)] & (1 << (f.index & 7))) != 0
                if is_null.any():
                    nulls = is_null
            if nulls is None:
                values, advance = f.read(buf, pos, ends)
                pos = pos + advance
            else:
                present = np.flatnonzero(~nulls)
                values, advance = f.read(buf, pos[present], ends[present])
                pos = pos.copy()
                pos[present] += advance
            _check_inside(pos, ends)
            arrays.append(self._array(f, values, nulls, count))
        if (pos != ends).any():
            bad = _first(pos != ends)
            raise MalformedRows(
                f"row {bad}: row ends at byte {int(pos[bad] - starts[bad])}, but has "
                f"{int(lengths[bad])} bytes"
            )
        return arrays

    @staticmethod
    def _array(f: _Field, values: _Values, nulls: np.ndarray | None, count: int) -> pa.Array:
        t = f.arrow_type
        if isinstance(values, tuple):  # (offsets, data) of strings or bytes
            offsets, data = values
            validity = None
            null_count = 0
            if nulls is not None:
                lengths = np.zeros(count, np.int64)
                lengths[~nulls] = np.diff(offsets)
                offsets = np.zeros(count + 1, np.int64)
                np.cumsum(lengths, out=offsets[1:])
                validity = pa.array(~nulls).buffers()[1]
                null_count = int(nulls.sum())
            text = pa.types.is_string(t)
            array = pa.Array.from_buffers(
                pa.large_string() if text else pa.large_binary(),
                count,
                [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                null_count,
            )
            if text:
                try:
                    array.validate(full=True)  # UTF-8, as the per-row decoder's str() checks it
                except pa.ArrowInvalid as e:
                    raise MalformedRows(f"a string is not UTF-8: {e}") from None
            return array.cast(t) if array.type != t else array
        if nulls is not None:
            full = np.zeros(count, values.dtype)
            full[~nulls] = values
            values = full
        storage = pa.array(values, mask=nulls)
        return (
            storage
            if storage.type == t
            else storage.view(t)
            if _same_width(storage.type, t)
            else (storage.cast(t))
        )


def _same_width(a: pa.DataType, b: pa.DataType) -> bool:
    return pa.types.is_primitive(a) and pa.types.is_primitive(b) and a.bit_width == b.bit_width
