"""Rebuilding a KV tablet from its changelog, as Fluss's KvRecoverHelper does.

Start from an empty database or a restored snapshot that covers the changelog below `start_offset`,
then read the log tablet's ARROW changelog batches from there:
* up to the high watermark (committed, acknowledged changes): straight into RocksDB;
* from the high watermark to the log end (appended, not yet committed): into the pre-write buffer at
  their offsets, so the next PutKv merges against them and a later commit flushes them.
Per row: +I and +U put (key(row), row), -D deletes key(row), -U is skipped. Keys come from the rows
through the table's primary-key encoder, values are re-encoded as CompactedRows behind the table's
schema id. Empty batches (see kv_tablet.py) only advance the offset.

Per-row Python is fine here: recovery runs once per leadership, and snapshots bound its length.
TIMESTAMP(7..9) values keep their nanoseconds when pandas is installed (pyarrow then returns pandas
Timestamps); without it pyarrow refuses sub-microsecond values.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from strom.common.errors import KvStorageError, LogOffsetOutOfRangeError
from strom.common.table_descriptor import TableInfo
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.change_type import ChangeType
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.key_encoder import RowKeyEncoder, primary_key_encoder
from strom.record.log_batch import iter_batches
from strom.record.schema_evolution import evolve_records
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.log.log_tablet import LogTablet

__all__ = ["RecoveryResult", "iter_recover", "recover", "table_key_encoder"]

DEFAULT_READ_BYTES = 8 * 1024 * 1024  # changelog read per step (Fluss: kv.recover.log-record-batch.max-size)

_INSERT = int(ChangeType.INSERT)
_UPDATE_BEFORE = int(ChangeType.UPDATE_BEFORE)
_UPDATE_AFTER = int(ChangeType.UPDATE_AFTER)
_DELETE = int(ChangeType.DELETE)
_APPEND_ONLY = int(ChangeType.APPEND_ONLY)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    flushed_offset: int  # changes below it are in RocksDB (the high watermark at recovery)
    end_offset: int  # changes below it are in RocksDB or the pre-write buffer (the log end)
    row_count: int | None
    applied_rows: int  # changelog rows written to RocksDB
    buffered_rows: int  # changelog rows put into the pre-write buffer


def table_key_encoder(info: TableInfo) -> RowKeyEncoder:
    """The primary-key encoder the clients use for `info` (physical primary key, lake format, kv format
    version, bucket key)."""
    schema = info.schema
    lake = info.datalake_format
    return primary_key_encoder(
        schema.row_type,
        schema.column_indexes(info.physical_primary_key),
        None if lake is None else str(lake.value),
        info.kv_format_version,
        info.descriptor.is_default_bucket_key(),
    )


def recover(
    kv: KvTablet,
    log: LogTablet,
    start_offset: int,
    row_count: int | None = 0,
    *,
    read_bytes: int = DEFAULT_READ_BYTES,
) -> RecoveryResult:
    """Replay the changelog from `start_offset` into `kv` (see the module doc); blocking."""
    steps = iter_recover(kv, log, start_offset, row_count, read_bytes=read_bytes)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def iter_recover(
    kv: KvTablet,
    log: LogTablet,
    start_offset: int,
    row_count: int | None = 0,
    *,
    read_bytes: int = DEFAULT_READ_BYTES,
) -> Generator[int, None, RecoveryResult]:
    """`recover` in steps: yields the next offset to replay after each chunk read from the log (so an
    event loop can run other work in between) and returns the RecoveryResult."""
    info = kv.table_info
    key_of = table_key_encoder(info).encode_key
    encode = CompactedRowEncoder(info.schema.row_type).encode
    prefix = info.schema_id.to_bytes(2, "little", signed=True)
    arrow_schema = info.schema.to_arrow_schema()
    high_watermark = log.high_watermark
    log_end = log.log_end_offset
    if start_offset < log.log_start_offset and start_offset < log_end:
        raise KvStorageError(
            f"cannot rebuild the kv tablet of table '{info.table_path}': its changelog from offset "
            f"{start_offset} is gone (the log starts at {log.log_start_offset})"
        )
    if start_offset > log_end:
        raise KvStorageError(
            f"cannot rebuild the kv tablet of table '{info.table_path}': the snapshot covers the changelog "
            f"up to offset {start_offset}, but the log ends at {log_end}"
        )
    counting = row_count is not None
    count = row_count or 0
    applied = 0
    buffered = 0
    offset = start_offset
    buffer_put = kv.buffer.put
    for limit, direct in ((high_watermark, True), (log_end, False)):
        while offset < limit:
            try:
                fetched = log.read(offset, read_bytes, max_offset=limit)
            except LogOffsetOutOfRangeError as e:
                raise KvStorageError(f"replaying the changelog from {offset} failed: {e}") from e
            records = fetched.records
            if not records:
                break
            writes: list[tuple[bytes, bytes | None]] = []
            for pos, header in iter_batches(records):
                next_offset = header.next_offset
                if next_offset <= offset or header.record_count == 0:
                    offset = max(offset, next_offset)
                    continue
                if header.schema_id == info.schema_id:
                    batch, change_types = decode_arrow_batch(records, pos, header, arrow_schema)
                else:  # a changelog batch from before an AlterTable
                    old = kv.schemas.get(header.schema_id)
                    if old is None:
                        raise KvStorageError(
                            f"changelog batch at offset {header.base_offset} of table '{info.table_path}' "
                            f"has unknown schema id {header.schema_id}"
                        )
                    batch, change_types = decode_arrow_batch(records, pos, header, old.to_arrow_schema())
                    batch = evolve_records(batch, old, info.schema)
                columns = [column.to_pylist() for column in batch.columns]
                row_offset = header.base_offset
                for i, row in enumerate(zip(*columns, strict=True)):
                    row_offset = header.base_offset + i
                    if row_offset < offset:
                        continue  # the batch began before the replay point
                    change = _APPEND_ONLY if change_types is None else change_types[i]
                    if change == _UPDATE_BEFORE:
                        continue
                    key = key_of(row)
                    value = None if change == _DELETE else prefix + encode(row)
                    delta = -1 if change == _DELETE else (1 if change == _INSERT else 0)
                    if direct:
                        writes.append((key, value))
                        count += delta
                        applied += 1
                    else:
                        buffer_put(key, value, row_offset, delta)
                        buffered += 1
                offset = next_offset
            if writes:
                kv.write_direct(writes)
            if direct:
                kv.set_recovered_state(offset, count if counting else None)
            yield offset
        if direct:
            # Everything committed is in RocksDB, even when the last batches were empty.
            offset = max(offset, min(limit, log_end))
            kv.set_recovered_state(offset, count if counting else None)
    return RecoveryResult(kv.flushed_offset, offset, kv.row_count, applied, buffered)
