"""What log scanners return: Arrow batches with their bucket and offsets, or records one by one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.common.table_bucket import TableBucket
from strom.record.change_type import ChangeType

__all__ = ["ScanBatch", "ScanRecord", "ScanRecords"]


@dataclass(frozen=True, slots=True)
class ScanBatch:
    """Consecutive rows of one bucket: row ``i`` has offset ``base_offset + i``.

    `timestamp` is the commit time (epoch ms) the server gave the log batch the rows came from.
    `change_types` holds one `ChangeType` byte per row for changelogs (primary-key tables); None
    means every row is append-only (+A). Rows of a KV snapshot (startup mode ``full``) have no offset
    nor timestamp: `base_offset` and `timestamp` are -1 and every row's offset is -1.
    """

    bucket: TableBucket
    batch: pa.RecordBatch
    base_offset: int
    timestamp: int
    change_types: bytes | None = None

    @property
    def num_rows(self) -> int:
        return self.batch.num_rows

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.batch.num_rows - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.batch.num_rows

    @property
    def from_snapshot(self) -> bool:
        """Whether these are KV snapshot rows (no offsets)."""
        return self.base_offset < 0

    def offsets(self) -> pa.Array:
        """The offset of every row (int64; -1 for snapshot rows)."""
        if self.from_snapshot:
            return pa.repeat(pa.scalar(-1, pa.int64()), self.batch.num_rows)
        return pa.array(range(self.base_offset, self.next_offset), pa.int64())

    def change_type_array(self) -> pa.Array:
        """The change type of every row as int8 (0 = +A, 1 = +I, 2 = -U, 3 = +U, 4 = -D)."""
        if self.change_types is None:
            return pa.repeat(pa.scalar(int(ChangeType.APPEND_ONLY), pa.int8()), self.batch.num_rows)
        return pa.Array.from_buffers(pa.int8(), self.batch.num_rows, [None, pa.py_buffer(self.change_types)])

    def records(self) -> list[ScanRecord]:
        rows = self.batch.to_pylist()
        types = self.change_types
        if self.from_snapshot:
            return [ScanRecord(-1, self.timestamp, ChangeType.INSERT, row) for row in rows]
        if types is None:
            return [
                ScanRecord(self.base_offset + i, self.timestamp, ChangeType.APPEND_ONLY, row)
                for i, row in enumerate(rows)
            ]
        return [
            ScanRecord(self.base_offset + i, self.timestamp, ChangeType(types[i]), row)
            for i, row in enumerate(rows)
        ]


@dataclass(frozen=True, slots=True)
class ScanRecord:
    offset: int
    timestamp: int
    change_type: ChangeType
    row: dict[str, Any]

    def __repr__(self) -> str:
        return f"ScanRecord({self.change_type.short_string} @{self.offset} {self.row})"


class ScanRecords(Mapping[TableBucket, list[ScanRecord]]):
    """Records of one poll, grouped by bucket (each bucket's records in offset order)."""

    __slots__ = ("_by_bucket",)

    def __init__(self, by_bucket: dict[TableBucket, list[ScanRecord]] | None = None) -> None:
        self._by_bucket = by_bucket or {}

    @classmethod
    def of(cls, batches: list[ScanBatch]) -> ScanRecords:
        by_bucket: dict[TableBucket, list[ScanRecord]] = {}
        for batch in batches:
            by_bucket.setdefault(batch.bucket, []).extend(batch.records())
        return cls(by_bucket)

    def buckets(self) -> list[TableBucket]:
        return list(self._by_bucket)

    def records(self, bucket: TableBucket) -> list[ScanRecord]:
        return self._by_bucket.get(bucket, [])

    def count(self) -> int:
        return sum(len(r) for r in self._by_bucket.values())

    def is_empty(self) -> bool:
        return not any(self._by_bucket.values())

    def __getitem__(self, bucket: TableBucket) -> list[ScanRecord]:
        return self._by_bucket[bucket]

    def __len__(self) -> int:
        return len(self._by_bucket)

    def __iter__(self) -> Iterator[TableBucket]:
        return iter(self._by_bucket)

    def all(self) -> Iterator[ScanRecord]:
        """Every record, bucket by bucket."""
        for records in self._by_bucket.values():
            yield from records

    def __repr__(self) -> str:
        return f"ScanRecords({self.count()} records in {len(self._by_bucket)} buckets)"
