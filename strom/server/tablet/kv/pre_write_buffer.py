"""The pre-write buffer of a KV tablet: writes whose changelog is in the log but not yet committed.

A PutKv appends its changelog to the log and puts its row writes here, keyed by the log offset of the
change that produced them. Later PutKvs read old rows through the buffer, so they merge against
writes that are not yet committed; lookups read only RocksDB, so clients see committed rows only.
When the high watermark passes an entry's offset, `take_until` hands the entries to the tablet for one
RocksDB WriteBatch. `truncate_from` drops entries whose changelog was cut off the log (a retried batch
found to be a duplicate, or a log truncation), restoring the key's previous buffered value.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["BufferEntry", "PreWriteBuffer"]


@dataclass(slots=True, eq=False)
class BufferEntry:
    offset: int  # log offset of the change that made this write
    key: bytes
    value: bytes | None  # None: the row is deleted
    row_delta: int  # +1 insert, -1 delete, 0 update (for the row count)
    previous: BufferEntry | None  # the key's earlier buffered write, if still buffered
    flushed: bool = False


class PreWriteBuffer:
    """Not thread-safe; the tablet's owner serializes calls."""

    __slots__ = ("_entries", "_latest")

    def __init__(self) -> None:
        self._entries: deque[BufferEntry] = deque()  # ascending offsets
        self._latest: dict[bytes, BufferEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_offset(self) -> int:
        """The offset of the newest entry, -1 when empty."""
        return self._entries[-1].offset if self._entries else -1

    def put(self, key: bytes, value: bytes | None, offset: int, row_delta: int) -> None:
        if self._entries and offset <= self._entries[-1].offset:
            raise ValueError(
                f"pre-write buffer offsets must increase: {offset} after {self._entries[-1].offset}"
            )
        previous = self._latest.get(key)
        entry = BufferEntry(offset, key, value, row_delta, previous)
        self._entries.append(entry)
        self._latest[key] = entry

    def lookup(self, key: bytes) -> BufferEntry | None:
        """The newest buffered write of `key` (its value may be None for a delete), or None."""
        return self._latest.get(key)

    def take_until(self, end_offset: int) -> list[BufferEntry]:
        """Remove and return the entries with offset < end_offset, oldest first."""
        out: list[BufferEntry] = []
        entries = self._entries
        latest = self._latest
        while entries and entries[0].offset < end_offset:
            entry = entries.popleft()
            entry.flushed = True
            entry.previous = None  # keeps chains of flushed entries from piling up
            if latest.get(entry.key) is entry:
                del latest[entry.key]
            out.append(entry)
        return out

    def truncate_from(self, offset: int) -> int:
        """Drop the entries with offset >= `offset`; returns how many."""
        entries = self._entries
        latest = self._latest
        dropped = 0
        while entries and entries[-1].offset >= offset:
            entry = entries.pop()
            dropped += 1
            if latest.get(entry.key) is entry:
                previous = entry.previous
                if previous is not None and not previous.flushed:
                    latest[entry.key] = previous
                else:
                    del latest[entry.key]
        return dropped

    def clear(self) -> None:
        self._entries.clear()
        self._latest.clear()
