"""The coordinator's event loop never waits for its metadata store: with ZooKeeper frozen (SIGSTOP) in
the middle of a CreateTable, the coordinator still answers at once, reads show only committed
metadata, and the write completes, in order, once ZooKeeper is back."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from strom.client import Connection
from strom.common.config import Configuration
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.store.base import DatabaseRecord
from strom.server.store.ordered import OrderedStore
from strom.server.zookeeper.local_server import LocalZooKeeper

FROZEN_S = 1.0  # well inside the clusters' 3 s ZooKeeper sessions
PROBE = pb.ApiVersionsRequest(client_software_name="store-test", client_software_version="0")


def frozen(zookeeper: LocalZooKeeper) -> Any:
    """ZooKeeper stopped for FROZEN_S from now; returns the handle that thaws it."""
    assert zookeeper.pid is not None
    os.kill(zookeeper.pid, signal.SIGSTOP)
    loop = asyncio.get_running_loop()
    return loop.call_later(FROZEN_S, os.kill, zookeeper.pid, signal.SIGCONT)


def test_the_coordinator_answers_while_zookeeper_is_frozen_under_a_create_table(
    cluster_factory: Any, zookeeper: LocalZooKeeper
) -> None:
    cluster = cluster_factory(1, zookeeper=True)
    coordinator = cluster.coordinator
    schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64())]))

    async def main() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as connection:
            admin = connection.get_admin()
            await admin.create_table("fluss.before", TableDescriptor(schema, bucket_count=1))
            probe = await RpcConnection.connect(coordinator.host, coordinator.port)
            thaw = frozen(zookeeper)
            try:
                create = asyncio.create_task(
                    admin.create_table("fluss.during", TableDescriptor(schema, bucket_count=1))
                )
                await asyncio.sleep(0.2)  # the CreateTable now waits for ZooKeeper
                started = time.perf_counter()
                await probe.request(ApiKey.API_VERSIONS, PROBE)
                exists = await admin.table_exists("fluss.before")
                in_flight = await admin.table_exists("fluss.during")
                answered = time.perf_counter() - started
                assert not create.done(), "ZooKeeper was frozen: the CreateTable cannot have committed"
            finally:
                probe.close()
                thaw.cancel()
                assert zookeeper.pid is not None
                os.kill(zookeeper.pid, signal.SIGCONT)
            await asyncio.wait_for(create, 30)
            assert exists and not in_flight, "reads show committed metadata only"
            assert answered < FROZEN_S / 2, f"the coordinator took {answered:.2f}s to answer"
            assert await admin.table_exists("fluss.during")

    asyncio.run(main())


def test_store_writes_run_in_order_off_the_loop_and_stay_fenced(zookeeper: LocalZooKeeper) -> None:
    from strom.common.errors import NotCoordinatorLeaderError
    from strom.server.store.zookeeper import ZooKeeperMetadataStore
    from strom.server.zookeeper.client import connect, paths_of

    config = Configuration(
        {"zookeeper.address": zookeeper.address, "zookeeper.path.root": f"/ordered-{uuid.uuid4().hex}"}
    )
    old = OrderedStore(ZooKeeperMetadataStore(connect(config), paths_of(config)))
    new = ZooKeeperMetadataStore(connect(config), paths_of(config))

    async def main() -> None:
        await old.bump_coordinator_epoch()
        # submitted together, applied in submission order: the last value of the document wins
        await asyncio.gather(*(old.put_document("counter", str(i).encode()) for i in range(50)))
        assert old.get_document("counter") == b"49"
        new.bump_coordinator_epoch()  # another coordinator took over
        with pytest.raises(NotCoordinatorLeaderError):
            await old.create_database(DatabaseRecord("after", b"{}", 1, 1))
        assert old.get_database("after") is None

    try:
        asyncio.run(main())
    finally:
        asyncio.run(old.close())
        new.close()
