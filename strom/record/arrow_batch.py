"""ARROW-format log batches: building, decoding and column projection.

The records section of an ARROW batch is an optional change-type vector (one byte per row, present
when the append-only attribute bit is clear) followed by exactly one Arrow IPC encapsulated
RecordBatch message: no Schema message, no end-of-stream marker. Arrow compression (LZ4_FRAME, ZSTD)
lives inside that message, per buffer, so readers decompress transparently.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import pyarrow as pa

from strom.common.errors import CorruptRecordError
from strom.record.batch_statistics import collect_statistics
from strom.record.crc import crc32c
from strom.record.log_batch import (
    APPEND_ONLY_FLAG,
    LOG_MAGIC_V0,
    LOG_MAGIC_V1,
    LOG_MAGIC_V2,
    LOG_OVERHEAD,
    NO_BATCH_SEQUENCE,
    NO_LEADER_EPOCH,
    NO_WRITER_ID,
    V0_HEADER_SIZE,
    V1_HEADER_SIZE,
    V2_HEADER_SIZE,
    LogBatchHeader,
    crc_offset,
    records_offset,
    schema_id_offset,
    statistics_length_offset,
)

__all__ = [
    "ARROW_COMPRESSIONS",
    "build_arrow_log_batch",
    "decode_arrow_batch",
    "project_arrow_batch",
    "serialize_arrow_records",
]

Buffer = bytes | bytearray | memoryview

ARROW_COMPRESSIONS = ("NONE", "LZ4_FRAME", "ZSTD")

# Arrow data below this is never compressed (`serialize_arrow_records`)
SMALL_BATCH_BYTES = 256

# The V0 header with the CRC field zeroed: base_offset, length, magic, commit_ts, crc, schema_id,
# attributes, last_offset_delta, writer_id, batch_sequence, record_count.
_V0_HEADER = struct.Struct("<qibqIhbiqii")
# V2: the leader epoch (int32) between the commit timestamp and the CRC
_V2_HEADER = struct.Struct("<qibqiIhbiqii")
_CRC = struct.Struct("<I")
_META_LEN = struct.Struct("<i")


@functools.cache
def _write_options(compression: str, zstd_level: int) -> pa.ipc.IpcWriteOptions | None:
    name = compression.upper()
    if name == "NONE":
        return None
    if name == "LZ4_FRAME":
        return pa.ipc.IpcWriteOptions(compression="lz4")  # Arrow IPC's lz4 is the LZ4 frame format
    if name == "ZSTD":
        return pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=zstd_level))
    raise ValueError(f"unknown Arrow compression {compression!r}; expected one of {ARROW_COMPRESSIONS}")


def serialize_arrow_records(
    records: pa.RecordBatch, compression: str = "NONE", zstd_level: int = 3
) -> pa.Buffer:
    """One encapsulated Arrow IPC RecordBatch message (continuation marker, metadata, body).

    A batch of less than SMALL_BATCH_BYTES of Arrow data is written uncompressed whatever
    `compression` says: each buffer is compressed on its own with a frame header, so it would only
    grow (2 rows of an int and a string: 312 bytes plain, 408 with ZSTD), and ZSTD costs ~0.7 ms per
    batch this small (a context per buffer), which for a PK table's one-row writes was most of the
    server's time per write. Every reader takes both: the codec is recorded per message."""
    options = _write_options(compression, zstd_level)
    if options is None or records.nbytes < SMALL_BATCH_BYTES:
        return records.serialize()
    # RecordBatch.serialize() takes no write options, so write a stream and cut off its leading Schema
    # message (continuation, int32 metadata length, metadata; a schema has no body).
    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream(sink, records.schema, options=options)
    writer.write_batch(records)
    stream = sink.getvalue()
    schema_size = 8 + _META_LEN.unpack_from(stream, 4)[0]
    return stream.slice(schema_size)


def _assemble_v0(
    body: pa.Buffer | bytes,
    change_types: bytes,
    *,
    record_count: int,
    last_offset_delta: int,
    schema_id: int,
    append_only: bool,
    writer_id: int,
    batch_sequence: int,
    base_offset: int,
    commit_timestamp: int,
    statistics: bytes | None = None,
    magic: int | None = None,
    leader_epoch: int = NO_LEADER_EPOCH,
) -> bytes:
    """A V0 batch, or a V1 batch when `statistics` (a block, possibly empty) is given, or a V2 batch
    (statistics and leader epoch) when `magic` is 2."""
    if magic is None:
        magic = LOG_MAGIC_V0 if statistics is None else LOG_MAGIC_V1
    if magic == LOG_MAGIC_V0 and statistics is not None:
        raise ValueError("a magic-0 batch carries no statistics")
    stats = statistics or b""
    header_size = {LOG_MAGIC_V0: V0_HEADER_SIZE, LOG_MAGIC_V1: V1_HEADER_SIZE, LOG_MAGIC_V2: V2_HEADER_SIZE}[
        magic
    ]
    size = header_size + len(stats) + len(change_types) + len(body)
    header = bytearray(header_size)
    fixed = (
        schema_id,
        APPEND_ONLY_FLAG if append_only else 0,
        last_offset_delta,
        writer_id,
        batch_sequence,
        record_count,
    )
    if magic == LOG_MAGIC_V2:
        _V2_HEADER.pack_into(
            header, 0, base_offset, size - LOG_OVERHEAD, magic, commit_timestamp, leader_epoch, 0, *fixed
        )
    else:
        _V0_HEADER.pack_into(header, 0, base_offset, size - LOG_OVERHEAD, magic, commit_timestamp, 0, *fixed)
    if magic != LOG_MAGIC_V0:
        _META_LEN.pack_into(header, statistics_length_offset(magic), len(stats))
    crc = crc32c(bytes(header[schema_id_offset(magic) :]))
    for part in (stats, change_types, body):
        if len(part):
            crc = crc32c(part, crc)
    _CRC.pack_into(header, crc_offset(magic), crc)
    return b"".join((header, stats, change_types, body))


def build_arrow_log_batch(
    records: pa.RecordBatch,
    *,
    schema_id: int,
    change_types: bytes | bytearray | Sequence[int] | None = None,
    writer_id: int = NO_WRITER_ID,
    batch_sequence: int = NO_BATCH_SEQUENCE,
    base_offset: int = 0,
    commit_timestamp: int = 0,
    compression: str = "NONE",
    zstd_level: int = 3,
    statistics_columns: Sequence[int] | None = None,
    magic: int | None = None,
) -> bytes:
    """An ARROW log batch holding `records`, laid out as Fluss writes it: V0, or V1 carrying the
    min/max/null-count statistics of `statistics_columns` (schema positions) when that is given, or
    V2 (`magic=2`: V1 plus a leader epoch, which the leader sets on append).

    `change_types` (one ChangeType value per row) makes a changelog batch; None makes an append-only
    batch. An empty batch has no Arrow message at all, as in Fluss.
    """
    count = records.num_rows
    if change_types is None:
        ct = b""
    else:
        ct = bytes(change_types)
        if len(ct) != count:
            raise ValueError(f"{len(ct)} change types for {count} rows")
    body: pa.Buffer | bytes = serialize_arrow_records(records, compression, zstd_level) if count else b""
    return _assemble_v0(
        body,
        ct,
        record_count=count,
        last_offset_delta=count - 1 if count else 0,
        schema_id=schema_id,
        append_only=change_types is None,
        writer_id=writer_id,
        batch_sequence=batch_sequence,
        base_offset=base_offset,
        commit_timestamp=commit_timestamp,
        statistics=None if statistics_columns is None else collect_statistics(records, statistics_columns),
        magic=magic,
    )


def decode_arrow_batch(
    buf: Buffer, pos: int, header: LogBatchHeader, arrow_schema: pa.Schema, *, align: bool = False
) -> tuple[pa.RecordBatch, bytes | None]:
    """Decode the ARROW batch at `pos` into (records, change types or None when append-only).

    Handles V0, V1 and V2 (statistics are skipped) and compressed bodies. The returned RecordBatch may
    reference `buf` without copying, so `buf` must not be modified while it is in use.

    An uncompressed Arrow message sits wherever the batch put it: after a change-type vector of any
    length, a V1 statistics block, other batches. Its buffers are then misaligned for their types,
    which Arrow's C++ kernels treat as undefined behaviour and Acero (group_by, joins) warns about
    ("An input buffer was poorly aligned"). With `align` (records handed to users) such a message is
    copied to an aligned buffer first (one memcpy, ~30 us per MiB); servers that only check or
    re-encode the records keep the zero-copy view.
    """
    start = records_offset(buf, pos, header)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"log batch at position {pos}: {header.size} bytes expected, buffer too short"
        )
    count = header.record_count
    change_types: bytes | None = None
    if not header.is_append_only:
        if start + count > end:
            raise CorruptRecordError(
                f"log batch at position {pos}: change-type vector of {count} bytes overruns the batch"
            )
        change_types = bytes(memoryview(buf)[start : start + count])
        start += count
    if count == 0:
        return _empty(arrow_schema), change_types
    data = pa.py_buffer(memoryview(buf)[start:end])
    if align and data.address % _ALIGNMENT:
        data = _aligned_copy(data)
    try:
        message = pa.ipc.read_message(data)
        records = pa.ipc.read_record_batch(message, arrow_schema)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptRecordError(f"log batch at position {pos}: invalid Arrow records: {e}") from e
    if records.num_rows != count:
        raise CorruptRecordError(
            f"log batch at position {pos}: header says {count} records, Arrow message has {records.num_rows}"
        )
    return records, change_types


# Arrow allocates on 64 bytes; 8 is what IPC bodies promise and what every fixed-width type needs
# (decimal128 and friends are read as pairs of 64-bit words).
_ALIGNMENT = 8


def _aligned_copy(data: pa.Buffer) -> pa.Buffer:
    copy = pa.allocate_buffer(data.size)
    memoryview(copy).cast("B")[:] = memoryview(data).cast("B")
    return copy


def _empty(arrow_schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in arrow_schema], schema=arrow_schema)


def project_arrow_batch(
    buf: Buffer,
    pos: int,
    header: LogBatchHeader,
    arrow_schema: pa.Schema,
    column_indexes: Sequence[int],
    *,
    compression: str = "NONE",
    zstd_level: int = 3,
) -> bytes:
    """Rebuild the batch at `pos` with only the columns at `column_indexes` (strictly ascending).

    Offsets, writer id, batch sequence, schema id, commit timestamp and change types are kept; the
    result is always V0 (V1 statistics describe the unprojected columns) with a fresh CRC. The body is
    re-encoded with `compression`.
    """
    n = len(arrow_schema)
    previous = -1
    for i in column_indexes:
        if not previous < i < n:
            raise ValueError(f"projection {list(column_indexes)} must be ascending indexes below {n}")
        previous = i
    records, change_types = decode_arrow_batch(buf, pos, header, arrow_schema)
    projected = records.select(list(column_indexes))
    count = header.record_count
    body: pa.Buffer | bytes = serialize_arrow_records(projected, compression, zstd_level) if count else b""
    return assemble_arrow_log_batch(header, body, change_types or b"", schema_id=header.schema_id)


def assemble_arrow_log_batch(
    header: LogBatchHeader, body: pa.Buffer | bytes, change_types: bytes, *, schema_id: int
) -> bytes:
    """A V0 batch with `header`'s offsets, writer, sequence, timestamp and attributes around new
    records (`body`, `change_types`), under `schema_id`, with a fresh CRC."""
    return _assemble_v0(
        body,
        change_types,
        record_count=header.record_count,
        last_offset_delta=header.last_offset_delta,
        schema_id=schema_id,
        append_only=header.is_append_only,
        writer_id=header.writer_id,
        batch_sequence=header.batch_sequence,
        base_offset=header.base_offset,
        commit_timestamp=header.commit_timestamp,
    )
