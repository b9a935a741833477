"""TableBucket: the unit of storage, replication and leadership."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class TableBucket:
    table_id: int
    partition_id: int | None
    bucket: int

    def __str__(self) -> str:
        partition = f"p{self.partition_id}-" if self.partition_id is not None else ""
        return f"t{self.table_id}-{partition}b{self.bucket}"

    @classmethod
    def from_pb(cls, message: object) -> TableBucket:
        """From a `PbTableBucket`-shaped message (table_id, optional partition_id, bucket_id)."""
        return cls(
            message.table_id,  # type: ignore[attr-defined]
            message.partition_id if message.HasField("partition_id") else None,  # type: ignore[attr-defined]
            message.bucket_id,  # type: ignore[attr-defined]
        )
