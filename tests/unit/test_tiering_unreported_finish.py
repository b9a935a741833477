"""A tiering round whose lake commit succeeded but whose "finished" heartbeat cannot reach a coordinator
(none active: ZooKeeper cut off, found by the fault campaign) ends the round, not the service."""

from __future__ import annotations

import asyncio
from typing import Any

from strom.common.errors import LeaderNotAvailableError
from strom.common.table_path import TablePath
from strom.spark.tiering.service import Assignment, RoundStats, TieringService, TieringSettings


class NoCoordinatorAtTheEnd(TieringService):
    async def _round(self, assignment: Assignment) -> RoundStats:
        return RoundStats(splits=1, records=5, snapshot_id=42)

    async def _heartbeat(self, **kinds: Any) -> Any:
        if kinds.get("finished") is not None:
            raise LeaderNotAvailableError("no coordinator is active at the moment")
        raise AssertionError(f"unexpected heartbeat {kinds}")


def test_an_unacknowledged_finish_releases_the_table_and_the_service_goes_on() -> None:
    settings = TieringSettings("127.0.0.1:1", "iceberg", {}, heartbeat_interval=60)
    service = NoCoordinatorAtTheEnd(settings, runner=None)  # type: ignore[arg-type]
    asyncio.run(service._tier(Assignment(1, TablePath("fluss", "events"), 3)))  # returns, no raise
