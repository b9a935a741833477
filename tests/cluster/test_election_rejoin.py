"""A coordinator whose ZooKeeper session came back stands for election again, even when registering
fails at first (the connection drops again right after the reconnect): the rejoin is retried."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss

from strom.common.config import Configuration
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.election import CoordinatorElection
from strom.server.zookeeper.client import call, connect


class DropsRegistrations:
    """A real ZooKeeper client whose first `failures` creations of a coordinator id node fail, as
    they do when the connection is lost again right after a reconnect."""

    def __init__(self, client: Any, failures: int) -> None:
        self.client = client
        self.failures = failures

    def create(self, path: str, *args: Any, **kwargs: Any) -> Any:
        if "/coordinators/ids/" in path and self.failures > 0:
            self.failures -= 1
            raise ConnectionLoss()
        return self.client.create(path, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_failed_rejoin_is_retried_until_the_coordinator_stands_again(zookeeper: Any) -> None:
    config = Configuration(
        {
            "zookeeper.address": zookeeper.address,
            "zookeeper.path.root": f"/strom-test/election-rejoin-{uuid.uuid4().hex}",
        }
    )
    elected = asyncio.Event()

    async def on_elected(store: Any, liveness: Any) -> None:
        elected.set()

    async def on_lost() -> None:
        pass

    async def main() -> None:
        node = pb.PbServerNode(node_id=0, host="127.0.0.1", port=1)
        election = CoordinatorElection(config, node, on_elected, on_lost)
        election.loop = asyncio.get_running_loop()
        client = await call(connect, config)
        election.zk = DropsRegistrations(client, failures=2)
        try:
            # the session was lost and is back: the election's listener sees CONNECTED
            election._session_lost = True
            election._state_changed(KazooState.CONNECTED)
            await asyncio.wait_for(elected.wait(), 20)
            assert election.zk.failures == 0
            assert await call(client.exists, election.paths.coordinator_id(election.coordinator_id))
            assert election.active
        finally:
            await election.stop()

    asyncio.run(main())
