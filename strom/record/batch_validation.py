"""Checks a log batch must pass before a server stores it, beyond its header framing and CRC.

The CRC proves only that the bytes are what the sender meant; a sender can compute a valid CRC over
nonsense. Readers (the official client first) trust these fields, so a batch that lies about them
poisons the log for everyone: a wrong magic makes the client misread the header, a record count that
disagrees with the Arrow body hides rows, a last offset delta that disagrees with the record count makes
offsets overlap or jump. So every produced batch, and every batch a follower copies, is checked here:

- attributes: only the append-only bit is defined;
- last offset delta = record count - 1 (Fluss assigns one offset per record), or, for an EMPTY batch
  (record count 0), last offset delta 0 and no records at all: a primary-key table's write that
  changes nothing still appends one (Fluss since its PR #312), so it takes one offset;
- writer id and batch sequence: both -1, or both >= 0;
- magic 1: the statistics block is well formed (version, distinct ascending column indexes of types
  that have statistics, null counts, the two bound rows decode against the schema and fill exactly
  the declared statistics length), and for ARROW logs the bounds and null counts cover the records
  (a filtered fetch skips batches on them: a bound that lies hides rows);
- ARROW logs: change types are known values, the records are exactly one Arrow IPC RecordBatch
  message that ends where the batch ends, whose row count is the record count and whose buffers pass
  Arrow's full validation (offsets, UTF-8) against the table's schema.

The Arrow work is zero-copy (a few microseconds plus a pass over offsets per batch). Non-ARROW log
formats are checked up to their records section.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pyarrow as pa

from strom.common.errors import CorruptRecordError, SchemaNotExistError
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.batch_statistics import parse_statistics, statistics_contradiction
from strom.record.change_type import ChangeType
from strom.record.kv_batch import check_writer_fields
from strom.record.log_batch import (
    APPEND_ONLY_FLAG,
    LogBatchHeader,
    records_offset,
)

__all__ = ["BatchCheck", "SchemaLookup", "check_log_batch", "log_batch_check"]

Buffer = bytes | bytearray | memoryview
# schema id -> the table's Arrow schema under it (None: unknown id); None instead of a lookup: the log
# is not in the ARROW format
SchemaLookup = Callable[[int], pa.Schema | None]
BatchCheck = Callable[[Buffer, int, LogBatchHeader], None]

_I32 = struct.Struct("<i")
_CHANGE_TYPES = frozenset(int(c) for c in ChangeType)


def log_batch_check(schema_of: SchemaLookup, *, arrow: bool, table: str) -> BatchCheck:
    """The check of one table's batches, for `LogTablet.append_as_leader/append_as_follower` (which
    call it after the header and CRC checks)."""

    def check(buf: Buffer, pos: int, header: LogBatchHeader) -> None:
        schema = schema_of(header.schema_id)
        if schema is None:
            raise SchemaNotExistError(
                f"record batch has schema id {header.schema_id}, unknown to table '{table}'"
            )
        check_log_batch(buf, pos, header, schema if arrow else None)

    return check


def check_log_batch(buf: Buffer, pos: int, header: LogBatchHeader, arrow_schema: pa.Schema | None) -> None:
    where = f"record batch at position {pos}"
    if header.attributes & ~APPEND_ONLY_FLAG & 0xFF:
        raise CorruptRecordError(f"{where}: unknown attributes 0x{header.attributes & 0xFF:02x}")
    count = header.record_count
    if count < 0:
        raise CorruptRecordError(f"{where}: record count {count}")
    if header.last_offset_delta != max(count - 1, 0):
        raise CorruptRecordError(
            f"{where}: last offset delta {header.last_offset_delta} does not match record count {count}"
        )
    check_writer_fields(header.writer_id, header.batch_sequence, where)
    start = records_offset(buf, pos, header)  # checks the V1/V2 statistics length fits
    stats = None
    if header.has_statistics_field:
        try:
            stats = parse_statistics(buf, pos + header.header_size, start, count, arrow_schema)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{where}: {e}") from None
    end = pos + header.size
    if count == 0:
        if start != end:
            raise CorruptRecordError(
                f"{where}: an empty batch (record count 0) carries {end - start} bytes of records"
            )
        return
    if arrow_schema is None:
        return
    if not header.is_append_only:
        if start + count > end:
            raise CorruptRecordError(f"{where}: change-type vector of {count} bytes overruns the batch")
        unknown = set(memoryview(buf)[start : start + count]) - _CHANGE_TYPES
        if unknown:
            raise CorruptRecordError(f"{where}: unknown change type {min(unknown)}")
        start += count
    _check_message_extent(buf, start, end, where)
    records, _ = decode_arrow_batch(buf, pos, header, arrow_schema)  # row count = record count
    try:
        records.validate(full=True)
    except pa.ArrowInvalid as e:
        raise CorruptRecordError(f"{where}: invalid Arrow records: {e}") from None
    if stats is not None:
        # filtered fetches skip batches on these bounds: bounds that leave out a stored value would
        # hide its row from every filtered reader
        problem = statistics_contradiction(stats, records)
        if problem is not None:
            raise CorruptRecordError(f"{where}: {problem}")


def _check_message_extent(buf: Buffer, start: int, end: int, where: str) -> None:
    """One encapsulated IPC message (continuation, metadata length, metadata, body) fills [start, end)."""
    if end - start < 8 or _I32.unpack_from(buf, start)[0] != -1:
        raise CorruptRecordError(f"{where}: the records are not an Arrow IPC message")
    metadata_length = _I32.unpack_from(buf, start + 4)[0]
    if metadata_length <= 0 or start + 8 + metadata_length > end:
        raise CorruptRecordError(f"{where}: Arrow metadata length {metadata_length} does not fit the batch")
    try:
        message = pa.ipc.read_message(pa.py_buffer(memoryview(buf)[start:end]))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptRecordError(f"{where}: invalid Arrow records: {e}") from None
    if message.type != "record batch":
        raise CorruptRecordError(f"{where}: Arrow message is a {message.type}, not a record batch")
    if start + 8 + metadata_length + message.body.size != end:
        raise CorruptRecordError(
            f"{where}: the Arrow message takes {8 + metadata_length + message.body.size} bytes, "
            f"the batch leaves {end - start} for it"
        )
