"""ValueRecordBatch, the answer to LimitScan on a primary-key table (magic 0, little-endian).

Layout: int32 Length (= size - 4), int8 Magic, int32 RecordCount, then per record int32 length and
the stored value: int16 schema id followed by the row bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from strom.common.errors import CorruptRecordError

__all__ = ["VALUE_BATCH_HEADER_SIZE", "build_value_batch", "parse_value_batch", "split_value"]

Buffer = bytes | bytearray | memoryview

VALUE_BATCH_MAGIC = 0
VALUE_BATCH_HEADER_SIZE = 9
_HEADER = struct.Struct("<ibi")
_INT32 = struct.Struct("<i")
_SCHEMA_ID = struct.Struct("<h")


def build_value_batch(values: Sequence[bytes]) -> bytes:
    """A batch of stored values, each already `int16 LE schema id + row`."""
    parts: list[bytes] = [b""]
    pack = _INT32.pack
    for v in values:
        parts.append(pack(len(v)))
        parts.append(v)
    body = b"".join(parts)
    return _HEADER.pack(VALUE_BATCH_HEADER_SIZE - 4 + len(body), VALUE_BATCH_MAGIC, len(values)) + body


def parse_value_batch(buf: Buffer) -> list[bytes]:
    """The stored values (schema id + row) of a batch; CorruptRecordError on malformed input."""
    data = bytes(buf)
    if len(data) < VALUE_BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"value batch of {len(data)} bytes is shorter than its header")
    length, magic, count = _HEADER.unpack_from(data, 0)
    if magic != VALUE_BATCH_MAGIC:
        raise CorruptRecordError(f"value batch has unsupported magic {magic}")
    size = length + 4
    if size < VALUE_BATCH_HEADER_SIZE or size > len(data):
        raise CorruptRecordError(f"value batch length {length} does not match its {len(data)} bytes")
    if count < 0:
        raise CorruptRecordError(f"value batch has a negative record count {count}")
    out: list[bytes] = []
    pos = VALUE_BATCH_HEADER_SIZE
    unpack = _INT32.unpack_from
    for i in range(count):
        if pos + 4 > size:
            raise CorruptRecordError(f"value batch is truncated at record {i}")
        n = unpack(data, pos)[0]
        start = pos + 4
        if n < 2 or start + n > size:
            raise CorruptRecordError(f"value batch record {i}: length {n} does not fit in the batch")
        out.append(data[start : start + n])
        pos = start + n
    if pos != size:
        raise CorruptRecordError(f"value batch has {size - pos} bytes after its {count} records")
    return out


def split_value(value: Buffer) -> tuple[int, Buffer]:
    """(schema id, row bytes) of a stored value."""
    return _SCHEMA_ID.unpack_from(value, 0)[0], value[2:]
