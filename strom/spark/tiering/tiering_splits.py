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
    # PK tables not in the lake yet: first the rows of this KV snapshot (which covers the changelog below
    # start_offset), then the changelog from start_offset
    snapshot_id: int | None = None

    @property
    def key(self) -> tuple[int | None, int]:
        return (self.partition_id, self.bucket)

    def __str__(self) -> str:
        where = f"{self.database}.{self.table}" + (f"[{self.partition_name}]" if self.partition_name else "")
        snapshot = f"snapshot {self.snapshot_id} + " if self.snapshot_id is not None else ""
        return f"{where} bucket {self.bucket} {snapshot}offsets [{self.start_offset}, {self.end_offset})"


def plan_splits(
    *,
    table_id: int,
    database: str,
    table: str,
    buckets: dict[tuple[int | None, int], tuple[int, int]],
    partition_names: dict[int, str],
    snapshots: dict[tuple[int | None, int], tuple[int, int]] | None = None,
) -> list[TieringSplit]:
    """One split per bucket whose end offset is beyond what the lake already has.

    `buckets` maps (partition id, bucket) to (lake offset, current end offset); `snapshots` maps the
    buckets that should start from a KV snapshot to (snapshot id, the log offset it covers).
    """
    splits = []
    for key, (start, end) in sorted(
        buckets.items(), key=lambda kv: (kv[0][0] if kv[0][0] is not None else -1, kv[0][1])
    ):
        partition_id, bucket = key
        snapshot = (snapshots or {}).get(key)
        if snapshot is not None:
            start = snapshot[1]
        if end > start or snapshot is not None:
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
                    snapshot[0] if snapshot is not None else None,
                )
            )
    return splits
