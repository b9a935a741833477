"""The idempotent writer's bookkeeping: one writer id, and per bucket the batch sequences in flight.

The rules are Fluss's (IdempotenceManager in the Java and Rust clients):

* A writer id comes from InitWriter. Batches of a bucket get sequences 0, 1, 2... when first sent;
  the server appends only the next sequence and answers a resent one with its original offset.
* At most `max_in_flight` batches of a bucket are unacknowledged at once. A batch being retried
  goes out again only once it is the oldest unacknowledged batch of its bucket, so the bucket's
  order holds.
* A batch that fails for good (not retried) gives back its sequence: later in-flight batches of
  the bucket move down by one and are marked as "reset", which lets them be retried when the
  server then calls them out of order.
* OUT_OF_ORDER_SEQUENCE or UNKNOWN_WRITER_ID for a batch that cannot be retried throws the whole
  state away: the next batch asks for a new writer id and every bucket starts again at 0.
* A batch whose sequence is at or below the last acknowledged one was written already (only its
  answer got lost), so OUT_OF_ORDER_SEQUENCE for it counts as success.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field

from strom.common.errors import FlussError, OutOfOrderSequenceError, UnknownWriterIdError
from strom.common.table_bucket import TableBucket
from strom.record.log_batch import NO_WRITER_ID

__all__ = ["IdempotenceManager"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Bucket:
    writer_id: int = NO_WRITER_ID
    next_sequence: int = 0
    last_acked: int = -1
    # (sequence, batch id), ordered by sequence.
    in_flight: list[tuple[int, int]] = field(default_factory=list)
    # Batches whose sequence moved down after an earlier batch failed.
    reset: set[int] = field(default_factory=set)

    def position(self, batch_id: int) -> int | None:
        for i, (_, bid) in enumerate(self.in_flight):
            if bid == batch_id:
                return i
        return None


class IdempotenceManager:
    def __init__(self, enabled: bool, max_in_flight: int) -> None:
        self.enabled = enabled
        self.max_in_flight = max_in_flight
        self.writer_id = NO_WRITER_ID
        self._buckets: dict[TableBucket, _Bucket] = {}

    # ------------------------------------------------------------------ writer id

    @property
    def has_writer_id(self) -> bool:
        return self.writer_id != NO_WRITER_ID

    def set_writer_id(self, writer_id: int) -> None:
        self.writer_id = writer_id

    def reset_writer_id(self) -> None:
        self.writer_id = NO_WRITER_ID
        self._buckets.clear()

    # ------------------------------------------------------------------ sending

    def _entry(self, bucket: TableBucket) -> _Bucket:
        entry = self._buckets.get(bucket)
        if entry is None:
            entry = self._buckets[bucket] = _Bucket()
        return entry

    def in_flight_count(self, bucket: TableBucket) -> int:
        entry = self._buckets.get(bucket)
        return 0 if entry is None else len(entry.in_flight)

    def can_send_more(self, bucket: TableBucket) -> bool:
        return self.in_flight_count(bucket) < self.max_in_flight

    def is_first_in_flight(self, bucket: TableBucket, batch_id: int) -> bool:
        entry = self._buckets.get(bucket)
        return entry is not None and bool(entry.in_flight) and entry.in_flight[0][1] == batch_id

    def assign_sequence(self, bucket: TableBucket, batch_id: int) -> int:
        """The next sequence of `bucket` for a batch sent for the first time (now in flight)."""
        entry = self._entry(bucket)
        if entry.writer_id != self.writer_id and not entry.in_flight:
            # A new writer id: this bucket starts over.
            entry.writer_id = self.writer_id
            entry.next_sequence = 0
            entry.last_acked = -1
        sequence = entry.next_sequence
        entry.next_sequence += 1
        bisect.insort(entry.in_flight, (sequence, batch_id))
        return sequence

    def current_sequence(self, bucket: TableBucket, batch_id: int) -> int | None:
        """The batch's sequence as possibly moved down by earlier failures."""
        entry = self._buckets.get(bucket)
        if entry is None:
            return None
        i = entry.position(batch_id)
        return None if i is None else entry.in_flight[i][0]

    # ------------------------------------------------------------------ outcomes

    def completed(self, bucket: TableBucket, batch_id: int, batch_writer_id: int) -> None:
        if batch_writer_id != self.writer_id:
            return  # acknowledged under an older writer id whose state is gone
        entry = self._buckets.get(bucket)
        if entry is None:
            return
        i = entry.position(batch_id)
        if i is not None:
            sequence, _ = entry.in_flight.pop(i)
            entry.reset.discard(batch_id)
            entry.last_acked = max(entry.last_acked, sequence)

    def failed(
        self,
        bucket: TableBucket,
        batch_id: int,
        batch_writer_id: int,
        error: BaseException | None,
        adjust_sequences: bool,
    ) -> None:
        """A batch failed for good. `adjust_sequences` when it failed before running out of retries."""
        if batch_writer_id != self.writer_id:
            return
        if isinstance(error, OutOfOrderSequenceError | UnknownWriterIdError):
            # Nothing can be promised about what this writer id already wrote: start afresh.
            log.warning("resetting the idempotent writer id after %s on %s", type(error).__name__, bucket)
            self.reset_writer_id()
            return
        entry = self._buckets.get(bucket)
        if entry is None:
            return
        i = entry.position(batch_id)
        entry.reset.discard(batch_id)
        if i is None:
            return
        failed_sequence, _ = entry.in_flight.pop(i)
        if not adjust_sequences:
            return
        moved = []
        for sequence, bid in entry.in_flight:
            if sequence > failed_sequence:
                sequence -= 1
                entry.reset.add(bid)
            moved.append((sequence, bid))
        entry.in_flight = moved
        if entry.next_sequence > failed_sequence:
            entry.next_sequence -= 1

    def is_already_committed(self, bucket: TableBucket, sequence: int) -> bool:
        entry = self._buckets.get(bucket)
        return entry is not None and entry.last_acked >= 0 and sequence <= entry.last_acked

    def can_retry_for_error(
        self, bucket: TableBucket, sequence: int, batch_id: int, error: FlussError
    ) -> bool:
        """Whether a sequence error is expected fallout of an earlier batch's failure (so retry)."""
        if not self.has_writer_id:
            return False
        entry = self._buckets.get(bucket)
        was_reset = entry is not None and batch_id in entry.reset
        if isinstance(error, OutOfOrderSequenceError):
            expected = (entry.last_acked + 1) if entry is not None else 0
            return was_reset or sequence != expected
        if isinstance(error, UnknownWriterIdError):
            return was_reset
        return False
