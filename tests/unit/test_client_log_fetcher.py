"""LogFetcher, through the log scanner, against an in-process fake Fluss server on loopback
(`fake_fluss`): rows come back in offset order from any start offset, a retriable fetch error
refreshes the leaders and the fetch is retried without losing or repeating rows, and a
non-retriable one reaches the caller naming the bucket."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest
from fake_fluss import SCHEMA, TABLE, FakeFluss

from strom.client import Connection
from strom.common.errors import LogOffsetOutOfRangeError, NotLeaderOrFollowerError


def run(body: Callable[[FakeFluss, Connection], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        fake = await FakeFluss(buckets=1).start()
        try:
            config = {"bootstrap.servers": fake.bootstrap, "client.scanner.log.fetch.wait-max-time": "50ms"}
            async with await Connection.create(config) as conn:
                return await asyncio.wait_for(body(fake, conn), 30)
        finally:
            await fake.close()

    return asyncio.run(main())


async def write(conn: Connection, batches: int, rows: int) -> Any:
    table = await conn.get_table(TABLE)
    async with table.new_append().create_writer() as writer:
        for b in range(batches):
            ids = list(range(b * rows, (b + 1) * rows))
            writer.write_arrow_batch(
                pa.record_batch(
                    {"id": pa.array(ids, pa.int64()), "name": [str(i) for i in ids]}, schema=SCHEMA
                )
            )
            await writer.flush()  # one log batch each
    return table


async def read_ids(table: Any, offset: int, count: int) -> list[tuple[int, int]]:
    """(offset, id) of the next `count` rows from `offset`."""
    scanner = table.new_scan().create_log_scanner()
    scanner.subscribe(0, offset)
    out: list[tuple[int, int]] = []
    try:
        while len(out) < count:
            for batch in await scanner.poll_batches(2000):
                ids = batch.batch.column("id").to_pylist()
                out.extend((batch.base_offset + i, v) for i, v in enumerate(ids))
    finally:
        await scanner.close()
    return out


def test_rows_come_back_in_offset_order_from_any_start() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await write(conn, batches=5, rows=10)
        assert await read_ids(table, 0, 50) == [(i, i) for i in range(50)]
        assert await read_ids(table, 25, 25) == [(i, i) for i in range(25, 50)]

    run(body)


def test_a_retriable_fetch_error_refreshes_leaders_and_loses_no_row() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await write(conn, batches=3, rows=10)
        before = fake.requests["metadata"]
        fake.fetch_errors[0] = [NotLeaderOrFollowerError.code, NotLeaderOrFollowerError.code]
        assert await read_ids(table, 0, 30) == [(i, i) for i in range(30)]
        assert fake.requests["metadata"] > before
        assert fake.requests["fetch"] >= 3

    run(body)


def test_a_non_retriable_fetch_error_reaches_the_caller() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await write(conn, batches=1, rows=10)
        fake.fetch_errors[0] = [LogOffsetOutOfRangeError.code]
        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe(0, 0)
        try:
            with pytest.raises(LogOffsetOutOfRangeError):
                for _ in range(20):
                    await scanner.poll_batches(500)
        finally:
            await scanner.close()

    run(body)
