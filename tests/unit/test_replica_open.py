"""A new replica's log opens in an executor (recovery reads every unflushed batch and may truncate):
the event loop goes on meanwhile, two notices of the same new bucket open its files once, and a stop
that comes while the files open wins over the notice."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from kv_table_maker import LOG_CONFIG, make_info

from strom.common.errors import UnknownTableOrBucketError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.log.log_tablet import LogTablet
from strom.server.tablet.replica_manager import Replica, ReplicaManager

BUCKET = TableBucket(7, None, 0)


class HeldOpen:
    """LogTablet.open that waits, in its executor thread, until the test lets it go on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.opens = 0
        real = LogTablet.open

        def held(directory: Path, config: Any, **kwargs: Any) -> LogTablet:
            self.opens += 1
            self.started.set()
            assert self.release.wait(10), "the test never released the open"
            return real(directory, config, **kwargs)

        monkeypatch.setattr(LogTablet, "open", staticmethod(held))


async def lead(manager: ReplicaManager) -> Replica:
    return await manager.take_leadership(
        BUCKET,
        database="db",
        table="t",
        partition_name=None,
        table_info=make_info(Schema([Column("v", BIGINT())])),
        leader=0,
        leader_epoch=1,
        replicas=(0,),
        isr=(0,),
        bucket_epoch=0,
    )


def test_the_loop_runs_while_a_new_log_opens_and_two_notices_open_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldOpen(monkeypatch)
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)

    async def body() -> None:
        first = asyncio.ensure_future(lead(manager))
        second = asyncio.ensure_future(lead(manager))
        await asyncio.to_thread(held.started.wait, 10)
        ticks = 0
        for _ in range(5):  # the loop is free: these would not run while the open held it
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 5 and not first.done() and not second.done()
        held.release.set()
        assert await first is await second
        assert held.opens == 1

    try:
        asyncio.run(body())
        assert manager.replicas[BUCKET].log_tablet().log_end_offset == 0
    finally:
        manager.close()


def test_a_stop_while_the_log_opens_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldOpen(monkeypatch)
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)

    async def body() -> None:
        notice = asyncio.ensure_future(lead(manager))
        await asyncio.to_thread(held.started.wait, 10)
        assert manager.stop_replica(BUCKET, delete=True) is None  # nothing hosted yet
        held.release.set()
        with pytest.raises(UnknownTableOrBucketError, match="stopped on this server while it opened"):
            await notice
        assert BUCKET not in manager.replicas

    try:
        asyncio.run(body())
    finally:
        manager.close()
