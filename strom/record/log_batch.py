"""Fluss LogRecordBatch framing: the fixed header (magic V0, V1 and V2), CRC checks and in-place
patching.

All fields are little-endian. The CRC-32C covers SchemaId..end, so the base offset and the commit
timestamp, which sit before it, can be set by the server without recomputing the checksum.

The magics (Fluss 1.0's LogRecordBatchFormat): V0 is the 48-byte header; V1 adds an int32 statistics
length after it, then that many bytes of per-column statistics; V2 is V1 with an int32 leader epoch
between the commit timestamp and the CRC (so every field from the CRC on sits 4 bytes later), set by
the leader that appends the batch, outside the CRC like the commit timestamp.
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
    "LOG_MAGIC_V2",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_HEADER_SIZE",
    "NO_BATCH_SEQUENCE",
    "NO_LEADER_EPOCH",
    "NO_WRITER_ID",
    "SCHEMA_ID_OFFSET",
    "STATISTICS_LENGTH_OFFSET",
    "V0_HEADER_SIZE",
    "V1_HEADER_SIZE",
    "V2_HEADER_SIZE",
    "LogBatchHeader",
    "crc_is_valid",
    "crc_offset",
    "iter_batches",
    "patch_leader_epoch",
    "patch_offset_and_timestamp",
    "read_header",
    "records_offset",
    "schema_id_offset",
    "statistics_length_offset",
]

LOG_OVERHEAD = 12  # base offset + length
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
MAGIC_OFFSET = 12
COMMIT_TIMESTAMP_OFFSET = 13
CRC_OFFSET = 21
SCHEMA_ID_OFFSET = 25  # first byte covered by the CRC (V0 and V1; V2's is 29)
STATISTICS_LENGTH_OFFSET = 48  # V1 only
V0_HEADER_SIZE = 48
V1_HEADER_SIZE = 52  # V0 + int32 statistics length; the statistics follow
# V2: the leader epoch takes 21..25, so the CRC is at 25, the schema id (CRC start) at 29 and the
# statistics length at 52
V2_LEADER_EPOCH_OFFSET = 21
V2_CRC_OFFSET = 25
V2_SCHEMA_ID_OFFSET = 29
V2_STATISTICS_LENGTH_OFFSET = 52
V2_HEADER_SIZE = 56
MAX_HEADER_SIZE = V2_HEADER_SIZE  # read this much to parse any header

LOG_MAGIC_V0 = 0
LOG_MAGIC_V1 = 1
LOG_MAGIC_V2 = 2
APPEND_ONLY_FLAG = 0x01
NO_WRITER_ID = -1
NO_BATCH_SEQUENCE = -1
NO_LEADER_EPOCH = -1

# base_offset, length, magic, commit_ts, crc, schema_id, attributes, last_offset_delta, writer_id,
# batch_sequence, record_count: the 48 bytes common to V0 and V1.
_HEADER = struct.Struct("<qibqIhbiqii")
# V2: the same with the leader epoch (int32) after the commit timestamp
_V2_HEADER = struct.Struct("<qibqiIhbiqii")
_LENGTH = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_UINT32 = struct.Struct("<I")
_HEADER_SIZE_BY_MAGIC = {
    LOG_MAGIC_V0: V0_HEADER_SIZE,
    LOG_MAGIC_V1: V1_HEADER_SIZE,
    LOG_MAGIC_V2: V2_HEADER_SIZE,
}
_CRC_OFFSET_BY_MAGIC = {LOG_MAGIC_V0: CRC_OFFSET, LOG_MAGIC_V1: CRC_OFFSET, LOG_MAGIC_V2: V2_CRC_OFFSET}
_SCHEMA_ID_OFFSET_BY_MAGIC = {
    LOG_MAGIC_V0: SCHEMA_ID_OFFSET,
    LOG_MAGIC_V1: SCHEMA_ID_OFFSET,
    LOG_MAGIC_V2: V2_SCHEMA_ID_OFFSET,
}

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
    leader_epoch: int = NO_LEADER_EPOCH  # V2 only

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
        """Fixed header size for this magic (V1's and V2's statistics blob comes after it)."""
        return _HEADER_SIZE_BY_MAGIC[self.magic]

    @property
    def has_statistics_field(self) -> bool:
        """V1 and V2 carry a statistics length (maybe 0) and the statistics after the header."""
        return self.magic != LOG_MAGIC_V0


def crc_offset(magic: int) -> int:
    """Where the CRC field of a batch of this magic is (everything before it is not CRC'd)."""
    return _CRC_OFFSET_BY_MAGIC[magic]


def schema_id_offset(magic: int) -> int:
    """Where the schema id (the first byte the CRC covers) of a batch of this magic is."""
    return _SCHEMA_ID_OFFSET_BY_MAGIC[magic]


def statistics_length_offset(magic: int) -> int:
    """Where the statistics length of a V1 or V2 batch is."""
    if magic == LOG_MAGIC_V1:
        return STATISTICS_LENGTH_OFFSET
    if magic == LOG_MAGIC_V2:
        return V2_STATISTICS_LENGTH_OFFSET
    raise ValueError(f"magic {magic} batches have no statistics")


def read_header(buf: Buffer, pos: int = 0) -> LogBatchHeader:
    """Parse the batch header at `pos`; raises CorruptRecordError when it cannot be a valid batch."""
    avail = len(buf) - pos
    if avail < V0_HEADER_SIZE:
        raise CorruptRecordError(
            f"log batch at position {pos}: {avail} bytes left, fewer than a {V0_HEADER_SIZE}-byte header"
        )
    magic = buf[pos + MAGIC_OFFSET]
    header_size = _HEADER_SIZE_BY_MAGIC.get(magic)
    if header_size is None:
        raise CorruptRecordError(f"log batch at position {pos}: unsupported magic {magic} (only 0, 1 and 2)")
    if avail < header_size:
        raise CorruptRecordError(
            f"log batch at position {pos}: {avail} bytes left, fewer than a {header_size}-byte header"
        )
    if magic == LOG_MAGIC_V2:
        base, length, _, timestamp, epoch, crc, schema_id, attributes, delta, writer, sequence, count = (
            _V2_HEADER.unpack_from(buf, pos)
        )
        header = LogBatchHeader(
            base, length, magic, timestamp, crc, schema_id, attributes, delta, writer, sequence, count, epoch
        )
    else:
        header = LogBatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.length + LOG_OVERHEAD < header_size:
        raise CorruptRecordError(
            f"log batch at position {pos}: length {header.length} is smaller than the magic-{magic} header"
        )
    return header


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
    header_size = header.header_size
    stats_len = _LENGTH.unpack_from(buf, pos + statistics_length_offset(header.magic))[0]
    if stats_len < 0 or header_size + stats_len > header.size:
        raise CorruptRecordError(
            f"log batch at position {pos}: statistics length {stats_len} does not fit in the batch"
        )
    return pos + header_size + stats_len


def crc_is_valid(buf: Buffer, pos: int, header: LogBatchHeader) -> bool:
    """True when the stored CRC-32C matches bytes SchemaId..end of the batch."""
    end = pos + header.size
    if end > len(buf):
        return False
    return crc32c(memoryview(buf)[pos + schema_id_offset(header.magic) : end]) == header.crc


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """The CRC of the batch of `size` bytes at `pos`, where its magic puts the CRC's range (V0's for a
    magic no batch has, so that tools can forge such batches; readers refuse them on the magic)."""
    start = _SCHEMA_ID_OFFSET_BY_MAGIC.get(buf[pos + MAGIC_OFFSET], SCHEMA_ID_OFFSET)
    return crc32c(memoryview(buf)[pos + start : pos + size])


def write_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Recompute and store the CRC of the batch of `size` bytes at `pos`."""
    at = _CRC_OFFSET_BY_MAGIC.get(buf[pos + MAGIC_OFFSET], CRC_OFFSET)
    _UINT32.pack_into(buf, pos + at, compute_crc(buf, pos, size))


def patch_offset_and_timestamp(
    buf: bytearray | memoryview, pos: int, base_offset: int, commit_timestamp: int
) -> None:
    """Set the base offset and commit timestamp in place; both lie outside the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _INT64.pack_into(buf, pos + COMMIT_TIMESTAMP_OFFSET, commit_timestamp)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, leader_epoch: int) -> None:
    """Set a V2 batch's leader epoch in place (outside the CRC); other magics have none."""
    if buf[pos + MAGIC_OFFSET] == LOG_MAGIC_V2:
        _LENGTH.pack_into(buf, pos + V2_LEADER_EPOCH_OFFSET, leader_epoch)
