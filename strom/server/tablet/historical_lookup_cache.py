"""A bounded in-memory cache of the lake rows that lookups of expired partitions read.

Without it every such lookup reads the whole lake bucket of the original partition again. An entry
holds one bucket of one expired partition as of one lake snapshot: its rows indexed by encoded key.
It is keyed by (table id, schema id, partition, bucket) and stamped with the lake snapshot id it
was read at; a lookup that finds a newer snapshot in the lake reads the bucket again and replaces the
entry, so a new tiering round (or compaction) is seen at once. Entries are evicted least recently
used first once the cached rows exceed the bound (`server.historical-partition.lookup-cache.max-rows`);
a bucket larger than the bound is not cached at all. Lookups run in executor threads, hence the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (table id, schema id, partition name, bucket)
CacheKey = tuple[int, int, str, int]
BucketIndex = dict[bytes, list[Any]]


@dataclass
class _Entry:
    snapshot_id: int
    rows: BucketIndex


class HistoricalLookupCache:
    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._entries: OrderedDict[CacheKey, _Entry] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def index(self, key: CacheKey, snapshot_id: int, read: Callable[[], BucketIndex]) -> BucketIndex:
        """The bucket's rows as of `snapshot_id`: cached, or `read()` and cached."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.snapshot_id == snapshot_id:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry.rows
            self.misses += 1
        rows = read()  # outside the lock: a lake read may take long
        with self._lock:
            current = self._entries.get(key)
            if current is not None and current.snapshot_id > snapshot_id:
                return rows  # another lookup cached a newer snapshot meanwhile: keep that one
            if current is not None:
                self._rows -= len(self._entries.pop(key).rows)
            if len(rows) <= self.max_rows:
                self._entries[key] = _Entry(snapshot_id, rows)
                self._rows += len(rows)
                while self._rows > self.max_rows:
                    _, evicted = self._entries.popitem(last=False)
                    self._rows -= len(evicted.rows)
        return rows

    @property
    def cached_rows(self) -> int:
        return self._rows
