"""Tiering splits: the unit of work an executor runs — one bucket's offset range of one round."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TieringSplit:
    """Copy offsets [start_offset, end_offset) of one bucket's log (for PK tables: its changelog)."""

    table_id: int
    database: str
    table: str
    bucket: int
    partition_id: int | None
    partition_name: str | None
    start_offset: int
    end_offset: int

    @property
    def key(self) -> tuple[int | None, int]:
        return (self.partition_id, self.bucket)

    def __str__(self) -> str:
        where = f"{self.database}.{self.table}" + (f"[{self.partition_name}]" if self.partition_name else "")
        return f"{where} bucket {self.bucket} offsets [{self.start_offset}, {self.end_offset})"


def plan_splits(
    *,
    table_id: int,
    database: str,
    table: str,
    buckets: dict[tuple[int | None, int], tuple[int, int]],
    partition_names: dict[int, str],
) -> list[TieringSplit]:
    """One split per bucket whose end offset is beyond what the lake already has.

    `buckets` maps (partition id, bucket) to (lake offset, current end offset).
    """
    splits = []
    for (partition_id, bucket), (start, end) in sorted(
        buckets.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])
    ):
        if end > start:
            splits.append(
                TieringSplit(
                    table_id,
                    database,
                    table,
                    bucket,
                    partition_id,
                    partition_names.get(partition_id) if partition_id is not None else None,
                    start,
                    end,
                )
            )
    return splits
