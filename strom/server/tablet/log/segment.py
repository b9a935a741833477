"""One segment of a log tablet: a `.log` file of concatenated record batches plus its two indexes.

Files are named by the segment's base offset, zero padded to 20 digits:
`00000000000000001234.log`, `.index` (offset -> position) and `.timeindex` (timestamp -> offset).
The log file is opened once with O_APPEND; appends are `os.writev`, reads are `os.pread`. Only batch
headers are ever parsed, and only where the indexes cannot answer directly.

Not thread-safe: the owning LogTablet serializes all calls.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from strom.common.errors import CorruptRecordError, LogStorageError
from strom.record.log_batch import (
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAX_HEADER_SIZE,
    V0_HEADER_SIZE,
    LogBatchHeader,
    crc_is_valid,
    read_header,
)
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.offset_index import OffsetIndex
from strom.server.tablet.log.sparse_index import CorruptIndexError
from strom.server.tablet.log.time_index import TimeIndex

__all__ = [
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_RELATIVE_OFFSET",
    "TIME_INDEX_SUFFIX",
    "BatchPlacement",
    "LogSegment",
    "SegmentInfo",
    "offset_from_file_name",
    "segment_file_name",
    "set_aside",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"  # a deleted segment's files, waiting to be unlinked off the event loop
MAX_RELATIVE_OFFSET = 2**31 - 1  # index entries hold offsets relative to the base as int32

_LENGTH = struct.Struct("<i")


def set_aside(paths: Iterable[Path]) -> list[Path]:
    """Rename files to `<name>.deleted`: out of the log at once, for unlinking off the event loop
    (`background_flush.submit_delete`). Returns the new paths of the files that existed."""
    renamed = []
    for path in paths:
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:
            continue
        renamed.append(target)
    return renamed


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024  # buffers per writev
Buffer = bytes | bytearray | memoryview
_SCAN_CHUNK = 64 * 1024  # header walks read this much at a time while batches are small
_RECOVER_CHUNK = 8 * 1024 * 1024  # recovery reads whole batches to check their CRC

# One batch of an append: (position within the appended bytes, size, base offset, commit timestamp).
BatchPlacement = tuple[int, int, int, int]


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int:
    return int(name.split(".", 1)[0])


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What remote tiering needs to know about a closed segment."""

    base_offset: int
    next_offset: int
    path: Path
    size: int
    max_timestamp: int


class LogSegment:
    """The files of one segment and what is known about their content."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, fd: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.offset_index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self._config = config
        self._fd = fd
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self.first_timestamp = -1  # commit timestamp of the first batch: the segment's age for rolling
        self._bytes_since_index = 0
        self.offset_index = OffsetIndex(self.offset_index_path, base_offset, config.index_max_bytes)
        self.time_index = TimeIndex(self.time_index_path, base_offset, config.index_max_bytes)
        # True when open() could not trust the indexes or found a torn tail: recover() must run.
        self.needs_recovery = False

    # ---- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig) -> LogSegment:
        """A new, empty segment; stale files with the same base offset are replaced."""
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        fd = _open_log_file(path, truncate=True)
        segment = cls(directory, base_offset, config, fd)
        segment.offset_index.delete()
        segment.time_index.delete()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig) -> LogSegment:
        """Load an existing segment from its index files and a short scan of its tail.

        Reads no more than the batches after the last index entry. If an index is missing or
        implausible, or the tail is torn, `needs_recovery` is set and the caller runs recover().
        """
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        segment = cls(directory, base_offset, config, _open_log_file(path, truncate=False))
        try:
            segment.offset_index = OffsetIndex.load(
                segment.offset_index_path, base_offset, config.index_max_bytes
            )
            segment.time_index = TimeIndex.load(segment.time_index_path, base_offset, config.index_max_bytes)
            segment.offset_index.check(segment.size)
            segment._load_tail()
            segment.time_index.check(segment.next_offset)
        except (CorruptIndexError, CorruptRecordError):
            segment.needs_recovery = True
        return segment

    def close(self) -> None:
        """Persist the indexes (no fsync) and release the file."""
        if self._fd >= 0:
            self.persist_indexes()
            os.close(self._fd)
            self._fd = -1

    def retire(self) -> list[Path]:
        """Close the segment and rename its files to `<name>.deleted`: out of the log at once, and
        cheap where unlinking is not (unlinking frees the file's blocks: ~15 ms per 64 MB on ext4).
        Returns the renamed files, for unlinking off the event loop (`submit_delete`); a crash
        before that leaves them for `LogTablet.open` to delete."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        return set_aside((self.path, self.offset_index_path, self.time_index_path))

    def delete(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.base_offset, self.next_offset, self.path, self.size, self.max_timestamp)

    # ---- writing ---------------------------------------------------------------------------

    def can_hold_offset(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def append(
        self, data: Buffer | Sequence[Buffer], batches: Sequence[BatchPlacement], next_offset: int
    ) -> None:
        """Append whole batches (already validated, offsets assigned) with one write.

        `data` is one buffer or several written in order (one writev); `batches` describes each batch
        in it, in order; `next_offset` follows the last one. On a failed write the file is cut back,
        so the segment is unchanged.
        """
        start = self.size
        parts = [data] if isinstance(data, bytes | bytearray | memoryview) else data
        self.size = start + _write_fully(self._fd, parts, start, self.path)
        if start == 0 and batches:
            self.first_timestamp = batches[0][3]
        interval = self._config.index_interval_bytes
        for rel_pos, size, base_offset, timestamp in batches:
            self._note_batch(start + rel_pos, size, base_offset, timestamp, interval)
        self.next_offset = next_offset

    def _note_batch(self, position: int, size: int, base_offset: int, timestamp: int, interval: int) -> None:
        """Bookkeeping for one batch at `position`: max timestamp and sparse index entries."""
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
            self._offset_of_max_timestamp = base_offset
        if position > 0 and self._bytes_since_index >= interval:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    # ---- reading ---------------------------------------------------------------------------

    def read(self, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` raw bytes from `position` (the caller keeps to batch boundaries)."""
        length = min(max_bytes, self.size - position)
        if length <= 0:
            return b""
        return os.pread(self._fd, length, position)

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, LogBatchHeader]]:
        """(position, header) of each complete batch in [start, end). Stops quietly at a torn tail;
        raises CorruptRecordError on a header that cannot be valid. Reads headers only."""
        end = self.size if end is None else min(end, self.size)
        pos = start
        buf = b""
        buf_start = pos
        big = False
        while pos + LOG_OVERHEAD <= end:
            rel = pos - buf_start
            if rel + MAX_HEADER_SIZE > len(buf):
                # Large batches: read just the next header instead of a chunk we would skip.
                want = MAX_HEADER_SIZE if big else _SCAN_CHUNK
                buf = os.pread(self._fd, min(want, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < LOG_OVERHEAD:
                    return
            size = _LENGTH.unpack_from(buf, rel + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            if size >= V0_HEADER_SIZE and pos + size > end:
                return
            header = read_header(buf, rel)
            yield pos, header
            big = size >= _SCAN_CHUNK
            pos += size

    def translate_offset(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset is >= `offset`, or None."""
        if offset >= self.next_offset:
            return None
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(position):
            if header.base_offset + header.last_offset_delta >= offset:
                return pos, header.length + LOG_OVERHEAD
        return None

    def find_offset_by_timestamp(self, timestamp: int) -> int | None:
        """Base offset of the first batch whose commit timestamp is >= `timestamp`, or None."""
        if self.max_timestamp < timestamp:
            return None
        start_offset = self.time_index.lookup_before(timestamp)
        position = 0 if start_offset is None else self.offset_index.lookup(start_offset)[1]
        for _, header in self.iter_headers(position):
            if header.commit_timestamp >= timestamp:
                return header.base_offset
        return None

    # ---- truncation and recovery -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after it; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        removed_batch = next(self.iter_headers(position), None)
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        if removed_batch is not None:
            self.time_index.truncate_to_offset(removed_batch[1].base_offset)
        self._load_tail()
        return removed

    def recover(self) -> int:
        """Rebuild everything from the log file alone.

        Walks the file from position 0, checking each batch's header, offsets and CRC, rebuilds both
        indexes, and cuts the file at the first torn or invalid batch. Returns the bytes dropped.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self.first_timestamp = -1
        self._bytes_since_index = 0
        interval = self._config.index_interval_bytes
        file_size = os.fstat(self._fd).st_size
        expected = self.base_offset  # every batch must start at or after the previous one's end
        pos = 0
        buf = b""
        buf_start = 0
        while pos + V0_HEADER_SIZE <= file_size:
            rel = pos - buf_start
            if rel + LOG_OVERHEAD > len(buf):
                buf = os.pread(self._fd, min(_RECOVER_CHUNK, file_size - pos), pos)
                buf_start, rel = pos, 0
            size = _LENGTH.unpack_from(buf, rel + LENGTH_OFFSET)[0] + LOG_OVERHEAD
            if size < V0_HEADER_SIZE or pos + size > file_size:
                break  # garbage length or a torn write
            if rel + size > len(buf):
                buf = os.pread(self._fd, max(size, min(_RECOVER_CHUNK, file_size - pos)), pos)
                buf_start, rel = pos, 0
            try:
                header = read_header(buf, rel)
            except CorruptRecordError:
                break
            if (
                header.base_offset < expected
                or header.last_offset_delta < 0
                or not self.can_hold_offset(header.base_offset + header.last_offset_delta)
                or not crc_is_valid(buf, rel, header)
            ):
                break
            if pos == 0:
                self.first_timestamp = header.commit_timestamp
            self._note_batch(pos, size, header.base_offset, header.commit_timestamp, interval)
            expected = header.base_offset + header.last_offset_delta + 1
            pos += size
        dropped = file_size - pos
        if dropped:
            os.ftruncate(self._fd, pos)
        self.size = pos
        self.next_offset = expected
        self.needs_recovery = False
        return dropped

    def _load_tail(self) -> None:
        """Derive next offset, max timestamp and first timestamp from the indexes plus the batches
        after the last offset-index entry. Raises CorruptRecordError on a torn or invalid tail."""
        indexed_offset, position = self.offset_index.last_entry()
        last_time = self.time_index.last_entry()
        if last_time is None:
            self.max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        else:
            self.max_timestamp, self._offset_of_max_timestamp = last_time
        expected = indexed_offset  # the indexed batch starts exactly there; later ones at or after
        end = position
        for pos, header in self.iter_headers(position):
            if header.base_offset < expected or (pos == position > 0 and header.base_offset != expected):
                raise CorruptRecordError(f"{self.path}: batch offsets disagree with the index at {pos}")
            expected = header.base_offset + header.last_offset_delta + 1
            if header.commit_timestamp > self.max_timestamp:
                self.max_timestamp = header.commit_timestamp
                self._offset_of_max_timestamp = header.base_offset
            end = pos + header.length + LOG_OVERHEAD
        if end != self.size:
            raise CorruptRecordError(f"{self.path}: torn or invalid batch at position {end} of {self.size}")
        self.next_offset = expected if end > position else max(indexed_offset, self.base_offset)
        self._bytes_since_index = self.size - position
        first = next(self.iter_headers(0), None) if self.size else None
        self.first_timestamp = -1 if first is None else first[1].commit_timestamp

    # ---- durability ------------------------------------------------------------------------

    def persist_indexes(self) -> None:
        """Write index entries not yet in the index files (no fsync)."""
        self.offset_index.persist()
        self.time_index.persist()

    def fsync(self) -> None:
        """Persist the indexes and fsync the log and index files."""
        self.persist_indexes()
        os.fsync(self._fd)
        for path in (self.offset_index_path, self.time_index_path):
            fsync_path(path)

    def dup_fd(self) -> int:
        """A private descriptor of the log file, for an fsync that may outlive this object."""
        return os.dup(self._fd)


def fsync_path(path: Path) -> None:
    """fsync a file or directory by path; a file deleted in the meantime needs no sync."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_log_file(path: Path, *, truncate: bool) -> int:
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if truncate:
        flags |= os.O_TRUNC
    try:
        return os.open(path, flags, 0o644)
    except OSError as e:
        raise LogStorageError(f"cannot open log segment {path}: {e}") from e


def _write_fully(fd: int, parts: Sequence[Buffer], start: int, path: Path) -> int:
    """writev until every part is written; returns the bytes written. On failure cut the file back
    to `start`."""
    views = [memoryview(p).cast("B") for p in parts]
    total = sum(len(v) for v in views)
    try:
        while views:
            # short writes are rare on regular files (signals, full disk); IOV_MAX bounds one call
            n = os.writev(fd, views[:_IOV_MAX])
            if n == 0:
                raise OSError(errno.ENOSPC, "no progress writing the log")
            while views and n >= len(views[0]):
                n -= len(views.pop(0))
            if n:
                views[0] = views[0][n:]
    except OSError as e:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise LogStorageError(f"failed to append {total} bytes to {path}: {e}") from e
    return total
