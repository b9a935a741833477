"""Sender and RecordAccumulator rules, through the real writer stack (Connection -> AppendWriter ->
WriterClient -> RecordAccumulator -> Sender) against an in-process fake Fluss server on loopback
(`fake_fluss`): retries with metadata refresh, order kept across retries with several batches in
flight, non-retriable errors not retried, retries exhausted, and buffer memory counted in pages
with a full buffer pushing back until client.writer.buffer.wait-timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest
from fake_fluss import SCHEMA, TABLE, FakeFluss

from strom.client import Connection
from strom.client.writer.errors import BufferExhaustedError
from strom.common.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    RecordTooLargeError,
)


def run(
    body: Callable[[FakeFluss, Connection], Awaitable[Any]], settings: dict[str, str] | None = None
) -> Any:
    async def main() -> Any:
        fake = await FakeFluss(buckets=1).start()
        try:
            config = {
                "bootstrap.servers": fake.bootstrap,
                "client.request-timeout": "10s",
                **(settings or {}),
            }
            async with await Connection.create(config) as conn:
                return await asyncio.wait_for(body(fake, conn), 30)
        finally:
            await fake.close()

    return asyncio.run(main())


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def rows(start: int, count: int) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def test_retriable_errors_refresh_metadata_and_retry_until_written_once() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await conn.get_table(TABLE)
        fake.produce_errors[0] = [NotLeaderOrFollowerError.code, LeaderNotAvailableError.code]
        metadata_before = fake.requests["metadata"]
        writer = table.new_append().create_writer()
        result = writer.write_arrow_batch(rows(0, 10))
        await writer.flush()
        await result  # acknowledged: raises if the write failed
        assert fake.ids(0) == list(range(10))
        assert fake.requests["produce"] == 3
        assert fake.requests["metadata"] > metadata_before, "a NOT_LEADER answer must refresh the leaders"

    run(body)


def test_batches_in_flight_behind_a_failed_one_are_written_in_order_exactly_once() -> None:
    """Idempotent writer, up to 5 batches in flight per bucket: the first batch fails once, the
    server then refuses the later ones as out of order; they must all be retried, in order."""

    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await conn.get_table(TABLE)
        writer = table.new_append().create_writer()
        fake.produce_gate.clear()  # hold the first requests so that several are in flight
        fake.produce_errors[0] = [LeaderNotAvailableError.code]
        for start in range(0, 400, 40):
            writer.write_arrow_batch(rows(start, 40))
        flushing = asyncio.create_task(writer.flush())
        # a second request goes out while the first is unanswered (pipelining within a bucket)
        await asyncio.wait_for(_until(lambda: fake.requests["produce"] >= 2), 3)
        fake.produce_gate.set()
        await flushing
        assert fake.ids(0) == list(range(400))
        sequences = [b.sequence for b in fake.log[0]]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)

    run(body, {"client.writer.batch-size": "1kb", "client.writer.batch-timeout": "0ms"})


def test_a_non_retriable_error_fails_the_write_without_a_retry() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await conn.get_table(TABLE)
        writer = table.new_append().create_writer()
        fake.produce_errors[0] = [RecordTooLargeError.code]
        result = writer.write_arrow_batch(rows(0, 5))
        with pytest.raises(RecordTooLargeError):
            await writer.flush()
        with pytest.raises(RecordTooLargeError):
            await result
        assert fake.requests["produce"] == 1
        assert fake.ids(0) == []

    run(body)


def test_retries_run_out_after_client_writer_retries() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await conn.get_table(TABLE)
        writer = table.new_append().create_writer()
        fake.produce_errors[0] = [LeaderNotAvailableError.code] * 3
        writer.write_arrow_batch(rows(0, 5))
        with pytest.raises(LeaderNotAvailableError):
            await writer.flush()
        assert fake.requests["produce"] == 2  # the first attempt and one retry

    # acks=all with retries=1 keeps idempotence on; one retry is allowed
    run(body, {"client.writer.retries": "1"})


def test_buffer_memory_is_counted_in_pages_and_a_full_buffer_pushes_back() -> None:
    async def body(fake: FakeFluss, conn: Connection) -> None:
        table = await conn.get_table(TABLE)
        writer = table.new_append().create_writer()
        accumulator = conn.writer_client.accumulator
        fake.produce_gate.clear()  # nothing is acknowledged: memory stays taken
        writer.write_arrow_batch(rows(0, 1))  # a few bytes, but a whole page
        assert accumulator.buffered_bytes == 64 << 10
        await writer.wait_for_capacity()  # one page of four: room left, no wait
        for start in range(1, 4):
            writer.write_arrow_batch(rows(start, 1))
        # four tiny batches of one bucket share the open batch: still one page
        assert accumulator.buffered_bytes == 64 << 10
        big = pa.record_batch(
            {"id": pa.array(range(20_000), pa.int64()), "name": ["x" * 8] * 20_000}, schema=SCHEMA
        )
        writer.write_arrow_batch(big)  # about 400 kB: the buffer (256 kB) is over-full
        assert accumulator.buffered_bytes >= 256 << 10
        started = asyncio.get_running_loop().time()
        with pytest.raises(BufferExhaustedError, match="buffer memory"):
            await writer.wait_for_capacity()
        waited = asyncio.get_running_loop().time() - started
        assert 0.25 <= waited < 5, waited
        fake.produce_gate.set()  # acknowledgements free the memory
        await writer.flush()
        await asyncio.wait_for(writer.wait_for_capacity(), 5)
        assert accumulator.buffered_bytes == 0

    run(
        body,
        {
            "client.writer.buffer.memory-size": "256kb",
            "client.writer.buffer.page-size": "64kb",
            "client.writer.buffer.wait-timeout": "300ms",
            "client.writer.batch-timeout": "10s",
        },
    )
