"""MetadataCache against an in-process fake Fluss server on loopback (`fake_fluss`): bootstrap
falls over to the next bootstrap server, concurrent refreshes share one request, retriable errors
move on to another server while others are raised, invalidation forgets leaders until the next
refresh."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fake_fluss import NODE_ID, TABLE, TABLE_ID, FakeFluss

from strom.client.metadata import MetadataCache
from strom.common.errors import InvalidTableError, LeaderNotAvailableError, NetworkError, TableNotExistError
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.rpc.client import ConnectionPool


def _dead_port() -> int:
    """A loopback port nobody listens on (bound by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(body: Callable[[FakeFluss, MetadataCache], Awaitable[Any]], *, dead_first: bool = False) -> Any:
    async def main() -> Any:
        fake = await FakeFluss().start()
        assert fake.server is not None
        pool = ConnectionPool(connect_timeout=2, request_timeout=5)
        servers = [("127.0.0.1", fake.server.port)]
        if dead_first:
            servers.insert(0, ("127.0.0.1", _dead_port()))
        cache = MetadataCache(pool, servers, request_timeout=5)
        try:
            return await asyncio.wait_for(body(fake, cache), 20)
        finally:
            await pool.close()
            await fake.close()

    return asyncio.run(main())


def test_bootstrap_skips_a_bootstrap_server_that_is_down() -> None:
    async def body(fake: FakeFluss, cache: MetadataCache) -> None:
        cluster = await cache.bootstrap()
        assert cluster.coordinator is not None and list(cluster.tablet_servers) == [NODE_ID]

    run(body, dead_first=True)


def test_bootstrap_fails_with_every_server_named_when_none_answers() -> None:
    async def main() -> None:
        pool = ConnectionPool(connect_timeout=1, request_timeout=1)
        ports = [_dead_port(), _dead_port()]
        cache = MetadataCache(pool, [("127.0.0.1", p) for p in ports], request_timeout=1)
        try:
            with pytest.raises(NetworkError) as info:
                await cache.bootstrap()
            assert all(str(p) in str(info.value) for p in ports)
        finally:
            await pool.close()

    asyncio.run(main())


def test_concurrent_refreshes_of_the_same_table_share_one_request() -> None:
    async def body(fake: FakeFluss, cache: MetadataCache) -> None:
        await cache.bootstrap()
        before = fake.requests["metadata"]
        fake.metadata_gate.clear()
        waiters = [asyncio.create_task(cache.refresh_table(TABLE)) for _ in range(5)]
        await asyncio.sleep(0.1)
        fake.metadata_gate.set()
        infos = await asyncio.gather(*waiters)
        assert {i.table_id for i in infos} == {TABLE_ID}
        assert fake.requests["metadata"] - before == 1

    run(body)


def test_a_retriable_error_moves_on_to_another_server_and_others_are_raised() -> None:
    async def body(fake: FakeFluss, cache: MetadataCache) -> None:
        await cache.bootstrap()
        before = fake.requests["metadata"]
        fake.metadata_errors = [LeaderNotAvailableError("busy")]
        info = await cache.refresh_table(TABLE)  # tablet server refused, the coordinator answered
        assert info.table_id == TABLE_ID and fake.requests["metadata"] - before == 2

        fake.metadata_errors = [InvalidTableError("refused for good")]
        with pytest.raises(InvalidTableError):
            await cache.refresh_table(TABLE)
        with pytest.raises(TableNotExistError):
            await cache.refresh_table(TablePath("fluss", "nope"))

    run(body)


def test_invalidation_forgets_leaders_until_the_next_refresh() -> None:
    async def body(fake: FakeFluss, cache: MetadataCache) -> None:
        await cache.bootstrap()
        await cache.refresh_table(TABLE)
        bucket = TableBucket(TABLE_ID, None, 0)
        leader = cache.leader_for(bucket)
        assert leader is not None and leader.id == NODE_ID
        cache.invalidate(table_paths=[TABLE])
        assert cache.leader_for(bucket) is None
        fake.leader = None  # the cluster has no leader for now
        await cache.refresh_leaders(TABLE)
        assert cache.leader_for(bucket) is None
        fake.leader = NODE_ID
        await cache.refresh_leaders(TABLE)
        assert cache.leader_for(bucket) is not None

    run(body)
