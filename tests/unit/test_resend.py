"""The coordinator's resending of missed pushes: until acknowledged, with backoff, and never to a server
that left or registered anew."""

from __future__ import annotations

import asyncio

import pytest

from strom.server.coordinator import resend
from strom.server.coordinator.resend import Owed, Resender


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resend, "RESEND_MIN_S", 0.01)
    monkeypatch.setattr(resend, "RESEND_MAX_S", 0.04)


def test_owed_pushes_are_resent_until_acknowledged_and_merge_with_newer_ones() -> None:
    sessions = {1: 7}
    pushed: list[Owed] = []

    async def push(server_id: int, owed: Owed) -> Owed:
        pushed.append(owed)
        return owed if len(pushed) < 3 else Owed(owed.session_id)  # two more failures

    async def main() -> None:
        resender = Resender(sessions.get, push)
        resender.owe(1, servers=True, tables={5})
        resender.owe(1, buckets={(5, None, 0)})
        await asyncio.wait_for(resender.tasks[1], 2)
        assert resender.resent == 1 and not resender.owed

    asyncio.run(main())
    assert len(pushed) == 3
    assert (pushed[-1].servers, pushed[-1].tables, pushed[-1].buckets) == (True, {5}, {(5, None, 0)})


def test_nothing_is_resent_to_a_server_that_left_or_registered_again() -> None:
    sessions: dict[int, int] = {1: 7, 2: 8}
    pushed: list[int] = []

    async def push(server_id: int, owed: Owed) -> Owed:
        pushed.append(server_id)
        return owed  # never acknowledged

    async def main() -> None:
        resender = Resender(sessions.get, push)
        resender.owe(1, servers=True)
        resender.owe(2, servers=True)
        resender.owe(3, servers=True)  # not live: nothing to do
        await asyncio.sleep(0.05)
        del sessions[1]  # declared dead
        sessions[2] = 9  # registered anew: its registration pushed everything
        await asyncio.wait_for(asyncio.gather(resender.tasks[1], resender.tasks[2]), 2)
        assert not resender.owed and 3 not in resender.tasks

    asyncio.run(main())
    assert pushed and set(pushed) <= {1, 2}
