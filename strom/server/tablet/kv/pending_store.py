"""The rows of a KV tablet whose RocksDB database is not created yet.

Creating a RocksDB database syncs about a dozen files (30-70 ms on this kind of disk) and rocksdict
holds the GIL meanwhile, so a server that became leader of 2,048 new primary-key buckets needed about a
minute before every bucket could take its first write. A bucket whose log is empty has no state to
restore, so its tablet starts on this in-memory store and takes writes and lookups at once; the
KvManager creates the database in the background, a few at a time, and the tablet moves the rows
over in one WriteBatch (`KvTablet.attach_db`). The local database is never the durable copy (the
changelog is the write-ahead log and a tablet is rebuilt from snapshot + changelog every leadership),
so holding these rows in memory for a while loses nothing.

Every pending store of a server counts its bytes in one `PendingBudget`; once the budget is spent,
a write to a pending tablet waits for its database instead (the KvManager moves that tablet to the
front of the queue), so memory stays bounded whatever the write rate.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["PendingBudget", "PendingStore"]

# Python's per-entry cost of a dict slot plus two bytes objects, roughly: counted with the key and
# value lengths so that many tiny rows cannot slip under the budget.
_ENTRY_OVERHEAD = 100


@dataclass(slots=True)
class PendingBudget:
    """The bytes every pending store of one server holds, against their limit."""

    limit: int
    used: int = 0

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


class PendingStore:
    """Sorted-on-demand key/value rows (committed rows only, like the RocksDB they stand for).
    Not thread-safe; the tablet's owner serializes calls."""

    __slots__ = ("_budget", "_bytes", "_rows", "_sorted")

    def __init__(self, budget: PendingBudget) -> None:
        self._budget = budget
        self._rows: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = []  # the keys in order, None when a write changed them
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._rows)

    def write(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        rows = self._rows
        change = 0
        for key, value in writes:
            old = rows.pop(key, None) if value is None else rows.get(key)
            if old is not None:
                change -= len(key) + len(old) + _ENTRY_OVERHEAD
            if (old is None) != (value is None):
                self._sorted = None  # a key came or went
            if value is not None:
                rows[key] = value
                change += len(key) + len(value) + _ENTRY_OVERHEAD
        self._bytes += change
        self._budget.used += change

    def get(self, key: bytes) -> bytes | None:
        return self._rows.get(key)

    def _keys(self) -> list[bytes]:
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self._rows)
        return keys

    def items(
        self, from_key: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) in key order from `from_key` (inclusive) to `upper` (exclusive). A snapshot
        of the keys: safe against writes made while iterating."""
        keys = self._keys()
        start = 0 if from_key is None else bisect.bisect_left(keys, from_key)
        end = len(keys) if upper is None else bisect.bisect_left(keys, upper)
        rows = self._rows
        for key in keys[start:end]:
            value = rows.get(key)
            if value is not None:
                yield key, value

    def release(self) -> None:
        """Forget every row and hand the bytes back to the budget (moved to RocksDB, or closed)."""
        self._budget.used -= self._bytes
        self._bytes = 0
        self._rows.clear()
        self._sorted = []
