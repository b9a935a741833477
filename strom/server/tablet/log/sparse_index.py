"""A sorted, append-only list of (key, value) pairs kept in memory and mirrored to a binary file.

This is the common machinery of the offset index and the time index. The file is the entries'
little-endian machine integers, key then value, back to back; in memory the keys and values are two
`array`s so that a lookup is one C-level `bisect` and loading a file is one `frombytes`. Entries
reach the file when the segment is persisted (roll, flush, close), not on every append: an index is
a cache that recovery can always rebuild from the log.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar, Self

__all__ = ["CorruptIndexError", "SparseIndex"]

_BIG_ENDIAN_HOST = sys.byteorder == "big"


class CorruptIndexError(Exception):
    """An index file that cannot be trusted; the segment rebuilds it from the log."""


class SparseIndex:
    """Entries sorted by strictly increasing key. Subclasses pick the integer width."""

    TYPECODE: ClassVar[str]  # array typecode used for both key and value

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry_size())
        self._keys = array(self.TYPECODE)
        self._values = array(self.TYPECODE)
        self._persisted = 0  # entries known to be in the file, in the same order
        self._file_entries = 0  # entries the file holds (may exceed _persisted after a truncation)

    @classmethod
    def entry_size(cls) -> int:
        return 2 * array(cls.TYPECODE).itemsize

    @classmethod
    def load(cls, path: Path, base_offset: int, max_bytes: int) -> Self:
        """Read the index file; raises CorruptIndexError when it is missing or malformed."""
        index = cls(path, base_offset, max_bytes)
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise CorruptIndexError(f"index file {path} is missing") from e
        if len(data) % index.entry_size():
            raise CorruptIndexError(f"index file {path} has {len(data)} bytes, not whole entries")
        both = array(cls.TYPECODE)
        both.frombytes(data)
        if _BIG_ENDIAN_HOST:
            both.byteswap()
        index._keys = both[0::2]
        index._values = both[1::2]
        index._persisted = index._file_entries = len(index._keys)
        keys = index._keys
        if len(keys) > 1 and keys[0] >= keys[-1]:
            raise CorruptIndexError(f"index file {path} is not sorted")
        return index

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    def _append(self, key: int, value: int) -> None:
        keys = self._keys
        if keys and key <= keys[-1]:
            raise ValueError(f"index key {key} does not follow the last key {keys[-1]} in {self.path}")
        keys.append(key)
        self._values.append(value)

    def _floor(self, key: int) -> int:
        """Index of the last entry whose key is <= key, or -1."""
        return bisect_right(self._keys, key) - 1

    def _truncate_entries(self, count: int) -> None:
        if count < len(self._keys):
            del self._keys[count:]
            del self._values[count:]
            self._persisted = min(self._persisted, count)

    def reset(self) -> None:
        self._truncate_entries(0)

    def _last(self) -> tuple[int, int] | None:
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1]

    def persist(self) -> None:
        """Bring the file in line with memory (no fsync): write new entries, cut dropped ones."""
        count = len(self._keys)
        if self._persisted == count and self._file_entries == count and self.path.exists():
            return
        start = self._persisted
        both = array(self.TYPECODE, bytes(2 * (count - start) * array(self.TYPECODE).itemsize))
        both[0::2] = self._keys[start:]
        both[1::2] = self._values[start:]
        if _BIG_ENDIAN_HOST:
            both.byteswap()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if both:
                os.pwrite(fd, both.tobytes(), start * self.entry_size())
            os.ftruncate(fd, count * self.entry_size())
        finally:
            os.close(fd)
        self._persisted = self._file_entries = count

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._persisted = self._file_entries = 0
