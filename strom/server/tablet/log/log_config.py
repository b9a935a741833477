"""Settings of one log tablet, named after the Fluss options they come from."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DAY_MS", "LogConfig"]

DAY_MS = 24 * 60 * 60 * 1000
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How a log tablet rolls, indexes, flushes and expires its segments.

    The tablet server fills this from its configuration and the table's properties; the option each
    field mirrors is named in its comment.
    """

    # `log.segment.file-size`: a segment is rolled before an append would take it past this size.
    segment_bytes: int = 1024 * _MIB
    # Strom's `log.segment.roll-interval`: roll the active segment once its first batch is this old,
    # so that time-based retention can delete data of quiet tables. None: roll by size only.
    segment_ms: int | None = 7 * DAY_MS
    # `log.index.interval-size`: bytes of log between two entries of the sparse offset index.
    index_interval_bytes: int = 4096
    # `log.index.file-size`: the most bytes an index file may hold; a full index rolls the segment.
    index_max_bytes: int = 10 * _MIB
    # `table.log.ttl`: closed segments whose newest batch is older than this are deleted.
    # None or 0 keeps the log forever.
    retention_ms: int | None = 7 * DAY_MS
    # `log.flush.interval-messages`: fsync once this many records are unflushed. None (Fluss's
    # default, Long.MAX_VALUE) never fsyncs on append: durability comes from replication, and
    # segments are fsynced when they roll and when the tablet closes.
    flush_interval_messages: int | None = None
    # Strom's `log.max-batch-size`: the largest single record batch accepted (never more than a
    # segment); larger ones fail with RecordTooLargeError.
    max_batch_bytes: int = 64 * _MIB
    # `server.writer-id.expiration-time`: idempotent-writer state unused for this long is dropped.
    writer_expiration_ms: int = 7 * DAY_MS

    def __post_init__(self) -> None:
        if not 1024 <= self.segment_bytes <= 2**31 - 1:
            # index positions are int32
            raise ValueError(f"segment_bytes must be between 1 KiB and 2 GiB - 1, got {self.segment_bytes}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        if self.index_max_bytes < 12:
            raise ValueError(f"index_max_bytes must hold at least one entry, got {self.index_max_bytes}")
        if self.max_batch_bytes < 48:
            raise ValueError(f"max_batch_bytes must be at least one header, got {self.max_batch_bytes}")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError(f"flush_interval_messages must be >= 1, got {self.flush_interval_messages}")

    @property
    def batch_size_limit(self) -> int:
        """The effective per-batch limit: a batch never spans segments."""
        return min(self.max_batch_bytes, self.segment_bytes)

    @property
    def retention_enabled(self) -> bool:
        return bool(self.retention_ms and self.retention_ms > 0)
