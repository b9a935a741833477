"""Sparse offset index of a segment: batch base offset -> byte position in the `.log` file.

One entry per `log.index.interval-size` bytes of log. Keys are offsets relative to the segment's base
offset and values are file positions, both int32 (a segment never exceeds 2 GiB). A lookup gives the
closest indexed batch at or before an offset; the segment then walks a few batch headers forward.
"""

from __future__ import annotations

from strom.server.tablet.log.sparse_index import CorruptIndexError, SparseIndex

__all__ = ["OffsetIndex"]


class OffsetIndex(SparseIndex):
    TYPECODE = "i"

    def append(self, offset: int, position: int) -> None:
        """Index the batch starting at `offset`, stored at byte `position`."""
        if self._values and position <= self._values[-1]:
            raise ValueError(f"index position {position} does not follow {self._values[-1]} in {self.path}")
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last indexed batch starting at or before `offset`; the segment
        start when there is none."""
        i = self._floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int]:
        """The last (offset, position), or the segment start."""
        last = self._last()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after byte `position`."""
        values = self._values
        count = len(values)
        while count and values[count - 1] >= position:
            count -= 1
        self._truncate_entries(count)

    def check(self, log_size: int) -> None:
        """Cheap sanity check against the segment's log size; raises CorruptIndexError."""
        last = self._last()
        if last is None:
            return
        if self._keys[0] < 0 or self._values[0] < 0 or last[1] >= max(log_size, 1):
            raise CorruptIndexError(
                f"offset index {self.path} points past the log ({last[1]} >= {log_size} bytes)"
            )
