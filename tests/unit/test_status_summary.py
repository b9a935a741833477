"""`strom status` summarises a table of many buckets: one row with the counts and summed offsets, and
a row for each bucket that needs attention, not 2,048 rows (`--all-buckets` prints them all)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from strom.client.cluster_status import BucketStatus, ClusterStatus, ServerStatus, TableStatus
from strom.commands import status as status_command


def bucket(n: int, *, leader: int | None = 0, isr: list[int] | None = None) -> BucketStatus:
    return BucketStatus(n, None, None, leader, 1, [0, 1], [0, 1] if isr is None else isr, 0, 10, 10, None)


def render(cluster: ClusterStatus, monkeypatch: pytest.MonkeyPatch, **options: bool) -> str:
    out = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda: Console(file=out, width=250))
    status_command.print_status(cluster, **options)
    return out.getvalue()


def test_many_buckets_are_summarised_and_the_troubled_ones_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    buckets = [bucket(n) for n in range(200)]
    buckets[7] = bucket(7, leader=None)
    buckets[9] = bucket(9, isr=[0])
    small = TableStatus("db", "small", 2, False, False, 2, [bucket(0), bucket(1)], None)
    big = TableStatus("db", "big", 1, True, False, 200, buckets, None)
    server = ServerStatus("tablet-server", 0, "h", 1, True, 2048, 4096)
    cluster = ClusterStatus(1, [server], [big, small], [], None)
    page = render(cluster, monkeypatch)
    rows = [line for line in page.splitlines() if "db.big" in line]
    assert len(rows) == 3, page  # the summary, bucket 7 (no leader), bucket 9 (short ISR)
    assert "all 200" in rows[0] and "1 without" in rows[0] and "1 short" in rows[0] and "2000" in rows[0]
    assert len([line for line in page.splitlines() if "db.small" in line]) == 2  # small: every bucket
    assert "--all-buckets" in page
    everything = render(cluster, monkeypatch, all_buckets=True)
    assert len([line for line in everything.splitlines() if "db.big" in line]) == 200
