"""A restarted coordinator may take seconds to take over (pushing every leadership: ~8 s for 30,000
buckets); the tablet servers cannot reach it meanwhile. Their sessions must run from when it answers,
not from when it read them from its store, or every server is declared dead right after the take-over
(bench/scale.py saw all 100 servers go, and 10,800 fallback elections follow). Nor may the time its
loop spends blocked count against them: their heartbeats wait in its sockets meanwhile."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from strom.server.coordinator.controller import Controller
from strom.server.coordinator.server import CoordinatorServer
from strom.server.store.base import BucketAssignment
from strom.server.store.sqlite import SqliteMetadataStore

SESSION_TIMEOUT = 0.3
SLOW_PUSH = 0.6  # each push (UpdateMetadata, then NotifyLeaderAndIsr) outlasts a session


async def silent_server() -> asyncio.Server:
    """A loopback port that accepts and stays quiet: a live process to the failure detector."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    return await asyncio.start_server(hold, "127.0.0.1", 0)


def test_sessions_of_remembered_servers_start_when_the_coordinator_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow_send(self: Controller, *args: object, **kwargs: object) -> None:
        await asyncio.sleep(SLOW_PUSH)  # as long as pushing thousands of leaderships takes

    monkeypatch.setattr(Controller, "send", slow_send)

    async def run() -> None:
        servers = [await silent_server() for _ in range(2)]
        # what the previous coordinator left: two live servers, one bucket led by server 1
        store = SqliteMetadataStore(tmp_path / "metadata.db")
        for server_id, server in enumerate(servers, start=1):
            port = server.sockets[0].getsockname()[1]
            record = {"server_id": server_id, "host": "127.0.0.1", "port": port, "rack": None}
            store.put_document(f"tablet-servers/{server_id:010d}", json.dumps(record).encode())
        store.put_buckets([BucketAssignment(7, None, 0, (1,), 1, 0, (1,), 0)])
        store.close()
        coordinator = CoordinatorServer(
            host="127.0.0.1",
            port=0,
            data_dir=tmp_path,
            config={"tablet-server.session.timeout": f"{int(SESSION_TIMEOUT * 1000)}ms"},
        )
        began = time.monotonic()
        await coordinator.start()
        try:
            active = coordinator.active
            assert active is not None
            serving = time.monotonic()
            assert serving - began > 2 * SESSION_TIMEOUT  # the take-over did outlast the sessions
            # the coordinator's loop blocks (a long synchronous step): no heartbeat can be read, so
            # that time does not count against the servers either
            time.sleep(SESSION_TIMEOUT * 2)
            # the servers may register or heartbeat from now on: they get a whole session for it
            await asyncio.sleep(SESSION_TIMEOUT * 0.4)
            assert active.membership.live_ids() == [1, 2]
            # and sessions do run: without a heartbeat they end a session after serving began
            while active.membership.servers and time.monotonic() - serving < SESSION_TIMEOUT * 10:
                await asyncio.sleep(0.05)
            assert active.membership.live_ids() == []
            assert time.monotonic() - serving >= SESSION_TIMEOUT * 3
        finally:
            await coordinator.stop()
            for server in servers:
                server.close()

    asyncio.run(run())
