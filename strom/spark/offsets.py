"""Streaming offsets: the next log offset of every bucket (and partition) a stream reads.

Spark stores these verbatim in the checkpoint (``offsets/N``) and hands them back on restart, so
they are the only durable read position; the JSON is stable (ordered keys) because Spark decides
"no new data" by comparing two offsets' JSON. Shape::

    {"version": 1, "table_id": 7, "buckets": {"0": 120, "1": 98}}                    # unpartitioned
    {"version": 1, "table_id": 7, "partitions": {"12": {"name": "eu", "buckets": {"0": 5}}}}

A bucket of a primary-key table that still has to emit its KV snapshot (startup mode ``full``)
holds ``{"snapshot": <id>, "offset": <log offset after it>}`` instead of a number; with a union read,
a bucket that still has to emit the lake's rows holds ``{"lake": <lake snapshot id>, "offset": <the
lake's offset>}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OFFSETS_VERSION = 1


@dataclass(frozen=True, order=True)
class BucketKey:
    """A bucket of an unpartitioned table (partition_id None) or of one partition."""

    partition_id: int | None
    bucket: int

    def sort_key(self) -> tuple[int, int]:
        return (-1 if self.partition_id is None else self.partition_id, self.bucket)


@dataclass(frozen=True)
class Position:
    """Where a bucket's stream continues: a log offset, after first emitting a KV snapshot or (union
    reads) the lake's rows below the offset, if given."""

    offset: int
    snapshot_id: int | None = None
    lake_snapshot_id: int | None = None

    def to_json(self) -> int | dict[str, int]:
        if self.snapshot_id is not None:
            return {"snapshot": self.snapshot_id, "offset": self.offset}
        if self.lake_snapshot_id is not None:
            return {"lake": self.lake_snapshot_id, "offset": self.offset}
        return self.offset

    @classmethod
    def from_json(cls, value: Any) -> Position:
        if isinstance(value, dict):
            if "lake" in value:
                return cls(int(value["offset"]), lake_snapshot_id=int(value["lake"]))
            return cls(int(value["offset"]), int(value["snapshot"]))
        return cls(int(value))


class OffsetsError(ValueError):
    """A checkpointed offset does not belong to this table or cannot be read."""


@dataclass(frozen=True)
class StreamOffsets:
    table_id: int
    positions: Mapping[BucketKey, Position] = field(default_factory=dict)
    partition_names: Mapping[int, str] = field(default_factory=dict)

    def sorted_keys(self) -> list[BucketKey]:
        return sorted(self.positions, key=BucketKey.sort_key)

    def get(self, key: BucketKey) -> Position | None:
        return self.positions.get(key)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": OFFSETS_VERSION, "table_id": self.table_id}
        unpartitioned = {
            str(k.bucket): self.positions[k].to_json() for k in self.sorted_keys() if k.partition_id is None
        }
        partitioned: dict[str, Any] = {}
        for key in self.sorted_keys():
            if key.partition_id is None:
                continue
            entry = partitioned.setdefault(
                str(key.partition_id),
                {"name": self.partition_names.get(key.partition_id, ""), "buckets": {}},
            )
            entry["buckets"][str(key.bucket)] = self.positions[key].to_json()
        if unpartitioned or not partitioned:
            out["buckets"] = unpartitioned
        if partitioned:
            out["partitions"] = partitioned
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], expected_table_id: int | None = None) -> StreamOffsets:
        try:
            version = int(obj.get("version", OFFSETS_VERSION))
            if version != OFFSETS_VERSION:
                raise OffsetsError(f"Unsupported offsets version {version} (this reader writes 1).")
            table_id = int(obj["table_id"])
            positions: dict[BucketKey, Position] = {}
            names: dict[int, str] = {}
            for bucket, value in (obj.get("buckets") or {}).items():
                positions[BucketKey(None, int(bucket))] = Position.from_json(value)
            for pid, entry in (obj.get("partitions") or {}).items():
                partition_id = int(pid)
                names[partition_id] = str(entry.get("name", ""))
                for bucket, value in entry["buckets"].items():
                    positions[BucketKey(partition_id, int(bucket))] = Position.from_json(value)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, OffsetsError):
                raise
            raise OffsetsError(f"Unreadable fluss stream offsets {dict(obj)!r}: {e}") from e
        if expected_table_id is not None and table_id != expected_table_id:
            raise OffsetsError(
                f"The checkpoint holds offsets of table id {table_id}, but the table now has id "
                f"{expected_table_id}: it was dropped and created again. Start the stream with a "
                "new checkpoint location."
            )
        return cls(table_id, positions, names)

    def total_rows_to(self, end: StreamOffsets) -> int:
        """Records between these offsets and `end` (log offsets count records one to one)."""
        total = 0
        for key, position in end.positions.items():
            start = self.positions.get(key)
            if start is not None:
                total += max(0, position.offset - start.offset)
        return total


def with_positions(offsets: StreamOffsets, updates: Iterable[tuple[BucketKey, Position]]) -> StreamOffsets:
    positions = dict(offsets.positions)
    positions.update(updates)
    return StreamOffsets(offsets.table_id, positions, offsets.partition_names)


def admit(start: StreamOffsets, latest: StreamOffsets, max_rows: int) -> StreamOffsets:
    """`latest` cut down so that at most `max_rows` records lie between `start` and it.

    The budget is shared out evenly (water-filling from the smallest backlog up), so a busy bucket
    cannot starve the others; buckets missing from `start` keep their position in `latest`.
    """
    backlog: dict[BucketKey, int] = {}
    for key, position in latest.positions.items():
        begin = start.positions.get(key)
        if begin is not None and position.offset > begin.offset:
            backlog[key] = position.offset - begin.offset
    if sum(backlog.values()) <= max_rows:
        return latest
    budget = max_rows
    taken: dict[BucketKey, Position] = {}
    ordered = sorted(backlog, key=lambda k: (backlog[k], k.sort_key()))
    for i, key in enumerate(ordered):
        share = budget // (len(ordered) - i)
        take = min(backlog[key], share)
        budget -= take
        begin = start.positions[key]
        taken[key] = Position(begin.offset + take)
    return with_positions(latest, taken.items())
