"""KvRecordBatch, the `records` of a PutKv request (magic 0, little-endian).

Header (28 bytes): int32 Length (= size - 4), int8 Magic, uint32 CRC-32C (over SchemaId..end),
int16 SchemaId, int8 Attributes (0), int64 WriterId, int32 BatchSequence, int32 RecordCount.
Each record: int32 length of what follows, unsigned varint key length, key bytes, then the value row
(a CompactedRow without schema-id prefix); no bytes after the key means delete.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from strom.common.errors import CorruptRecordError
from strom.record.crc import crc32c
from strom.record.varint import encode_uvarint

__all__ = [
    "KV_HEADER_SIZE",
    "KV_MAGIC",
    "KvRecordBatch",
    "build_kv_batch",
]

Buffer = bytes | bytearray | memoryview

KV_MAGIC = 0
KV_OVERHEAD = 4  # the Length field
KV_SCHEMA_ID_OFFSET = 9  # first byte covered by the CRC
KV_HEADER_SIZE = 28

# length, magic, crc, schema_id, attributes, writer_id, batch_sequence, record_count
_HEADER = struct.Struct("<ibIhbqii")
_RECORD_LENGTH = struct.Struct("<i")
_CRC = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class KvRecordBatch:
    length: int
    magic: int
    crc: int
    schema_id: int
    attributes: int
    writer_id: int
    batch_sequence: int
    record_count: int
    records: list[tuple[bytes, bytes | None]]  # (key, value row or None for a delete)
    data: Buffer = field(repr=False, compare=False)  # the batch's bytes, for the CRC check

    @property
    def size(self) -> int:
        return self.length + KV_OVERHEAD

    def crc_is_valid(self) -> bool:
        return crc32c(memoryview(self.data)[KV_SCHEMA_ID_OFFSET : self.size]) == self.crc

    @classmethod
    def parse(cls, buf: Buffer) -> KvRecordBatch:
        """Parse a whole batch; raises CorruptRecordError naming the problem on malformed input.

        Does not check the CRC (call `crc_is_valid`)."""
        total = len(buf)
        if total < KV_HEADER_SIZE:
            raise CorruptRecordError(
                f"kv batch of {total} bytes is shorter than its {KV_HEADER_SIZE}-byte header"
            )
        length, magic, crc, schema_id, attributes, writer_id, batch_sequence, count = _HEADER.unpack_from(
            buf, 0
        )
        if magic != KV_MAGIC:
            raise CorruptRecordError(f"kv batch has unsupported magic {magic}")
        size = length + KV_OVERHEAD
        if size < KV_HEADER_SIZE:
            raise CorruptRecordError(f"kv batch length {length} is smaller than its header")
        if size != total:
            raise CorruptRecordError(
                f"kv batch length says {size} bytes, but the request carries {total}"
                + (" (truncated)" if size > total else f" ({total - size} stray bytes after it)")
            )
        if count < 0:
            raise CorruptRecordError(f"kv batch has a negative record count {count}")
        if attributes != 0:
            raise CorruptRecordError(f"kv batch has unknown attributes 0x{attributes & 0xFF:02x}")
        check_writer_fields(writer_id, batch_sequence, "kv batch")
        records: list[tuple[bytes, bytes | None]] = []
        append = records.append
        pos = KV_HEADER_SIZE
        unpack_length = _RECORD_LENGTH.unpack_from
        # Work on bytes so that slices (keys, values) come out as bytes.
        view = buf if isinstance(buf, bytes) and size == total else bytes(memoryview(buf)[:size])
        try:
            for i in range(count):
                n = unpack_length(view, pos)[0]
                start = pos + 4
                end = start + n
                if n < 1 or end > size:
                    raise CorruptRecordError(
                        f"kv batch record {i}: length {n} at byte {pos} does not fit in the {size}-byte batch"
                    )
                # unsigned varint key length, one byte in the common case
                key_len = view[start]
                p = start + 1
                if key_len >= 0x80:
                    key_len &= 0x7F
                    shift = 7
                    while True:
                        b = view[p]
                        p += 1
                        key_len |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                        if shift > 28 or p >= end:
                            raise CorruptRecordError(f"kv batch record {i}: malformed key length")
                key_end = p + key_len
                if key_len == 0:
                    raise CorruptRecordError(f"kv batch record {i}: empty key")
                if key_end > end:
                    raise CorruptRecordError(
                        f"kv batch record {i}: key of {key_len} bytes overruns its {n}-byte record"
                    )
                append((view[p:key_end], view[key_end:end] if key_end < end else None))
                pos = end
        except (IndexError, struct.error) as e:
            raise CorruptRecordError(f"kv batch is truncated at record {len(records)}: {e}") from e
        if pos != size:
            raise CorruptRecordError(f"kv batch has {size - pos} bytes after its {count} records")
        return cls(length, magic, crc, schema_id, attributes, writer_id, batch_sequence, count, records, view)


def kv_record_count(batch: Buffer) -> int:
    """The record count a KV batch's header declares (0 for a batch too short to have one)."""
    return _HEADER.unpack_from(batch, 0)[7] if len(batch) >= KV_HEADER_SIZE else 0


def check_writer_fields(writer_id: int, batch_sequence: int, what: str) -> None:
    """An idempotent writer id comes with a sequence and no writer with none (-1 both)."""
    if writer_id < -1 or batch_sequence < -1 or (writer_id == -1) != (batch_sequence == -1):
        raise CorruptRecordError(
            f"{what} has writer id {writer_id} with batch sequence {batch_sequence} (either both -1, or "
            "a writer id >= 0 with a sequence >= 0)"
        )


def build_kv_batch(
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    schema_id: int,
    writer_id: int = -1,
    batch_sequence: int = -1,
) -> bytes:
    """A KvRecordBatch of (key, value row or None for delete) pairs, with its CRC."""
    parts: list[bytes] = [b""]
    pack_length = _RECORD_LENGTH.pack
    for key, value in records:
        key_len = encode_uvarint(len(key))
        body_len = len(key_len) + len(key) + (len(value) if value is not None else 0)
        parts.append(pack_length(body_len))
        parts.append(key_len)
        parts.append(key)
        if value is not None:
            parts.append(value)
    body = b"".join(parts)
    header = bytearray(KV_HEADER_SIZE)
    _HEADER.pack_into(
        header,
        0,
        KV_HEADER_SIZE + len(body) - KV_OVERHEAD,
        KV_MAGIC,
        0,
        schema_id,
        0,
        writer_id,
        batch_sequence,
        len(records),
    )
    crc = crc32c(body, crc32c(bytes(header[KV_SCHEMA_ID_OFFSET:])))
    _CRC.pack_into(header, 5, crc)
    return bytes(header) + body
