"""Leader epochs of one log (Kafka's KIP-101): which leader term wrote which part of the log.

Each entry says "epoch E starts at offset S"; epochs and start offsets both increase. A leader adds
(its epoch, its log end) when it takes over; a follower copies the entries of its leader as the data
they describe arrives. Truncation after a leader change then asks the new leader where the follower's
last epoch ends (OffsetForLeaderEpoch) instead of trusting the follower's high watermark, which is
how Kafka lost acknowledged records and let replicas diverge before KIP-101.

The entries live in `leader-epoch.checkpoint` next to the segments: a version line, a count line and
one "epoch start_offset" line per entry, replaced atomically on every change. A change is written to
a numbered temporary file at once (the page cache: a kill -9 right after loses nothing, as `load`
takes the newest complete one) and fsynced and renamed into place by one writer thread, in the order
of the changes, so that the caller (the event loop) never waits for the disk and an older state never
lands after a newer one. Fluss's V0/V1 batch
headers carry no leader epoch, so unlike Kafka the cache cannot be rebuilt from the log: a missing or
damaged file leaves it empty, and truncation then falls back to the high watermark as before.
"""

from __future__ import annotations

import itertools
import logging
import os
from bisect import bisect_right
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

__all__ = ["LEADER_EPOCH_FILE", "UNDEFINED", "EpochEntry", "LeaderEpochCache"]

LEADER_EPOCH_FILE = "leader-epoch.checkpoint"
UNDEFINED = -1  # Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET
_VERSION = "0"

log = logging.getLogger(__name__)

# One thread for every log's checkpoint: fsyncs and renames happen in the order of the changes.
_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leader-epoch-checkpoint")
_SEQUENCE = itertools.count()


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The epoch -> start offset entries of one log, persisted on every change."""

    def __init__(self, path: Path, entries: list[EpochEntry]) -> None:
        self.path = path
        self._entries = entries
        self._pending: Future[None] | None = None  # the last change's fsync and rename

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """The checkpoint, or a newer change the writer thread had not renamed into place yet when the
        process died (the newest temporary file that is complete)."""
        path = directory / LEADER_EPOCH_FILE
        entries = _read(path)
        pending = sorted(directory.glob(f"{LEADER_EPOCH_FILE}.*.tmp"), key=_sequence_of)
        for newest in reversed(pending):
            found = _parse(newest)
            if found is not None:
                log.info("%s: leader epochs from %s, not yet in place", directory, newest.name)
                try:
                    os.replace(newest, path)
                    entries = found
                except FileNotFoundError:
                    entries = _read(path)  # this process's writer thread renamed it just now
                break
        for leftover in pending:
            leftover.unlink(missing_ok=True)
        return cls(path, entries)

    def sync(self) -> None:
        """Wait until the last change is on disk (a clean close)."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; an epoch already known keeps its start.

        Entries that the new one contradicts (a later epoch, or a start at or after this one) go, so
        both columns stay strictly increasing. Returns whether anything changed.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._entries and self._entries[-1].epoch == epoch:
            return False
        if any(e.epoch == epoch for e in self._entries):
            return False  # an older epoch arriving late: the log already moved past it
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        if len(kept) != len(self._entries):
            log.info(
                "%s: epoch %d at offset %d replaces %s",
                self.path.parent,
                epoch,
                start_offset,
                [(e.epoch, e.start_offset) for e in self._entries if e not in kept],
            )
        self._entries = [*kept, EpochEntry(epoch, start_offset)]
        self._flush()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest known epoch <= `epoch`, the offset where it ends) — Kafka's endOffsetFor.

        The latest epoch ends at the log end; an older one where the next known epoch starts. An
        epoch below every known one answers (epoch, start of the first epoch); one above every known
        epoch (or UNDEFINED) answers (UNDEFINED, UNDEFINED).
        """
        if epoch == UNDEFINED or not self._entries:
            return UNDEFINED, UNDEFINED
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect_right(epochs, epoch)
        if higher >= len(self._entries):
            return UNDEFINED, UNDEFINED
        if higher == 0:
            return epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at `end_offset`: epochs starting there or later are gone with it."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        first = EpochEntry(below[-1].epoch, start_offset)
        self._entries = [first, *(e for e in self._entries if e.start_offset > start_offset)]
        self._flush()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._flush()

    def _flush(self) -> None:
        lines = [_VERSION, str(len(self._entries)), *(f"{e.epoch} {e.start_offset}" for e in self._entries)]
        tmp = self.path.with_name(f"{self.path.name}.{next(_SEQUENCE):012d}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode())
        finally:
            os.close(fd)
        # fsynced off the caller's thread: rare (leader changes), but a disk under load holds an fsync
        # for long, and the caller is the event loop; a lost entry would weaken truncation
        self._pending = _WRITER.submit(_persist, tmp, self.path)


def _persist(tmp: Path, path: Path) -> None:
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except FileNotFoundError:
        pass  # the log was deleted meanwhile
    except OSError as e:
        # a failing disk: the log's own writes report it to the data directory; said here as well
        log.error("could not write leader epoch checkpoint %s: %s", path, e)


def _sequence_of(tmp: Path) -> int:
    try:
        return int(tmp.name.rsplit(".", 2)[-2])
    except (ValueError, IndexError):
        return -1


def _read(path: Path) -> list[EpochEntry]:
    try:
        found = _parse(path, warn=True)
    except FileNotFoundError:
        return []
    return found if found is not None else []


def _parse(path: Path, warn: bool = False) -> list[EpochEntry] | None:
    """The entries of a checkpoint file, or None when it is unreadable or damaged (a temporary file
    cut short by a power cut)."""
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        if warn:
            raise
        return None
    except (OSError, UnicodeDecodeError) as e:
        if warn:
            log.warning("unreadable leader epoch checkpoint %s (%s): starting without epochs", path, e)
        return None
    try:
        if lines[0] != _VERSION:
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        entries = []
        for line in lines[2 : 2 + count]:
            epoch, start = line.split()
            entries.append(EpochEntry(int(epoch), int(start)))
        if len(entries) != count:
            raise ValueError(f"{len(entries)} entries, expected {count}")
        for a, b in pairwise(entries):
            if not (a.epoch < b.epoch and a.start_offset < b.start_offset):
                raise ValueError(f"entries out of order: {a} before {b}")
    except (ValueError, IndexError) as e:
        if warn:
            log.warning("damaged leader epoch checkpoint %s (%s): starting without epochs", path, e)
        return None
    return entries
