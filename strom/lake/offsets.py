"""The ``fluss-offsets`` snapshot property: which Fluss offsets a lake snapshot covers.

Fluss (0.8 format, still read by later versions' docs) stores a JSON array in the lake snapshot's
properties, one object per bucket, with keys in this order and no spaces::

    [{"bucket":0,"offset":1234}, {"partition_id":3,"bucket":0,"partition_name":"dt=2025","offset":7}]

``offset`` is the bucket's end offset: the next offset to tier. ``partition_name`` is the qualified
name (``key=value`` joined with ``/``). Snapshots made by tiering also carry
``commit-user=__fluss_lake_tiering``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMMIT_USER_PROPERTY",
    "FLUSS_LAKE_TIERING_COMMIT_USER",
    "FLUSS_OFFSETS_PROPERTY",
    "BucketOffset",
    "decode_bucket_offsets",
    "encode_bucket_offsets",
    "is_tiering_snapshot",
]

FLUSS_OFFSETS_PROPERTY = "fluss-offsets"
COMMIT_USER_PROPERTY = "commit-user"
FLUSS_LAKE_TIERING_COMMIT_USER = "__fluss_lake_tiering"


@dataclass(frozen=True, order=True)
class BucketOffset:
    partition_id: int | None
    bucket: int
    offset: int
    partition_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        if self.partition_id is not None:
            obj["partition_id"] = self.partition_id
        obj["bucket"] = self.bucket
        if self.partition_name is not None:
            obj["partition_name"] = self.partition_name
        obj["offset"] = self.offset
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BucketOffset:
        try:
            pid = obj.get("partition_id")
            name = obj.get("partition_name")
            return cls(
                partition_id=None if pid is None else int(pid),
                bucket=int(obj["bucket"]),
                offset=int(obj["offset"]),
                partition_name=None if name is None else str(name),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed {FLUSS_OFFSETS_PROPERTY} entry {obj!r}: {e}") from e


def _sort_key(o: BucketOffset) -> tuple[int, int]:
    return (-1 if o.partition_id is None else o.partition_id, o.bucket)


def encode_bucket_offsets(offsets: Iterable[BucketOffset]) -> str:
    """The property value, buckets ordered by (partition id, bucket)."""
    items = [o.to_json() for o in sorted(offsets, key=_sort_key)]
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def decode_bucket_offsets(text: str) -> list[BucketOffset]:
    """Parse the property value; anything but a JSON array of bucket objects raises ValueError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # Fluss 0.9+ may store a path to an offsets file instead; Strom always inlines the JSON.
        raise ValueError(f"{FLUSS_OFFSETS_PROPERTY} is not inline JSON: {text[:200]!r}") from e
    if not isinstance(data, list) or not all(isinstance(o, dict) for o in data):
        raise ValueError(f"{FLUSS_OFFSETS_PROPERTY} must be a JSON array of objects: {text[:200]!r}")
    return [BucketOffset.from_json(o) for o in data]


def is_tiering_snapshot(properties: Mapping[str, str]) -> bool:
    """Whether a snapshot's properties say tiering made it and carry its offsets."""
    return (
        properties.get(COMMIT_USER_PROPERTY) == FLUSS_LAKE_TIERING_COMMIT_USER
        and FLUSS_OFFSETS_PROPERTY in properties
    )
