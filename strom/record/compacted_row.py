"""CompactedRow: Fluss's row encoding for KV values (and keys, without the null header).

Layout: a null bitset of ceil(n/8) bytes (bit i, LSB first, set when field i is null; NOT NULL fields
never look at it), then each non-null field in order:
  BOOLEAN, TINYINT: 1 byte | SMALLINT: 2 bytes LE | FLOAT, DOUBLE: 4 / 8 bytes LE
  INT, DATE (days), TIME (ms of day): unsigned varint of the 32-bit two's complement (no zigzag)
  BIGINT: unsigned varint of the 64-bit two's complement
  CHAR, STRING, BINARY, BYTES: varint length + bytes
  DECIMAL: p <= 18 varint64 unscaled, else varint length + big-endian unscaled bytes
  TIMESTAMP(_LTZ): p <= 3 varint64 epoch millis, else that plus varint32 nano-of-milli
  ARRAY, MAP: varint length + BinaryArray / BinaryMap | ROW: varint length + nested CompactedRow

Rows sit on the PK write path, so each schema gets encoder and decoder functions generated once and
specialised to its types (inlined one-byte varint fast paths, no per-field dispatch).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from strom.common.errors import CorruptRecordError
from strom.common.types import DataType, DataTypeRoot
from strom.record import values as conv
from strom.record.binary_array import codec_for_nested
from strom.record.compacted_columns import ColumnarRowDecoder, MalformedRows
from strom.record.varint import read_varint32, read_varint64, write_varint32, write_varint64

__all__ = [
    "CompactedRowDecoder",
    "CompactedRowEncoder",
    "NestedRowCodec",
    "null_bitset_size",
]

Buffer = bytes | bytearray | memoryview
_R = DataTypeRoot


def null_bitset_size(field_count: int) -> int:
    return (field_count + 7) // 8


def _read_length(buf: Buffer, pos: int) -> tuple[int, int]:
    n, pos = read_varint32(buf, pos)
    if n < 0:
        raise ValueError(f"negative length {n}")
    return n, pos


class _Malformed(ValueError):
    pass


# ---------------------------------------------------------------------------------------------------
# Code templates. Encoders read `v` and append to the bytearray `out`; decoders read `buf` at `pos`,
# leave the value in `v` and advance `pos`. `{i}` names the per-field helpers in the namespace.


def _enc_varint(var: str, writer: str) -> str:
    # one- and two-byte values inline; longer or negative ones through the range-checked writer
    return (
        f"if 0 <= {var} < 128:\n    out.append({var})\n"
        f"elif 0 <= {var} < 16384:\n    out.append(({var} & 127) | 128)\n    out.append({var} >> 7)\n"
        f"else:\n    {writer}(out, {var})\n"
    )


def _dec_varint(var: str, reader: str) -> str:
    # one- and two-byte values inline (a two-byte varint is never negative)
    return (
        f"{var} = buf[pos]\nif {var} < 128:\n    pos += 1\nelse:\n    b = buf[pos + 1]\n"
        f"    if b < 128:\n        {var} = ({var} & 127) | (b << 7)\n        pos += 2\n"
        f"    else:\n        {var}, pos = {reader}(buf, pos)\n"
    )


_ENC_VARINT32 = _enc_varint("v", "_w32")
_ENC_VARINT64 = _enc_varint("v", "_w64")
_ENC_BYTES = "n = len(v)\n" + _enc_varint("n", "_w32") + "out += v\n"

_DEC_VARINT32 = _dec_varint("v", "_r32")
_DEC_VARINT64 = _dec_varint("v", "_r64")
_DEC_MILLIS = _dec_varint("m", "_r64")
_DEC_SPAN = _dec_varint("n", "_rlen") + "e = pos + n\n"

# pyarrow's units for TIME/TIMESTAMP precisions, as the Fluss Arrow mapping uses them.
_UNIT_FROM_MILLIS = {"s": "v //= 1000\n", "ms": "", "us": "v *= 1000\n", "ns": "v *= 1000000\n"}


def _unit(precision: int | None) -> str:
    p = precision or 0
    return "s" if p == 0 else "ms" if p <= 3 else "us" if p <= 6 else "ns"


class _FieldCode:
    """Generated-code pieces for one field, plus the helpers they reference."""

    def __init__(self, i: int, t: DataType) -> None:
        self.i = i
        self.type = t
        self.helpers: dict[str, Any] = {}
        self.encode = ""
        self.decode_raw = ""  # reads the field as stored (temporals: millis, plus nanos in `m`/`v`)
        self.to_arrow = ""  # stored value -> what pa.array wants (temporals: ints in the Arrow unit)
        self.to_python = ""  # stored value -> Python value
        self._build()

    def _helper(self, name: str, fn: Any) -> str:
        key = f"_{name}{self.i}"
        self.helpers[key] = fn
        return key

    def _build(self) -> None:
        t = self.type
        root = t.root
        if root is _R.BOOLEAN:
            self.encode = "out.append(1 if v else 0)\n"
            self.decode_raw = "v = buf[pos] != 0\npos += 1\n"
        elif root is _R.TINYINT:
            self.encode = "out += _pack_b(v)\n"
            self.decode_raw = "v = buf[pos]\npos += 1\nif v > 127:\n    v -= 256\n"
        elif root is _R.SMALLINT:
            self.encode = "out += _pack_h(v)\n"
            self.decode_raw = "v = _unpack_h(buf, pos)[0]\npos += 2\n"
        elif root is _R.INTEGER:
            self.encode = _ENC_VARINT32
            self.decode_raw = _DEC_VARINT32
        elif root is _R.BIGINT:
            self.encode = _ENC_VARINT64
            self.decode_raw = _DEC_VARINT64
        elif root is _R.FLOAT:
            self.encode = "out += _pack_f(v)\n"
            self.decode_raw = "v = _unpack_f(buf, pos)[0]\npos += 4\n"
        elif root is _R.DOUBLE:
            self.encode = "out += _pack_d(v)\n"
            self.decode_raw = "v = _unpack_d(buf, pos)[0]\npos += 8\n"
        elif root in (_R.CHAR, _R.STRING):
            self.encode = "v = v.encode()\n" + _ENC_BYTES
            self.decode_raw = _DEC_SPAN + "v = str(buf[pos:e], 'utf-8')\npos = e\n"
        elif root in (_R.BINARY, _R.BYTES):
            self.encode = _ENC_BYTES
            self.decode_raw = _DEC_SPAN + "v = bytes(buf[pos:e])\npos = e\n"
        elif root is _R.DATE:
            self.encode = f"v = {self._helper('days', conv.date_to_days)}(v)\n" + _ENC_VARINT32
            self.decode_raw = _DEC_VARINT32
            self.to_python = f"v = {self._helper('date', conv.days_to_date)}(v)\n"
        elif root is _R.TIME_WITHOUT_TIME_ZONE:
            self.encode = f"v = {self._helper('ms', conv.time_to_millis)}(v)\n" + _ENC_VARINT32
            self.decode_raw = _DEC_VARINT32
            self.to_arrow = _UNIT_FROM_MILLIS[_unit(t.precision)]
            self.to_python = f"v = {self._helper('time', conv.millis_to_time)}(v)\n"
        elif root is _R.DECIMAL:
            precision, scale = t.precision or 10, t.scale or 0

            def unscaled(v: Any, p: int = precision, s: int = scale) -> int:
                return conv.decimal_to_unscaled(v, p, s)

            def to_decimal(u: int, s: int = scale) -> Any:
                return conv.unscaled_to_decimal(u, s)

            to_dec = self._helper("dec", to_decimal)
            if precision <= conv.COMPACT_DECIMAL_MAX_PRECISION:
                self.encode = f"v = {self._helper('unscaled', unscaled)}(v)\n" + _ENC_VARINT64
                self.decode_raw = _DEC_VARINT64 + f"v = {to_dec}(v)\n"
            else:
                big = self._helper("unscaled", lambda v: conv.unscaled_to_bytes(unscaled(v)))
                self.encode = f"v = {big}(v)\n" + _ENC_BYTES
                self.decode_raw = _DEC_SPAN + f"v = {to_dec}(_from_be(buf[pos:e]))\npos = e\n"
        elif root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
            self._build_timestamp(t, utc=root is _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE)
        elif root in (_R.ARRAY, _R.MAP, _R.ROW):
            encode, decode = codec_for_nested(t)
            self.encode = f"v = {self._helper('nested', encode)}(v)\n" + _ENC_BYTES
            self.decode_raw = _DEC_SPAN + f"v = {self._helper('unnest', decode)}(buf[pos:e])\npos = e\n"
        else:
            raise ValueError(f"type {t} not supported in CompactedRow")

    def _build_timestamp(self, t: DataType, utc: bool) -> None:
        unit = _unit(t.precision)
        parts = self._helper("parts", conv.timestamp_to_parts)
        if (t.precision or 0) <= conv.COMPACT_TIMESTAMP_MAX_PRECISION:
            self.encode = f"v = {parts}(v)[0]\n" + _ENC_VARINT64
            self.decode_raw = _DEC_VARINT64
            self.to_arrow = _UNIT_FROM_MILLIS[unit]
            self.to_python = f"v = {self._helper('ts', conv.timestamp_from_parts)}(v, 0, {utc})\n"
            return
        self.encode = f"m, v = {parts}(v)\n_w64(out, m)\n" + _ENC_VARINT32
        scale = {"us": (1000, 1000), "ns": (1000000, 1)}[unit]
        # raw = millis * (unit per milli) + nano_of_milli // (nanos per unit)
        self.decode_raw = _DEC_MILLIS + _DEC_VARINT32  # millis in m, nano-of-milli in v
        self.to_arrow = f"v = m * {scale[0]} + v // {scale[1]}\n"
        self.to_python = f"v = {self._helper('ts', conv.timestamp_from_parts)}(m, v, {utc})\n"


def _indent(code: str, level: int) -> str:
    pad = "    " * level
    return "".join(pad + line + "\n" for line in code.splitlines())


_BASE_NAMESPACE: dict[str, Any] = {
    "_w32": write_varint32,
    "_w64": write_varint64,
    "_r32": read_varint32,
    "_r64": read_varint64,
    "_rlen": _read_length,
    "_pack_b": struct.Struct("<b").pack,
    "_pack_h": struct.Struct("<h").pack,
    "_pack_f": struct.Struct("<f").pack,
    "_pack_d": struct.Struct("<d").pack,
    "_unpack_h": struct.Struct("<h").unpack_from,
    "_unpack_f": struct.Struct("<f").unpack_from,
    "_unpack_d": struct.Struct("<d").unpack_from,
    "_from_be": conv.unscaled_from_bytes,
    "_Malformed": _Malformed,
    "struct_error": struct.error,
}


def _compile(source: str, fields: list[_FieldCode], name: str) -> Callable[..., Any]:
    namespace = dict(_BASE_NAMESPACE)
    for f in fields:
        namespace.update(f.helpers)
    exec(compile(source, f"<strom.compacted_row.{name}>", "exec"), namespace)
    return namespace[name]


def _encoder_source(fields: list[_FieldCode], header: int, key_mode: bool) -> str:
    lines = [
        "def encode(values):",
        f"    if len(values) != {len(fields)}:",
        f"        raise ValueError(f'expected {len(fields)} values, got {{len(values)}}')",
        f"    out = bytearray({header})" if header else "    out = bytearray()",
        "    try:",
    ]
    for f in fields:
        lines.append(f"        v = values[{f.i}]")
        lines.append("        if v is None:")
        if key_mode:
            lines.append(
                f"            raise ValueError('key field {f.i} ({f.type}) is null; keys cannot be null')"
            )
        elif f.type.nullable:
            lines.append(f"            out[{f.i >> 3}] |= {1 << (f.i & 7)}")
        else:
            lines.append(f"            raise ValueError('field {f.i} ({f.type}) is NOT NULL but got None')")
        lines.append("        else:")
        lines.append(_indent(f.encode, 3).rstrip("\n"))
    lines += [
        "    except (TypeError, AttributeError, OverflowError, struct_error) as e:",
        "        raise ValueError(f'cannot encode {values!r}: {e}') from e",
        "    return bytes(out)",
    ]
    return "\n".join(lines) + "\n"


def _field_read(f: _FieldCode, python: bool, level: int, target: str) -> str:
    """Code that reads field `f` and hands the value to `target` (an expression template with {v})."""
    body = f.decode_raw + (f.to_python if python else f.to_arrow) + target.format(v="v") + "\n"
    if not f.type.nullable:
        return _indent(body, level)
    check = f"if buf[{f.i >> 3}] & {1 << (f.i & 7)}:\n    {target.format(v='None')}\nelse:\n"
    return _indent(check, level) + _indent(body, level + 1)


def _decode_many_source(fields: list[_FieldCode], header: int, python: bool, name: str) -> str:
    lines = [f"def {name}(rows):"]
    for f in fields:
        lines.append(f"    c{f.i} = []")
        lines.append(f"    a{f.i} = c{f.i}.append")
    lines += [
        "    r = -1",
        "    try:",
        "        for buf in rows:",
        "            r += 1",
        f"            pos = {header}",
    ]
    for f in fields:
        lines.append(_field_read(f, python, 3, f"a{f.i}({{v}})").rstrip("\n"))
    lines += [
        "            if pos != len(buf):",
        "                raise _Malformed(f'row ends at byte {pos}, but has {len(buf)} bytes')",
        "    except (IndexError, ValueError, struct_error) as e:",
        "        raise _Malformed(f'row {r}: {e}') from e",
        "    return [" + ", ".join(f"c{f.i}" for f in fields) + "]",
    ]
    return "\n".join(lines) + "\n"


def _decode_one_source(fields: list[_FieldCode], header: int, names: Sequence[str] | None = None) -> str:
    """A function decoding one row into a tuple, or with `names` into a dict by those names."""
    lines = ["def decode(buf):", f"    pos = {header}", "    try:"]
    for f in fields:
        lines.append(_field_read(f, True, 2, f"v{f.i} = {{v}}").rstrip("\n"))
    lines += [
        "        if pos != len(buf):",
        "            raise _Malformed(f'row ends at byte {pos}, but has {len(buf)} bytes')",
        "    except (IndexError, ValueError, struct_error) as e:",
        "        raise _Malformed(str(e)) from e",
    ]
    if names is None:
        lines.append("    return (" + "".join(f"v{f.i}, " for f in fields) + ")")
    else:
        items = "".join(f"{n!r}: v{f.i}, " for f, n in zip(fields, names, strict=True))
        lines.append("    return {" + items + "}")
    return "\n".join(lines) + "\n"


def _field_codes(row_type: Sequence[DataType]) -> list[_FieldCode]:
    return [_FieldCode(i, t) for i, t in enumerate(row_type)]


class CompactedRowEncoder:
    """Encodes rows (sequences of Python values, one per field) as CompactedRows."""

    __slots__ = ("encode", "row_type")

    def __init__(self, row_type: Sequence[DataType]) -> None:
        self.row_type = tuple(row_type)
        fields = _field_codes(self.row_type)
        self.encode: Callable[[Sequence[Any]], bytes] = _compile(
            _encoder_source(fields, null_bitset_size(len(fields)), key_mode=False), fields, "encode"
        )


class CompactedRowDecoder:
    """Decodes CompactedRows into Python values (tuples, per-column lists) or Arrow record batches.

    Python values are what pyarrow's to_pylist() gives, except that TIMESTAMP values keep only
    microseconds (datetime has no nanoseconds); the Arrow path keeps full precision.
    Malformed rows raise CorruptRecordError.
    """

    __slots__ = (
        "_columnar",
        "_decode",
        "_decode_many",
        "_decode_many_raw",
        "_fields",
        "_header",
        "arrow_types",
        "row_type",
    )

    def __init__(self, row_type: Sequence[DataType]) -> None:
        self.row_type = tuple(row_type)
        self._fields = _field_codes(self.row_type)
        self._header = null_bitset_size(len(self._fields))
        self.arrow_types = [t.to_arrow() for t in self.row_type]
        self._decode: Callable[[Buffer], tuple[Any, ...]] | None = None
        self._decode_many: Callable[[Sequence[Buffer]], list[list[Any]]] | None = None
        self._decode_many_raw: Callable[[Sequence[Buffer]], list[list[Any]]] | None = None
        # numpy column-wise decoding where every field's type allows it (compacted_columns.py)
        self._columnar = (
            ColumnarRowDecoder(self.row_type) if ColumnarRowDecoder.supports(self.row_type) else None
        )

    def decode(self, buf: Buffer) -> tuple[Any, ...]:
        if self._decode is None:
            self._decode = _compile(_decode_one_source(self._fields, self._header), self._fields, "decode")
        try:
            return self._decode(buf)
        except _Malformed as e:
            raise CorruptRecordError(f"malformed CompactedRow: {e}") from e

    def dict_decoder(self, names: Sequence[str]) -> Callable[[Buffer], dict[str, Any]]:
        """A function decoding one row straight into a dict by `names` (one per field), as
        `dict(zip(names, decode(buf)))` but without the tuple (lookups decode every row they find)."""
        if len(names) != len(self._fields):
            raise ValueError(f"{len(names)} names for {len(self._fields)} fields")
        decode = _compile(_decode_one_source(self._fields, self._header, names), self._fields, "decode")

        def decode_dict(buf: Buffer) -> dict[str, Any]:
            try:
                return decode(buf)
            except _Malformed as e:
                raise CorruptRecordError(f"malformed CompactedRow: {e}") from e

        return decode_dict

    def decode_many(self, rows: Sequence[Buffer]) -> list[list[Any]]:
        """Decode rows into one list of Python values per column."""
        if self._decode_many is None:
            source = _decode_many_source(self._fields, self._header, True, "decode_many")
            self._decode_many = _compile(source, self._fields, "decode_many")
        try:
            return self._decode_many(rows)
        except _Malformed as e:
            raise CorruptRecordError(f"malformed CompactedRow: {e}") from e

    def to_arrow(
        self, rows: Sequence[Buffer], arrow_schema: pa.Schema | None = None, skip: int = 0
    ) -> pa.RecordBatch:
        """Decode rows column-wise into a RecordBatch; each row's first `skip` bytes are not part of
        it (a schema id prefix)."""
        if self._columnar is not None:
            try:
                arrays = self._columnar.columns(rows, skip)
            except MalformedRows as e:
                raise CorruptRecordError(f"malformed CompactedRow: {e}") from e
        else:
            arrays = self._to_arrays([r[skip:] for r in rows] if skip else rows)
        if arrow_schema is None:
            names = [f"f{i}" for i in range(len(arrays))]
            return pa.RecordBatch.from_arrays(arrays, names=names)
        arrays = [
            a if a.type == field.type else a.cast(field.type)
            for a, field in zip(arrays, arrow_schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def _to_arrays(self, rows: Sequence[Buffer]) -> list[pa.Array]:
        """Per-row decoding into Python lists, one pa.array call per column (any row type)."""
        if self._decode_many_raw is None:
            source = _decode_many_source(self._fields, self._header, False, "decode_many_raw")
            self._decode_many_raw = _compile(source, self._fields, "decode_many_raw")
        try:
            columns = self._decode_many_raw(rows)
        except _Malformed as e:
            raise CorruptRecordError(f"malformed CompactedRow: {e}") from e
        return [pa.array(col, type=t) for col, t in zip(columns, self.arrow_types, strict=True)]


class NestedRowCodec:
    """A ROW value inside a row or an array: Python dict (or tuple/list) <-> nested CompactedRow."""

    __slots__ = ("_decoder", "_encoder", "names")

    def __init__(self, row_type: DataType) -> None:
        self.names = tuple(f.name for f in row_type.fields)
        types = [f.type for f in row_type.fields]
        self._encoder = CompactedRowEncoder(types)
        self._decoder = CompactedRowDecoder(types)

    def encode(self, value: Any) -> bytes:
        if isinstance(value, dict):
            value = [value.get(n) for n in self.names]
        return self._encoder.encode(value)

    def decode(self, data: Buffer) -> dict[str, Any]:
        return dict(zip(self.names, self._decoder.decode(data), strict=True))


def compile_key_encoder(key_type: Sequence[DataType]) -> Callable[[Sequence[Any]], bytes]:
    """The CompactedRow field encodings concatenated with no null header; nulls are rejected."""
    fields = _field_codes(key_type)
    return _compile(_encoder_source(fields, 0, key_mode=True), fields, "encode")
