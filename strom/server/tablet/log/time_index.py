"""Sparse time index of a segment: commit timestamp -> offset of the first batch carrying it.

Written alongside the offset index: at each index point the segment records the largest commit
timestamp seen so far and the base offset of the batch that first reached it, if that timestamp is
newer than the last entry. Keys (timestamps, ms) are strictly increasing int64; values are int64
offsets relative to the segment base.
"""

from __future__ import annotations

from strom.server.tablet.log.sparse_index import CorruptIndexError, SparseIndex

__all__ = ["TimeIndex"]


class TimeIndex(SparseIndex):
    TYPECODE = "q"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record (timestamp, offset) unless an entry with this or a newer timestamp exists."""
        keys = self._keys
        if keys and timestamp <= keys[-1]:
            return
        self._append(timestamp, offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is strictly before `timestamp`: every batch up to
        it is older than `timestamp`, so a search may start there. None when there is none."""
        i = self._floor(timestamp - 1)
        if i < 0:
            return None
        return self.base_offset + self._values[i]

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the newest entry."""
        last = self._last()
        if last is None:
            return None
        return last[0], self.base_offset + last[1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries pointing at `offset` or later."""
        values = self._values
        rel = offset - self.base_offset
        count = len(values)
        while count and values[count - 1] >= rel:
            count -= 1
        self._truncate_entries(count)

    def check(self, next_offset: int) -> None:
        last = self._last()
        if last is None:
            return
        if self._values[0] < 0 or self.base_offset + last[1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"time index {self.path} points past the segment's last offset")
