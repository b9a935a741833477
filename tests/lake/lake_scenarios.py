"""Scenarios the tests of both lake formats run: the same tables, rows and rounds, format-blind."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal

from lake_helpers import Change, Tiering, insert

from strom.common import types as T
from strom.lake.interface import LakeSnapshotInfo
from strom.lake.offsets import FLUSS_OFFSETS_PROPERTY

# Tables the format tests of both lakes tier the same way.
EVENTS = [("id", T.BIGINT()), ("msg", T.STRING()), ("amount", T.DECIMAL(10, 2)), ("day", T.DATE())]
EVENT_COLUMNS = ["id", "msg", "amount", "day"]
CLICKS = [("user", T.STRING()), ("page", T.STRING()), ("dt", T.STRING())]
CLICK_COLUMNS = ["user", "page", "dt"]


def tier_event_rounds(tiering: Tiering, check: Callable[[], None]) -> None:
    """Three rounds of five `EVENTS` rows into each of buckets 0 and 1; `check` after each round."""
    day = dt.date(2024, 5, 1)
    for round_no in range(3):
        for b in range(2):
            rows = [
                {"id": round_no * 100 + b * 10 + i, "msg": f"m{i}", "amount": Decimal("1.25"), "day": day}
                for i in range(5)
            ]
            tiering.append([Change(r) for r in rows], bucket=b)
        tiering.round()
        check()


def tier_click_rounds(tiering: Tiering) -> None:
    """`CLICKS` of 60 users over three days (writers fed 4 rows at a time), then 10 of a later day."""
    tiering.append(
        Change({"user": f"u{i}", "page": f"p{i % 7}", "dt": f"2024-0{1 + i % 3}"}) for i in range(60)
    )
    tiering.round(batch_rows=4)
    tiering.append(Change({"user": f"u{i}", "page": "late", "dt": "2024-09"}) for i in range(10))
    tiering.round()


def assert_click_offsets(latest: LakeSnapshotInfo | None) -> None:
    """The lake's offsets after `tier_click_rounds`: four partitions, 70 records, Fluss's key order."""
    assert latest is not None
    assert set(latest.partition_names.values()) == {"dt=2024-01", "dt=2024-02", "dt=2024-03", "dt=2024-09"}
    entries = json.loads(latest.properties[FLUSS_OFFSETS_PROPERTY])
    assert all(list(e) == ["partition_id", "bucket", "partition_name", "offset"] for e in entries)
    assert sum(e["offset"] for e in entries) == 70


def tier_new_users(tiering: Tiering, count: int = 30) -> None:
    """Insert `count` `USERS` rows (ids 0 to count - 1) and tier them in one round."""
    tiering.append(insert(id=i, name=f"n{i}", score=i) for i in range(count))
    tiering.round()
