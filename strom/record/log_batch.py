"""Fluss LogRecordBatch framing: the fixed header (magic V0 and V1), CRC checks and in-place patching.

All fields are little-endian. The CRC-32C covers SchemaId..end, so the base offset and the commit
timestamp, which sit before it, can be set by the server without recomputing the checksum.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from strom.common.errors import CorruptRecordError
from strom.record.crc import crc32c

__all__ = [
    "APPEND_ONLY_FLAG",
    "BASE_OFFSET_OFFSET",
    "COMMIT_TIMESTAMP_OFFSET",
    "CRC_OFFSET",
    "LENGTH_OFFSET",
    "LOG_MAGIC_V0",
    "LOG_MAGIC_V1",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "NO_BATCH_SEQUENCE",
    "NO_WRITER_ID",
    "SCHEMA_ID_OFFSET",
    "STATISTICS_LENGTH_OFFSET",
    "V0_HEADER_SIZE",
    "V1_HEADER_SIZE",
    "LogBatchHeader",
    "crc_is_valid",
    "iter_batches",
    "patch_offset_and_timestamp",
    "read_header",
    "records_offset",
]

LOG_OVERHEAD = 12  # base offset + length
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
MAGIC_OFFSET = 12
COMMIT_TIMESTAMP_OFFSET = 13
CRC_OFFSET = 21
SCHEMA_ID_OFFSET = 25  # first byte covered by the CRC (V0 and V1)
STATISTICS_LENGTH_OFFSET = 48  # V1 only
V0_HEADER_SIZE = 48
V1_HEADER_SIZE = 52  # V0 + int32 statistics length; the statistics follow

LOG_MAGIC_V0 = 0
LOG_MAGIC_V1 = 1
APPEND_ONLY_FLAG = 0x01
NO_WRITER_ID = -1
NO_BATCH_SEQUENCE = -1

# base_offset, length, magic, commit_ts, crc, schema_id, attributes, last_offset_delta, writer_id,
# batch_sequence, record_count: the 48 bytes common to V0 and V1.
_HEADER = struct.Struct("<qibqIhbiqii")
_LENGTH = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_UINT32 = struct.Struct("<I")
_HEADER_SIZE_BY_MAGIC = {LOG_MAGIC_V0: V0_HEADER_SIZE, LOG_MAGIC_V1: V1_HEADER_SIZE}

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class LogBatchHeader:
    base_offset: int
    length: int  # the Length field: batch size - LOG_OVERHEAD
    magic: int
    commit_timestamp: int
    crc: int
    schema_id: int
    attributes: int
    last_offset_delta: int
    writer_id: int
    batch_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_append_only(self) -> bool:
        return bool(self.attributes & APPEND_ONLY_FLAG)

    @property
    def header_size(self) -> int:
        """Fixed header size for this magic (V1's statistics blob comes after it)."""
        return _HEADER_SIZE_BY_MAGIC[self.magic]


def read_header(buf: Buffer, pos: int = 0) -> LogBatchHeader:
    """Parse the batch header at `pos`; raises CorruptRecordError when it cannot be a valid batch."""
    avail = len(buf) - pos
    if avail < V0_HEADER_SIZE:
        raise CorruptRecordError(
            f"log batch at position {pos}: {avail} bytes left, fewer than a {V0_HEADER_SIZE}-byte header"
        )
    fields = _HEADER.unpack_from(buf, pos)
    magic = fields[2]
    header_size = _HEADER_SIZE_BY_MAGIC.get(magic)
    if header_size is None:
        raise CorruptRecordError(f"log batch at position {pos}: unsupported magic {magic} (only 0 and 1)")
    length = fields[1]
    if length + LOG_OVERHEAD < header_size:
        raise CorruptRecordError(
            f"log batch at position {pos}: length {length} is smaller than the magic-{magic} header"
        )
    if avail < header_size:
        raise CorruptRecordError(
            f"log batch at position {pos}: {avail} bytes left, fewer than a {header_size}-byte header"
        )
    return LogBatchHeader(*fields)


def iter_batches(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, LogBatchHeader]]:
    """Yield (position, header) for each complete batch in buf[pos:end]; stops silently at a partial
    tail (a torn write), raises CorruptRecordError on a batch that is complete but malformed."""
    if end is None:
        end = len(buf)
    unpack_length = _LENGTH.unpack_from
    while pos + LOG_OVERHEAD <= end:
        size = unpack_length(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size >= V0_HEADER_SIZE and pos + size > end:
            return  # partial tail
        header = read_header(buf, pos)  # raises on a too-small length or a bad magic
        yield pos, header
        pos += size


def records_offset(buf: Buffer, pos: int, header: LogBatchHeader) -> int:
    """Absolute position where the records section (change types + Arrow, or rows) starts."""
    if header.magic == LOG_MAGIC_V0:
        return pos + V0_HEADER_SIZE
    stats_len = _LENGTH.unpack_from(buf, pos + STATISTICS_LENGTH_OFFSET)[0]
    if stats_len < 0 or V1_HEADER_SIZE + stats_len > header.size:
        raise CorruptRecordError(
            f"log batch at position {pos}: statistics length {stats_len} does not fit in the batch"
        )
    return pos + V1_HEADER_SIZE + stats_len


def crc_is_valid(buf: Buffer, pos: int, header: LogBatchHeader) -> bool:
    """True when the stored CRC-32C matches bytes SchemaId..end of the batch."""
    end = pos + header.size
    if end > len(buf):
        return False
    return crc32c(memoryview(buf)[pos + SCHEMA_ID_OFFSET : end]) == header.crc


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + SCHEMA_ID_OFFSET : pos + size])


def write_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Recompute and store the CRC of the batch of `size` bytes at `pos`."""
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def patch_offset_and_timestamp(
    buf: bytearray | memoryview, pos: int, base_offset: int, commit_timestamp: int
) -> None:
    """Set the base offset and commit timestamp in place; both lie outside the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _INT64.pack_into(buf, pos + COMMIT_TIMESTAMP_OFFSET, commit_timestamp)
