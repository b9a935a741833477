"""LookupClient through its interface, against a fake transport (no processes): the bounded queue
(client.lookup.queue-size) pushes back, and retriable bucket errors are retried in order.

The component under test is the real LookupClient; only the cluster it talks to is faked: a
metadata view that names one leader, and a pool whose `request` answers Lookup requests when the
test lets it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from strom.client.config import ClientConfig
from strom.client.lookup.lookup_client import LookupClient
from strom.common.errors import (
    FlussError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    TableNotExistError,
)
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

PATH = TablePath("db", "t")
BUCKET = TableBucket(7, None, 0)
NODE = SimpleNamespace(id=1, host="127.0.0.1", port=1)


@dataclass
class FakeMetadata:
    def leader_for(self, bucket: TableBucket) -> Any:
        return NODE

    def tablet_server(self, node_id: int) -> Any:
        return NODE

    def invalidate(self, **_: Any) -> None:
        pass

    async def update(self, **_: Any) -> None:
        pass


@dataclass
class FakePool:
    """Answers each Lookup once the test releases it; every key's value is the key itself."""

    requests: list[list[bytes]] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    # error codes to answer with, one per request, before answering normally
    errors: list[int] = field(default_factory=list)

    async def request(self, host: str, port: int, api: ApiKey, request: Any, timeout: float) -> Any:
        assert api == ApiKey.LOOKUP
        keys = [k for b in request.buckets_req for k in b.keys]
        self.requests.append(keys)
        await self.gate.wait()
        response = pb.LookupResponse()
        answer = response.buckets_resp.add(bucket_id=BUCKET.bucket)
        if self.errors:
            answer.error_code = self.errors.pop(0)
            answer.error_message = "not yet"
            return response
        for key in keys:
            answer.values.add(values=key)
        return response


def _client(pool: FakePool, options: dict[str, object] | None = None) -> LookupClient:
    config = ClientConfig.from_dict(options or {})
    connection = SimpleNamespace(config=config, metadata=FakeMetadata(), pool=pool)
    return LookupClient(connection)  # type: ignore[arg-type]


async def _settle() -> None:
    """Let every ready callback and task run (dispatch is scheduled, sends are tasks)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def _submit(client: LookupClient, keys: list[bytes]) -> list[asyncio.Future[Any]]:
    """What a lookuper does: take places in the queue, then hand the keys over."""
    await client.acquire(len(keys))
    futures = [client.loop.create_future() for _ in keys]
    client.lookup_bucket(PATH, BUCKET, list(keys), list(futures), counted=len(keys))
    return futures


def test_a_full_lookup_queue_makes_callers_wait_until_sending_frees_room() -> None:
    asyncio.run(_test_a_full_lookup_queue_makes_callers_wait_until_sending_frees_room())


async def _test_a_full_lookup_queue_makes_callers_wait_until_sending_frees_room() -> None:
    pool = FakePool()
    client = _client(pool, {"client.lookup.queue-size": 4, "client.lookup.max-inflight-requests": 1})
    try:
        first = await _submit(client, [b"a"])
        await _settle()  # dispatched: in flight, held by the fake server
        assert pool.requests == [[b"a"]] and client.queued == 0
        queued = await _submit(client, [b"b", b"c", b"d", b"e"])  # fills the queue
        assert client.queued == 4
        late = asyncio.create_task(_submit(client, [b"f"]))
        await _settle()
        assert not late.done(), "a caller went past client.lookup.queue-size"
        assert client.queued == 4
        pool.gate.set()  # the server answers: the queued keys are sent, making room
        late_futures = await asyncio.wait_for(late, 5)
        results = await asyncio.wait_for(asyncio.gather(*first, *queued, *late_futures), 5)
        assert results == [b"a", b"b", b"c", b"d", b"e", b"f"]
        assert client.queued == 0
    finally:
        await client.close()


def test_waiting_callers_are_let_in_first_come_first_served_and_a_cancelled_one_gives_way() -> None:
    asyncio.run(_test_waiting_callers_are_let_in_first_come_first_served_and_a_cancelled_one_gives_way())


async def _test_waiting_callers_are_let_in_first_come_first_served_and_a_cancelled_one_gives_way() -> None:
    pool = FakePool()
    client = _client(pool, {"client.lookup.queue-size": 2, "client.lookup.max-inflight-requests": 1})
    try:
        await _submit(client, [b"a"])
        await _settle()
        await _submit(client, [b"b", b"c"])
        order: list[str] = []

        async def caller(name: str, n: int) -> None:
            await client.acquire(n)
            order.append(name)
            client.release(n)

        big = asyncio.create_task(caller("big", 2))
        await _settle()
        cancelled = asyncio.create_task(caller("cancelled", 1))
        small = asyncio.create_task(caller("small", 1))
        await _settle()
        cancelled.cancel()
        pool.gate.set()
        await asyncio.wait_for(asyncio.gather(big, small), 5)
        assert order == ["big", "small"]
        assert client.queued == 0
    finally:
        await client.close()


def test_a_batch_larger_than_the_queue_is_let_in_when_the_queue_is_empty() -> None:
    asyncio.run(_test_a_batch_larger_than_the_queue_is_let_in_when_the_queue_is_empty())


async def _test_a_batch_larger_than_the_queue_is_let_in_when_the_queue_is_empty() -> None:
    pool = FakePool()
    pool.gate.set()
    client = _client(pool, {"client.lookup.queue-size": 2})
    try:
        futures = await asyncio.wait_for(_submit(client, [b"x", b"y", b"z"]), 5)
        assert await asyncio.wait_for(asyncio.gather(*futures), 5) == [b"x", b"y", b"z"]
    finally:
        await client.close()


def test_closing_fails_callers_waiting_for_room() -> None:
    asyncio.run(_test_closing_fails_callers_waiting_for_room())


async def _test_closing_fails_callers_waiting_for_room() -> None:
    pool = FakePool()
    client = _client(pool, {"client.lookup.queue-size": 1, "client.lookup.max-inflight-requests": 1})
    sent = await _submit(client, [b"a"])
    await _settle()
    queued = await _submit(client, [b"b"])
    waiting = asyncio.create_task(client.acquire(1))
    await _settle()
    assert not waiting.done()
    await client.close()
    for future in (waiting, *sent, *queued):
        with pytest.raises(FlussError, match="closed"):
            await asyncio.wait_for(future, 5)


def test_retriable_bucket_errors_are_retried_and_keys_keep_their_order() -> None:
    asyncio.run(_test_retriable_bucket_errors_are_retried_and_keys_keep_their_order())


async def _test_retriable_bucket_errors_are_retried_and_keys_keep_their_order() -> None:
    pool = FakePool(errors=[NotLeaderOrFollowerError.code, LeaderNotAvailableError.code])
    pool.gate.set()
    client = _client(pool)
    try:
        futures = await _submit(client, [b"1", b"2", b"3"])
        assert await asyncio.wait_for(asyncio.gather(*futures), 10) == [b"1", b"2", b"3"]
        assert pool.requests == [[b"1", b"2", b"3"]] * 3
    finally:
        await client.close()


def test_a_non_retriable_bucket_error_fails_the_keys_without_retrying() -> None:
    asyncio.run(_test_a_non_retriable_bucket_error_fails_the_keys_without_retrying())


async def _test_a_non_retriable_bucket_error_fails_the_keys_without_retrying() -> None:
    pool = FakePool(errors=[TableNotExistError.code])
    pool.gate.set()
    client = _client(pool)
    try:
        futures = await _submit(client, [b"1"])
        with pytest.raises(FlussError):
            await asyncio.wait_for(futures[0], 5)
        assert len(pool.requests) == 1
    finally:
        await client.close()
