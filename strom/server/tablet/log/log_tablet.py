"""The log of one table bucket replica: segments, offsets, high watermark, writer state, recovery.

Kafka's design as Fluss uses it. The directory holds the segments (see segment.py), writer-state
snapshots, and three checkpoints: the recovery point (everything below it was fsynced), the log start
offset and the high watermark. `close()` leaves a `clean-shutdown` marker; `open()` without one
re-validates (CRC) every segment from the one holding the recovery point on, cuts a torn or corrupt
tail, deletes any segment after it, and rebuilds the indexes and the writer state.

Threading: a LogTablet is not thread-safe. Its owner (the replica, on the server's asyncio loop)
serializes all calls on one tablet. Calls never block on more than local file I/O; the fsync of a
rolled segment and the unlinking of deleted segments run on a background thread (background_flush.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from strom.common.errors import (
    CorruptRecordError,
    LogOffsetOutOfRangeError,
    LogStorageError,
    RecordTooLargeError,
)
from strom.record.batch_validation import BatchCheck
from strom.record.log_batch import (
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    NO_WRITER_ID,
    LogBatchHeader,
    crc_is_valid,
    crc_offset,
    patch_leader_epoch,
    patch_offset_and_timestamp,
    read_header,
)
from strom.server.tablet.log.background_flush import submit_delete, submit_fsync
from strom.server.tablet.log.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from strom.server.tablet.log.lake_hold import LakeHold, RetentionOutcome, Verdict
from strom.server.tablet.log.leader_epoch import LeaderEpochCache
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    BatchPlacement,
    Buffer,
    LogSegment,
    SegmentInfo,
    fsync_path,
    offset_from_file_name,
    segment_file_name,
)
from strom.server.tablet.log.writer_state import WriterStateManager, snapshot_path

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "HIGH_WATERMARK_FILE",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "AppendResult",
    "FetchResult",
    "LogTablet",
    "TieredCopies",
]

_log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point.checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset.checkpoint"
HIGH_WATERMARK_FILE = "high-watermark.checkpoint"
_CHECKPOINTS = (RECOVERY_POINT_FILE, LOG_START_OFFSET_FILE, HIGH_WATERMARK_FILE)

_LENGTH = struct.Struct("<i")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed. For a duplicate, the placement of the original batch."""

    first_offset: int
    last_offset: int
    max_timestamp: int  # the commit timestamp given to the batches (-1 for an empty append)
    record_count: int
    duplicate: bool = False
    # With log.flush.interval-messages: the background fsync that makes this append durable (None:
    # nothing to wait for). A write is acknowledged, and a follower reports it fetched, only once it
    # is done (wait_durable).
    durable: Future[None] | None = None


async def wait_durable(appended: AppendResult) -> None:
    """Until the fsync an append started is done; a failed fsync fails the write."""
    if appended.durable is None:
        return
    try:
        await asyncio.wrap_future(appended.durable)
    except OSError as e:
        raise LogStorageError(f"the fsync of the log failed: {e}") from e


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole stored batches, the first one holding the fetch offset, plus the log's offsets."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


# How far a verdict goes towards deleting a segment (the stronger of two TTLs wins).
_EAGERNESS = {Verdict.KEEP: 0, Verdict.HOLD: 1, Verdict.FORCE: 2, Verdict.DELETE: 3}


@dataclass(frozen=True, slots=True)
class TieredCopies:
    """What local retention of a tiered log needs: how far remote storage holds the log, and
    `table.log.local-ttl` (inheriting `table.log.ttl`; 0 or less: no TTL cleanup of local copies)."""

    copied_end: int
    local_ttl_ms: int


class LogTablet:
    """An append-only, segmented log of Fluss record batches. Use `LogTablet.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: Callable[[], int],
        segments: list[LogSegment],
        writers: WriterStateManager,
    ) -> None:
        self.directory = directory
        self.config = config
        self._now_ms = now_ms
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._writers = writers
        self.log_start_offset = segments[0].base_offset
        self.high_watermark = 0
        self.recovery_point = 0
        self._max_timestamp = max(s.max_timestamp for s in segments)
        # Background fsyncs of rolled segments: (generation, recovery point once done, future).
        # A truncation bumps the generation so results about since-removed data are ignored.
        self._pending_flushes: list[tuple[int, int, Future[None]]] = []
        self._generation = 0
        # log.flush.interval-messages: the fsync submitted last, the offset it covers, its generation
        self._interval_flush: tuple[int, int, Future[None]] | None = None
        self._closed = False
        # The high-watermark checkpoint is also written from a thread (`write_high_watermark_checkpoint`,
        # the periodic one): each writer takes this lock and writes the value current at that moment,
        # so the file never goes back to an older value; the value last written is remembered, so the
        # periodic pass skips tablets whose high watermark did not move.
        self._hw_file_lock = threading.Lock()
        self._checkpointed_hw = -1
        # which leader term wrote which offsets (KIP-101); truncation after a leader change uses it
        self.leader_epochs = LeaderEpochCache.load(directory)

    # ---- opening and recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: Callable[[], int] = _wall_clock_ms,
        sync_later: list[Path] | None = None,
    ) -> LogTablet:
        """Load (and if needed recover) the log in `directory`, creating it when absent.

        `sync_later`: the removal of the clean-shutdown marker is not synced here; the directory is
        added there, and the caller syncs it before it appends anything (replica_opener.py)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        recovery_point = read_offset_checkpoint(directory / RECOVERY_POINT_FILE) or 0
        start_checkpoint = read_offset_checkpoint(directory / LOG_START_OFFSET_FILE)
        hw_checkpoint = read_offset_checkpoint(directory / HIGH_WATERMARK_FILE)

        segments = cls._load_segments(directory, config, clean, recovery_point)
        # a log with nothing on disk yet: its checkpoints and writer snapshot would say what their
        # absence says (offset 0, no writers), so they are not written (a server taking 2,048 new
        # buckets spent a third of their opening time on these five files)
        new = not segments and not start_checkpoint
        if not segments:
            segments = [LogSegment.create(directory, start_checkpoint or 0, config)]
        # From here on a crash must look unclean: the marker goes before anything is written.
        if clean:
            clean_marker.unlink()
            if sync_later is None:
                fsync_path(directory)
            else:
                sync_later.append(directory)

        writers = WriterStateManager(directory, config.writer_expiration_ms)
        tablet = cls(directory, config, now_ms, segments, writers)
        leo = tablet.log_end_offset
        first_base = segments[0].base_offset
        tablet.log_start_offset = min(max(start_checkpoint or 0, first_base), leo)
        tablet.high_watermark = min(max(hw_checkpoint or 0, tablet.log_start_offset), leo)
        tablet.recovery_point = leo if clean else min(recovery_point, leo)
        tablet.leader_epochs.truncate_from_end(leo)  # epochs of a cut tail are gone with it
        tablet.leader_epochs.truncate_from_start(tablet.log_start_offset)
        tablet._rebuild_writer_state(leo)
        if not new:
            writers.delete_snapshots_below(first_base)
            writers.take_snapshot()
            # each checkpoint that changed (after a clean stop none did: at 2,048 replicas their
            # renames were most of a restart's opening time)
            read = (recovery_point, start_checkpoint, hw_checkpoint)
            now = (tablet.recovery_point, tablet.log_start_offset, tablet.high_watermark)
            for name, before, value in zip(_CHECKPOINTS, read, now, strict=True):
                if before != value:
                    write_offset_checkpoint(directory / name, value)
            if hw_checkpoint == tablet.high_watermark:
                tablet._checkpointed_hw = tablet.high_watermark
        return tablet

    @staticmethod
    def _load_segments(
        directory: Path, config: LogConfig, clean: bool, recovery_point: int
    ) -> list[LogSegment]:
        bases: list[int] = []
        for path in directory.iterdir():
            name = path.name
            if name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # an interrupted checkpoint or snapshot write
            elif name.endswith(DELETED_SUFFIX):
                path.unlink(missing_ok=True)  # a deleted segment whose background unlink a crash stopped
            elif name.endswith(LOG_SUFFIX):
                try:
                    bases.append(offset_from_file_name(name))
                except ValueError:
                    continue
        bases.sort()
        known = set(bases)
        for path in directory.iterdir():  # indexes whose log is gone
            if path.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                try:
                    if offset_from_file_name(path.name) not in known:
                        path.unlink(missing_ok=True)
                except ValueError:
                    continue

        # Segments from the one holding the recovery point on may hold unflushed data.
        first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        segments: list[LogSegment] = []
        for i, base in enumerate(bases):
            segment = LogSegment.open(directory, base, config)
            if segments and base < segments[-1].next_offset:
                _log.warning(
                    "segment %s overlaps the one before it; deleting it and all after it", segment.path
                )
                segment.delete()
                _delete_segment_files(directory, bases[i + 1 :])
                break
            dropped = 0
            if segment.needs_recovery or (not clean and i >= first_unflushed):
                dropped = segment.recover()
            segments.append(segment)
            if dropped:
                _log.warning(
                    "recovery cut %d invalid bytes from %s; the log now ends at offset %d",
                    dropped,
                    segment.path,
                    segment.next_offset,
                )
                _delete_segment_files(directory, bases[i + 1 :])
                break
        return segments

    def _rebuild_writer_state(self, end_offset: int) -> None:
        """Load the newest writer snapshot at or below `end_offset`, then replay the batch headers
        after it, so the map reflects the log exactly up to `end_offset`."""
        writers = self._writers
        snap = writers.load_latest_snapshot(end_offset, self._now_ms())
        start = max(snap if snap is not None else 0, self._segments[0].base_offset)
        if start < end_offset:
            for segment in self._segments[max(0, bisect_right(self._bases, start) - 1) :]:
                if segment.next_offset <= start:
                    continue
                found = segment.translate_offset(start)
                position = found[0] if found is not None else 0
                for _, h in segment.iter_headers(position):
                    if h.base_offset >= end_offset:
                        break
                    if h.base_offset < start:
                        continue
                    if h.writer_id != NO_WRITER_ID:
                        last = h.base_offset + h.last_offset_delta
                        writers.record(h.writer_id, h.batch_sequence, h.base_offset, last, h.commit_timestamp)
        writers.map_end_offset = end_offset
        writers.remove_expired(self._now_ms())  # replayed writers may have been idle too long

    # ---- offsets ---------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def max_timestamp(self) -> int:
        """The newest commit timestamp in the log (-1 when empty)."""
        return self._max_timestamp

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); returns the value set."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def checkpoint_high_watermark(self, *, sync: bool = False) -> None:
        """Persist the high watermark now, on the caller's thread."""
        self._poll_flushes()
        self._write_high_watermark(sync=sync)

    @property
    def high_watermark_checkpointed(self) -> bool:
        """Whether the checkpoint file holds the current high watermark (as this tablet last wrote it)."""
        return self._checkpointed_hw == self.high_watermark

    def write_high_watermark_checkpoint(self) -> None:
        """The periodic checkpoint, safe to call from another thread than the tablet's owner: the file
        replacement is blocking disk work (a rename each; thousands of tablets held a server's event
        loop for seconds every interval). A closed tablet is left alone: close() wrote its last one."""
        self._write_high_watermark(sync=False)

    def _write_high_watermark(self, *, sync: bool) -> None:
        with self._hw_file_lock:
            if self._closed:
                return
            value = self.high_watermark
            write_offset_checkpoint(self.directory / HIGH_WATERMARK_FILE, value, sync=sync)
            self._checkpointed_hw = value

    # ---- appending -------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, check: BatchCheck | None = None
    ) -> AppendResult:
        """Validate, assign offsets and the commit timestamp, and append; all or nothing.

        Every batch is checked (header, magic, size, CRC, then `check` on its contents, writer
        sequence) before anything is written.
        The records are not copied: each batch's first bytes (up to the CRC'd part) are copied and
        patched, and written with the rest of the batch in one writev. A remembered retry of an
        idempotent batch writes nothing and returns the original placement with duplicate=True.
        """
        self._check_open()
        self._poll_flushes()
        records = _byte_view(records)
        batches = self._validate(records, self.config.batch_size_limit, check)
        leo = self.log_end_offset
        if not batches:
            return AppendResult(leo, leo - 1, -1, 0)
        duplicate = self._writers.validate(
            ((h.writer_id, h.batch_sequence, h.last_offset_delta + 1) for _, h in batches), leader=True
        )
        if duplicate is not None:
            return AppendResult(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.timestamp,
                duplicate.last_offset - duplicate.first_offset + 1,
                duplicate=True,
                durable=self._pending_interval_flush(),  # the original may still be syncing
            )

        view = memoryview(records)
        parts: list[bytes | bytearray | memoryview] = []
        timestamp = max(self._now_ms(), self._max_timestamp)  # commit timestamps never go backwards
        leader_epoch = self.leader_epochs.latest_epoch
        offset = leo
        record_count = 0
        placements: list[BatchPlacement] = []
        for pos, h in batches:
            size = h.length + LOG_OVERHEAD
            crc_at = crc_offset(h.magic)
            # base offset, commit timestamp (and a V2 batch's leader epoch): before the CRC
            head = bytearray(view[pos : pos + crc_at])
            patch_offset_and_timestamp(head, 0, offset, timestamp)
            patch_leader_epoch(head, 0, leader_epoch)
            parts += (head, view[pos + crc_at : pos + size])
            placements.append((pos, size, offset, timestamp))
            offset += h.last_offset_delta + 1
            record_count += h.record_count
        self._append(parts, placements, leo, offset)
        self._max_timestamp = timestamp
        for (_, h), (_, _, base, _) in zip(batches, placements, strict=True):
            if h.writer_id != NO_WRITER_ID:
                self._writers.record(
                    h.writer_id, h.batch_sequence, base, base + h.last_offset_delta, timestamp
                )
        durable = self._after_append(offset)
        return AppendResult(leo, offset - 1, timestamp, record_count, durable=durable)

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, check: BatchCheck | None = None
    ) -> AppendResult:
        """Append batches whose offsets and timestamps the leader assigned; still CRC-checked.

        The first batch must start at or after the log end offset and offsets must increase.
        """
        self._check_open()
        self._poll_flushes()
        records = _byte_view(records)
        # The leader enforced its batch size limit; here only what a segment can physically hold.
        batches = self._validate(records, self.config.segment_bytes, check)
        leo = self.log_end_offset
        if not batches:
            return AppendResult(leo, leo - 1, -1, 0)
        expected = leo
        max_ts = -1
        record_count = 0
        placements: list[BatchPlacement] = []
        for pos, h in batches:
            if h.base_offset < expected:
                raise LogStorageError(
                    f"follower append out of order: batch at offset {h.base_offset}, expected >= {expected}"
                )
            placements.append((pos, h.length + LOG_OVERHEAD, h.base_offset, h.commit_timestamp))
            expected = h.base_offset + h.last_offset_delta + 1
            max_ts = max(max_ts, h.commit_timestamp)
            record_count += h.record_count
        self._writers.validate(
            ((h.writer_id, h.batch_sequence, h.last_offset_delta + 1) for _, h in batches), leader=False
        )
        first = batches[0][1].base_offset
        self._append(records, placements, first, expected)
        self._max_timestamp = max(self._max_timestamp, max_ts)
        for _, h in batches:
            if h.writer_id != NO_WRITER_ID:
                last = h.base_offset + h.last_offset_delta
                self._writers.record(h.writer_id, h.batch_sequence, h.base_offset, last, h.commit_timestamp)
        durable = self._after_append(expected)
        return AppendResult(first, expected - 1, max_ts, record_count, durable=durable)

    @staticmethod
    def _validate(
        records: bytes | bytearray | memoryview, limit: int, check: BatchCheck | None = None
    ) -> list[tuple[int, LogBatchHeader]]:
        """Parse and check every batch header and CRC, then its contents with `check`; raises before
        anything is written."""
        end = len(records)
        batches: list[tuple[int, LogBatchHeader]] = []
        pos = 0
        while pos < end:
            if end - pos < LOG_OVERHEAD:
                raise CorruptRecordError(f"{end - pos} stray bytes after the last batch at position {pos}")
            size = _LENGTH.unpack_from(records, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            if size > limit:
                raise RecordTooLargeError(
                    f"record batch at position {pos} is {size} bytes, larger than the limit of {limit}"
                )
            if pos + size > end:
                raise CorruptRecordError(
                    f"record batch at position {pos} claims {size} bytes but only {end - pos} remain"
                )
            header = read_header(records, pos)
            if header.last_offset_delta < 0:
                raise CorruptRecordError(
                    f"record batch at position {pos} has a negative last offset delta "
                    f"{header.last_offset_delta}"
                )
            if not crc_is_valid(records, pos, header):
                raise CorruptRecordError(
                    f"record batch at position {pos} fails its CRC check (stored {header.crc})"
                )
            if check is not None:
                check(records, pos, header)
            batches.append((pos, header))
            pos += size
        return batches

    def _append(
        self,
        data: Buffer | list[Buffer],
        placements: list[BatchPlacement],
        first_offset: int,
        next_offset: int,
    ) -> None:
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else sum(len(p) for p in data)
        self._maybe_roll(size, first_offset, next_offset - 1)
        self._segments[-1].append(data, placements, next_offset)

    def _after_append(self, next_offset: int) -> Future[None] | None:
        """Returns the fsync that covers this append, when log.flush.interval-messages asked for one."""
        self._writers.map_end_offset = next_offset
        interval = self.config.flush_interval_messages
        if interval is None:
            return None
        flushed = self.recovery_point
        last = self._interval_flush
        if last is not None and last[0] == self._generation:
            flushed = max(flushed, last[1])
        if next_offset - flushed < interval:
            return None
        # The fsync runs on the background thread, behind any earlier one (the rolled segments'): the
        # event loop goes on serving while the disk syncs, and the write's acknowledgement waits.
        future = submit_fsync([self._segments[-1].dup_fd()], [self.directory])
        self._pending_flushes.append((self._generation, next_offset, future))
        self._interval_flush = (self._generation, next_offset, future)
        return future

    def _pending_interval_flush(self) -> Future[None] | None:
        last = self._interval_flush
        return None if last is None or last[2].done() else last[2]

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int) -> None:
        active = self._segments[-1]
        if active.size == 0:
            if not active.can_hold_offset(last_offset) or first_offset > active.next_offset:
                # Empty segment that cannot take these offsets (a follower jumping ahead): restart it.
                self._replace_empty_active(first_offset)
            return
        cfg = self.config
        age_exceeded = (
            cfg.segment_ms is not None
            and active.first_timestamp >= 0
            and self._now_ms() - active.first_timestamp >= cfg.segment_ms
        )
        if (
            active.size + size > cfg.segment_bytes
            or active.indexes_full
            or not active.can_hold_offset(last_offset)
            or age_exceeded
        ):
            self.roll(max(first_offset, active.next_offset))

    def _replace_empty_active(self, base_offset: int) -> None:
        old = self._segments.pop()
        self._bases.pop()
        old.delete()
        self._add_segment(LogSegment.create(self.directory, base_offset, self.config))

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at `new_base_offset` (default: log end).

        The closed segment's indexes are written now; its fsync runs in the background and moves
        the recovery point when done.
        """
        self._check_open()
        old = self._segments[-1]
        base = self.log_end_offset if new_base_offset is None else max(new_base_offset, self.log_end_offset)
        if old.size == 0:
            if old.base_offset != base:
                self._replace_empty_active(base)
            return self._segments[-1]
        old.persist_indexes()
        # Snapshot the writer state at the new base so recovery can start from this segment.
        self._writers.map_end_offset = base
        snap = self._writers.take_snapshot()
        segment = LogSegment.create(self.directory, base, self.config)
        self._add_segment(segment)
        paths = [old.offset_index_path, old.time_index_path, self.directory]
        if snap is not None:
            paths.append(snap)
        future = submit_fsync([old.dup_fd()], paths)
        self._pending_flushes.append((self._generation, base, future))
        return segment

    # ---- reading ---------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchResult:
        """Whole batches starting with the one that holds `fetch_offset`, up to `max_bytes`.

        Never returns a batch holding offsets at or beyond `max_offset` (clients pass the high
        watermark). With `min_one_batch`, the first batch is returned whole even when larger than
        `max_bytes`. Reads from one segment at a time. LogOffsetOutOfRangeError when `fetch_offset`
        is below the log start or beyond the log end.
        """
        self._check_open()
        leo = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise LogOffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is out of range [{self.log_start_offset}, {leo}]"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if fetch_offset >= limit:
            return self._fetch_result(b"")
        i = max(0, bisect_right(self._bases, fetch_offset) - 1)
        while i < len(self._segments):
            segment = self._segments[i]
            found = segment.translate_offset(fetch_offset)
            if found is not None:
                break
            i += 1  # a gap or the end of this segment: the data starts in the next one
        else:
            return self._fetch_result(b"")
        position, first_size = found
        end = segment.size
        if limit < segment.next_offset:
            stop = segment.translate_offset(limit)
            end = stop[0] if stop is not None else segment.size
        if end <= position:
            return self._fetch_result(b"")
        budget = max(max_bytes, first_size) if min_one_batch else max_bytes
        if first_size > budget:
            return self._fetch_result(b"")
        data = segment.read(position, min(budget, end - position))
        return self._fetch_result(_whole_batches(data, first_size))

    def _fetch_result(self, records: bytes) -> FetchResult:
        return FetchResult(records, self.high_watermark, self.log_start_offset, self.log_end_offset)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose batch was committed at or after `timestamp` (ms), or None when
        every batch is older (Fluss answers that with InvalidTimestampError)."""
        self._check_open()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                offset = segment.find_offset_by_timestamp(timestamp)
                if offset is not None:
                    return max(offset, self.log_start_offset)
        return None

    def closed_segments(self) -> list[SegmentInfo]:
        """All segments but the active one, oldest first."""
        return [s.info() for s in self._segments[:-1]]

    # ---- truncation, retention -------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from `offset` on (a follower diverging from its leader). Returns False
        when the log ends at or before `offset`."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if self._segments[0].base_offset > offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self._generation += 1
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._segments.pop().delete()
            self._bases.pop()
        self._segments[-1].truncate_to(offset)
        self._segments[-1].persist_indexes()  # so a crash cannot pair the cut log with stale indexes
        leo = self.log_end_offset
        self._max_timestamp = max(s.max_timestamp for s in self._segments)
        self.recovery_point = min(self.recovery_point, leo)
        self.high_watermark = min(self.high_watermark, leo)
        self.log_start_offset = min(self.log_start_offset, leo)
        self.leader_epochs.truncate_from_end(leo)
        self._rebuild_writer_state(leo)
        self._write_checkpoints(sync=False)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop all data and continue at `offset` (a follower far behind its leader's log start)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset {offset}")
        self._generation += 1
        self._retire(self._segments)
        self._segments = []
        self._bases = []
        self._add_segment(LogSegment.create(self.directory, offset, self.config))
        self.log_start_offset = self.high_watermark = self.recovery_point = offset
        self._max_timestamp = -1
        self.leader_epochs.clear()
        self._writers.truncate_fully_and_start_at(offset)
        self._write_checkpoints(sync=False)

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start forward (never past the high watermark) and delete segments that lie
        wholly below it."""
        self._check_open()
        if offset <= self.log_start_offset:
            return
        if offset > self.high_watermark:
            raise LogOffsetOutOfRangeError(
                f"cannot move the log start to {offset}, beyond the high watermark {self.high_watermark}"
            )
        self.log_start_offset = offset
        count = 0
        while count + 1 < len(self._segments) and self._segments[count + 1].base_offset <= offset:
            count += 1
        self._delete_oldest(count)
        write_offset_checkpoint(self.directory / LOG_START_OFFSET_FILE, self.log_start_offset)

    def apply_retention(self, now_ms: int) -> int:
        """TTL retention alone (no lake hold); returns the number of segments deleted."""
        return self.retain(now_ms).deleted

    def retain(
        self, now_ms: int, hold: LakeHold | None = None, tiered: TieredCopies | None = None
    ) -> RetentionOutcome:
        """Delete the oldest closed segments whose newest batch is older than `retention_ms`, only
        below the high watermark, and, for a lake-enabled table (`hold`), only those the lake holds
        (or that the hold bound forces out). Rolls the active segment once it could go too, so it
        can go next time.

        For the leader of a log tiered to remote storage (`tiered`), segments already copied there
        also go once older than `table.log.local-ttl`, as in Fluss. A copy removed past the hold
        bound is no loss (the remote log still has it, and its own retention applies the hold), so
        it is not reported as forced. Segments past `table.log.ttl` go whether copied or not: remote
        retention would delete them at once."""
        self._check_open()
        self._poll_flushes()
        ttl = self.config.retention_ms if self.config.retention_enabled else None
        local_ttl = tiered.local_ttl_ms if tiered is not None and tiered.local_ttl_ms > 0 else None
        if ttl is None and local_ttl is None:
            return RetentionOutcome()

        def by_ttl(end_offset: int, max_timestamp: int, ttl_ms: int | None) -> Verdict:
            if ttl_ms is None:
                return Verdict.KEEP
            if hold is None:
                return Verdict.DELETE if now_ms - max_timestamp > ttl_ms else Verdict.KEEP
            return hold.verdict(end_offset, max_timestamp, now_ms, ttl_ms)

        def verdict(end_offset: int, max_timestamp: int) -> Verdict:
            found = by_ttl(end_offset, max_timestamp, ttl)
            if tiered is None or end_offset > tiered.copied_end:
                return found
            found = max(found, by_ttl(end_offset, max_timestamp, local_ttl), key=_EAGERNESS.__getitem__)
            return Verdict.DELETE if found is Verdict.FORCE else found

        def deletable() -> tuple[int, int, int]:
            count = forced = 0
            forced_end = -1
            segments = self._segments
            while count + 1 < len(segments) and segments[count + 1].base_offset <= self.high_watermark:
                end = segments[count + 1].base_offset
                v = verdict(end, segments[count].max_timestamp)
                if v is Verdict.KEEP or v is Verdict.HOLD:
                    break
                if v is Verdict.FORCE:
                    forced += 1
                    forced_end = end
                count += 1
            return count, forced, forced_end

        count, forced, forced_end = deletable()
        active = self._segments[-1]
        if (
            count == len(self._segments) - 1
            and active.size > 0
            and self.high_watermark >= self.log_end_offset
            and verdict(self.log_end_offset, active.max_timestamp) in (Verdict.DELETE, Verdict.FORCE)
        ):
            self.roll()
            count, forced, forced_end = deletable()
        if count:
            self._delete_oldest(count)
            write_offset_checkpoint(self.directory / LOG_START_OFFSET_FILE, self.log_start_offset)
        held = held_bytes = 0
        if hold is not None:  # what stays past its TTL only because the lake lacks it
            segments = self._segments
            for i, segment in enumerate(segments):
                end = segments[i + 1].base_offset if i + 1 < len(segments) else self.log_end_offset
                if segment.size == 0 or verdict(end, segment.max_timestamp) is not Verdict.HOLD:
                    break
                held += 1
                held_bytes += segment.size
        return RetentionOutcome(count, forced, forced_end, held, held_bytes)

    def _delete_oldest(self, count: int) -> None:
        if count <= 0:
            return
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        first_base = self._segments[0].base_offset
        self._retire(doomed, self._writers.retire_snapshots_below(first_base))
        self.log_start_offset = max(self.log_start_offset, first_base)
        self.leader_epochs.truncate_from_start(self.log_start_offset)

    @staticmethod
    def _retire(segments: list[LogSegment], renamed: list[Path] | None = None) -> None:
        """Take segments out of the log now (renames) and unlink their files, and the already
        `renamed` ones, off the event loop."""
        renamed = [*(renamed or []), *(path for segment in segments for path in segment.retire())]
        if renamed:
            submit_delete(renamed)

    def remove_expired_writers(self, now_ms: int) -> int:
        """Forget idempotent writers idle longer than `writer_expiration_ms` (call periodically)."""
        return self._writers.remove_expired(now_ms)

    @property
    def writer_state(self) -> WriterStateManager:
        return self._writers

    # ---- durability ------------------------------------------------------------------------

    def poll_flushes(self) -> None:
        """Take the background fsyncs that finished (the periodic checkpoint pass calls it, so an idle
        log's recovery point advances too)."""
        self._poll_flushes()

    def _poll_flushes(self) -> None:
        """Advance the recovery point past rolled segments whose background fsync finished."""
        pending = self._pending_flushes
        if not pending:
            return
        advanced = False
        while pending and pending[0][2].done():
            generation, offset, future = pending.pop(0)
            error = future.exception()
            if error is not None:
                _log.error(
                    "background fsync of %s before offset %d failed: %s", self.directory, offset, error
                )
                continue
            if generation == self._generation and offset > self.recovery_point:
                self.recovery_point = min(offset, self.log_end_offset)
                advanced = True
        if advanced:
            write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, self.recovery_point)

    def _wait_for_flushes(self) -> None:
        for _, _, future in self._pending_flushes:
            try:
                future.result()
            except OSError as e:
                _log.error("background fsync in %s failed: %s", self.directory, e)
        self._poll_flushes()

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point to the log end."""
        self._check_open()
        self._wait_for_flushes()
        self._segments[-1].fsync()
        fsync_path(self.directory)
        self.recovery_point = self.log_end_offset
        write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, self.recovery_point, sync=True)

    def _write_checkpoints(self, *, sync: bool) -> None:
        write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, self.recovery_point, sync=sync)
        write_offset_checkpoint(self.directory / LOG_START_OFFSET_FILE, self.log_start_offset, sync=sync)
        self._write_high_watermark(sync=sync)

    def close(self) -> None:
        """Flush, snapshot the writer state, checkpoint, and mark the shutdown clean."""
        if self._closed:
            return
        self.flush()
        self._writers.map_end_offset = self.log_end_offset
        self._writers.take_snapshot(sync=True)
        self._write_checkpoints(sync=True)
        self.leader_epochs.sync()
        for segment in self._segments:
            segment.close()
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_path(self.directory)
        self._closed = True

    def closing(self) -> Iterator[list[Path]]:
        """close() in steps, for closing many logs together (ReplicaManager.close): each step yields
        the files it wrote, which the caller fsyncs (with the other logs' files, in parallel) before
        asking for the next step. The order is close()'s: the data, then the checkpoints that say it
        is durable, then the clean-shutdown marker, each only once the step before it is on disk."""
        if self._closed:
            return
        self._wait_for_flushes()
        active = self._segments[-1]
        active.persist_indexes()
        yield [active.path, active.offset_index_path, active.time_index_path, self.directory]
        self.recovery_point = self.log_end_offset
        self._writers.map_end_offset = self.log_end_offset
        snapshot = self._writers.take_snapshot()
        self._write_checkpoints(sync=False)
        written = [self.directory / name for name in (RECOVERY_POINT_FILE, LOG_START_OFFSET_FILE)]
        written += [self.directory / HIGH_WATERMARK_FILE, self.directory]
        yield written if snapshot is None else [snapshot, *written]
        self.leader_epochs.sync()  # its writer thread's fsync of the last change
        for segment in self._segments:
            segment.close()
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        yield [marker, self.directory]
        with self._hw_file_lock:
            self._closed = True

    def release(self) -> None:
        """Close the files without flushing, checkpointing or marking a clean shutdown: for a log that
        is deleted next (its fsyncs would be wasted, and a big one holds the caller for long)."""
        if self._closed:
            return
        for segment in self._segments:
            segment.close()
        with self._hw_file_lock:  # a periodic checkpoint under way ends before the files go
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError(f"log tablet {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"LogTablet({self.directory}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"hw={self.high_watermark}, segments={len(self._segments)})"
        )


def _byte_view(records: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """Views of other item formats become byte views, so len() and offsets count bytes."""
    if isinstance(records, memoryview) and (records.format != "B" or records.ndim != 1):
        return records.cast("B")
    return records


def _whole_batches(data: bytes, first_size: int) -> bytes:
    """Cut `data` after its last complete batch (it always starts at a batch boundary)."""
    n = len(data)
    if first_size >= n:
        return data if first_size == n else b""
    pos = first_size
    unpack = _LENGTH.unpack_from
    while pos + LOG_OVERHEAD <= n:
        size = unpack(data, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if pos + size > n:
            break
        pos += size
    return data if pos == n else data[:pos]


def _delete_segment_files(directory: Path, bases: list[int]) -> None:
    for base in bases:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (directory / segment_file_name(base, suffix)).unlink(missing_ok=True)
        snapshot_path(directory, base).unlink(missing_ok=True)
