"""Lifecycle-linked retention: for a lake-enabled table, the log's TTL (local segments and remote ones)
waits for the lake. A segment whose records are not all below the lake's committed offset of its
bucket (NotifyLakeTableOffset) is kept past its TTL, otherwise an idle or failing tiering service
would let records expire from Fluss before they reach the lake, and they would be gone from both.

`table.datalake.retention-hold.max-duration` bounds the wait for users who prefer losing records to
filling disks: a segment expired that much longer ago than its TTL goes anyway, loudly.
`table.datalake.remote-log.drop-tiered` makes the lake the only long-term copy: remote segments the
lake fully covers are deleted before their TTL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from strom.common import config as cfg
from strom.common.config import Configuration
from strom.common.lake_enablement import table_lake_enabled


class Verdict(enum.Enum):
    KEEP = "keep"  # within its TTL
    DELETE = "delete"  # past its TTL, and the lake has it (or the table is not tiered)
    HOLD = "hold"  # past its TTL but not yet in the lake: kept
    FORCE = "force"  # held longer than the bound allows: deleted although the lake lacks it


@dataclass(frozen=True, slots=True)
class LakeHold:
    """What retention of one bucket waits for. `lake_end_offset` is the exclusive end of the lake's
    copy (-1: nothing tiered yet, or not yet heard from the coordinator, so everything waits)."""

    lake_end_offset: int
    max_hold_ms: int | None  # None: wait as long as it takes

    def verdict(self, end_offset: int, max_timestamp: int, now_ms: int, ttl_ms: int) -> Verdict:
        """Of a segment holding offsets below `end_offset` whose newest record is `max_timestamp`."""
        age = now_ms - max_timestamp
        if age <= ttl_ms:
            return Verdict.KEEP
        if end_offset <= self.lake_end_offset:
            return Verdict.DELETE
        if self.max_hold_ms is not None and age > ttl_ms + self.max_hold_ms:
            return Verdict.FORCE
        return Verdict.HOLD

    def covers(self, end_offset: int) -> bool:
        return end_offset <= self.lake_end_offset


@dataclass(frozen=True, slots=True)
class RetentionOutcome:
    """One retention pass over a bucket's log (local or remote)."""

    deleted: int = 0
    # of `deleted`, those deleted by the hold bound before the lake had them
    forced: int = 0
    forced_end_offset: int = -1  # the end of the records lost by forcing
    # segments past their TTL that stay because the lake lacks them
    held_segments: int = 0
    held_bytes: int = 0


def lake_hold(properties: Configuration, lake_end_offset: int) -> LakeHold | None:
    """The hold of a table with these properties, or None when it is not lake-enabled (plain TTL)."""
    if not table_lake_enabled(properties):
        return None
    bound: timedelta | None = properties.get(cfg.TABLE_DATALAKE_RETENTION_HOLD_MAX_DURATION)
    return LakeHold(lake_end_offset, None if bound is None else int(bound.total_seconds() * 1000))


def drop_tiered_remote(properties: Configuration) -> bool:
    return table_lake_enabled(properties) and bool(properties.get(cfg.TABLE_DATALAKE_REMOTE_LOG_DROP_TIERED))
