"""Which offset of a bucket to look up: the earliest, the latest (high watermark) or by timestamp."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OffsetType(enum.IntEnum):
    """`ListOffsetsRequest.offset_type` on the wire."""

    EARLIEST = 0
    LATEST = 1
    TIMESTAMP = 2


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    type: OffsetType
    timestamp_ms: int | None = None  # for TIMESTAMP only

    def __post_init__(self) -> None:
        if (self.type == OffsetType.TIMESTAMP) != (self.timestamp_ms is not None):
            raise ValueError("a timestamp goes with OffsetType.TIMESTAMP and only with it")

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(OffsetType.EARLIEST)

    @classmethod
    def latest(cls) -> OffsetSpec:
        """The high watermark: the offset the next committed record will get."""
        return cls(OffsetType.LATEST)

    @classmethod
    def timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        """The first offset whose record was committed at or after `timestamp_ms` (epoch ms)."""
        return cls(OffsetType.TIMESTAMP, timestamp_ms)
