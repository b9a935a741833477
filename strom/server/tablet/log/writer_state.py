"""Idempotent-writer state of one log: which batch sequences each writer id has already appended.

Fluss clients with `client.writer.enable-idempotence` stamp each batch with a writer id and a batch
sequence (0, 1, 2... per bucket). The leader accepts only the next sequence, answers a retried batch
that is still remembered with the offsets it got the first time instead of writing it twice, and
refuses gaps. This module keeps, per writer id, the last few batches and the time of the last one,
and persists that map to `<20-digit offset>.writer_snapshot` files so a restart only has to replay
the log after the newest snapshot.

What Fluss does, and so do we:
* A retried batch is looked up among the writer's last five batches by sequence alone. On the
  leader the whole append is then skipped and answered with the original offsets; a follower
  receiving one raises DuplicateSequenceError.
* Otherwise the sequence must be last + 1 (0 after 2**31 - 1). On the leader a writer we hold no
  state for (new, expired, or lost with its snapshot) must start at 0; anything else is an
  OutOfOrderSequenceError. Fluss never sends UnknownWriterIdError from here: its client resets the
  writer id on either error. A follower accepts any sequence for a writer it has no state for,
  because expiry runs on a timer and may drop a writer on the follower before the leader.
* Writers idle longer than `server.writer-id.expiration-time` are dropped, and skipped when a
  snapshot is loaded.

Kafka's idempotent producers (the Kafka listener, strom/server/kafka) keep the same state with
Kafka's numbering: their ids have bit 62 set (Fluss writer ids are 62-bit), a batch's sequence is
the sequence of its first record, and the next batch must start where the last one's records end
(last + its record count) instead of at last + 1.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.errors import DuplicateSequenceError, OutOfOrderSequenceError
from strom.server.tablet.log.segment import set_aside

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "WriterEntry",
    "WriterStateManager",
]

_log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".writer_snapshot"
NO_WRITER_ID = -1
NO_BATCH_SEQUENCE = -1
_MAX_SEQUENCE = 2**31 - 1
KAFKA_WRITER_BIT = 1 << 62


def is_kafka_writer(writer_id: int) -> bool:
    return writer_id >= KAFKA_WRITER_BIT


_SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one batch of a writer landed."""

    batch_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class WriterEntry:
    """The remembered tail of one writer's batches, oldest first."""

    writer_id: int
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].batch_sequence if self.batches else NO_BATCH_SEQUENCE

    @property
    def last_step(self) -> int:
        """How far the next sequence is from the last one: 1 batch for Fluss, its records for Kafka."""
        if not self.batches or not is_kafka_writer(self.writer_id):
            return 1
        last = self.batches[-1]
        return last.last_offset - last.first_offset + 1

    def find(self, batch_sequence: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.batch_sequence == batch_sequence:
                return batch
        return None

    def add(self, batch: BatchMetadata) -> None:
        self.batches.append(batch)  # the deque's maxlen drops the oldest
        self.last_timestamp = batch.timestamp


def _in_sequence(last: int, nxt: int, *, leader: bool, step: int = 1) -> bool:
    if last == NO_BATCH_SEQUENCE:
        return not leader or nxt == 0
    return nxt == (last + step) % (_MAX_SEQUENCE + 1)  # sequences wrap to 0 after 2**31 - 1


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class WriterStateManager:
    """Writer id -> WriterEntry for one log, plus its snapshot files. Not thread-safe."""

    def __init__(self, directory: Path, expiration_ms: int) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.writers: dict[int, WriterEntry] = {}
        # The log offset the in-memory map reflects: every batch below it has been applied.
        self.map_end_offset = 0
        self._last_snapshot_offset = -1

    # ---- the append path -------------------------------------------------------------------

    def validate(self, batches: Iterable[tuple[int, ...]], *, leader: bool) -> BatchMetadata | None:
        """Check (writer id, batch sequence[, record count]) of the batches of one append, in order.

        Returns the original placement when a batch repeats a remembered one (leader: the caller
        answers with it and writes nothing). Raises OutOfOrderSequenceError on a gap or regression,
        DuplicateSequenceError for a repeat on a follower.
        """
        pending: dict[int, tuple[int, int]] = {}  # writer id -> (sequence, step after it)
        for item in batches:
            writer_id, sequence = item[0], item[1]
            if writer_id == NO_WRITER_ID:
                continue
            kafka = is_kafka_writer(writer_id)
            step_after = item[2] if kafka and len(item) > 2 else 1
            entry = self.writers.get(writer_id)
            if entry is not None:
                duplicate = entry.find(sequence)
                if duplicate is not None:
                    if leader:
                        return duplicate
                    raise DuplicateSequenceError(
                        f"duplicate batch of writer {writer_id} with sequence {sequence}, "
                        f"already at offset {duplicate.last_offset}"
                    )
            last, step = pending.get(
                writer_id,
                (entry.last_sequence, entry.last_step) if entry is not None else (NO_BATCH_SEQUENCE, 1),
            )
            if not _in_sequence(last, sequence, leader=leader, step=step):
                if last == NO_BATCH_SEQUENCE:
                    detail = "no state is held for this writer (new or expired), so it must start at 0"
                else:
                    detail = f"the next sequence must be {(last + step) % (_MAX_SEQUENCE + 1)}"
                raise OutOfOrderSequenceError(
                    f"out of order batch sequence {sequence} for writer {writer_id}: {detail}"
                )
            pending[writer_id] = (sequence, step_after)
        return None

    def record(
        self, writer_id: int, sequence: int, first_offset: int, last_offset: int, timestamp: int
    ) -> None:
        """Remember a batch that was appended (or replayed from the log). Never raises."""
        entry = self.writers.get(writer_id)
        if entry is None:
            entry = self.writers[writer_id] = WriterEntry(writer_id)
        elif entry.batches and not _in_sequence(
            entry.last_sequence, sequence, leader=True, step=entry.last_step
        ):
            entry.batches.clear()  # a replayed restart of the sequence: older batches no longer count
        entry.add(BatchMetadata(sequence, first_offset, last_offset, timestamp))

    def remove_expired(self, now_ms: int) -> int:
        """Forget writers idle longer than the expiration time; returns how many."""
        expired = [w for w, e in self.writers.items() if now_ms - e.last_timestamp > self.expiration_ms]
        for writer_id in expired:
            del self.writers[writer_id]
        return len(expired)

    # ---- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            try:
                offsets.append(int(path.name[: -len(SNAPSHOT_SUFFIX)]))
            except ValueError:
                continue
        return sorted(offsets)

    def take_snapshot(self, *, sync: bool = False) -> Path | None:
        """Write the map as of `map_end_offset` unless a snapshot at that offset exists already."""
        offset = self.map_end_offset
        path = snapshot_path(self.directory, offset)
        if offset == self._last_snapshot_offset and path.exists():
            return None
        body = {
            "version": _SNAPSHOT_VERSION,
            "offset": offset,
            "writers": [
                {
                    "writer_id": e.writer_id,
                    "last_timestamp": e.last_timestamp,
                    "batches": [
                        [b.batch_sequence, b.first_offset, b.last_offset, b.timestamp] for b in e.batches
                    ],
                }
                for e in self.writers.values()
            ],
        }
        data = json.dumps(body, separators=(",", ":")).encode()
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._last_snapshot_offset = offset
        return path

    def load_latest_snapshot(self, max_offset: int, now_ms: int) -> int | None:
        """Replace the map with the newest readable snapshot at or below `max_offset`.

        Snapshots above `max_offset` (from a log that was since truncated) and unreadable ones are
        deleted. Returns the snapshot's offset, or None when there is none (the map is then empty).
        """
        self.writers.clear()
        for offset in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.directory, offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                writers = _read_snapshot(path)
            except (OSError, ValueError, KeyError, TypeError) as e:
                _log.warning("dropping unreadable writer snapshot %s: %s", path, e)
                path.unlink(missing_ok=True)
                continue
            for entry in writers:
                if now_ms - entry.last_timestamp <= self.expiration_ms:
                    self.writers[entry.writer_id] = entry
            self.map_end_offset = offset
            self._last_snapshot_offset = offset
            return offset
        return None

    def delete_snapshots_below(self, offset: int) -> None:
        """Delete snapshots older than `offset` (their segments are gone)."""
        for snap in self.snapshot_offsets():
            if snap < offset:
                snapshot_path(self.directory, snap).unlink(missing_ok=True)

    def retire_snapshots_below(self, offset: int) -> list[Path]:
        """Set aside the snapshots older than `offset` (their segments are gone); returns their new
        paths, for the caller to unlink off the event loop."""
        return set_aside(snapshot_path(self.directory, s) for s in self.snapshot_offsets() if s < offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.writers.clear()
        for snap in self.snapshot_offsets():
            snapshot_path(self.directory, snap).unlink(missing_ok=True)
        self.map_end_offset = offset
        self._last_snapshot_offset = -1


def _read_snapshot(path: Path) -> list[WriterEntry]:
    body = json.loads(path.read_bytes())
    if body.get("version") != _SNAPSHOT_VERSION:
        raise ValueError(f"unsupported writer snapshot version {body.get('version')!r}")
    entries = []
    for item in body["writers"]:
        entry = WriterEntry(int(item["writer_id"]), int(item["last_timestamp"]))
        for seq, first, last, ts in item["batches"]:
            entry.batches.append(BatchMetadata(int(seq), int(first), int(last), int(ts)))
        entries.append(entry)
    return entries
