"""Online bucket rescaling (AlterTable `bucket.num`, docs/operations.md "Rescaling buckets") on a real
cluster, with strom.client writing while the table goes from 2 to 6 buckets.

Primary-key table: afterwards every key is found by lookup, and each bucket's changelog folds to
exactly the keys that hash to it under 6 buckets (none lost, none in two buckets, none misplaced).
Log table with a bucket key: reading the old buckets to their end and then the new ones gives every
key's records in the order they were written, each once. A writer still routing by 2 buckets is
refused with UNKNOWN_TABLE_OR_BUCKET (21, retriable), and nothing it sent lands in the wrong bucket.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.table_change import TableChange
from strom.common import errors
from strom.common.bucketing import fluss_bucket
from strom.common.table_bucket import TableBucket
from strom.common.types import INT
from strom.record.key_encoder import CompactedKeyEncoder
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

PK_SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string())])
LOG_SCHEMA = pa.schema([("k", pa.int32()), ("seq", pa.int32())])
KEYS = CompactedKeyEncoder([INT()])


def bucket_of(key: int, count: int) -> int:
    """Fluss's default routing: the Flink-variant murmur of the encoded key, modulo the count."""
    return fluss_bucket(KEYS.encode([key]), count)


def moving_key(start: int = 0) -> int:
    """A key whose bucket under 6 is not its bucket under 2."""
    return next(k for k in range(start, start + 1000) if bucket_of(k, 6) != bucket_of(k, 2))


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            return await asyncio.wait_for(body(conn), 120)

    return asyncio.run(main())


async def rescale_under_writes(
    cluster: Cluster,
    conn: Connection,
    path: TablePath,
    chunks: list[Any],
    write: Callable[[Any, Any], Awaitable[None]],
) -> int:
    """Write `chunks` in order from a connection of their own, and rescale the table to 6 buckets once
    a quarter of them are in; the last quarter waits for the rescale to end, so some writes are surely
    routed by the old count. A chunk refused because the table was rescaled is written again through a
    fresh table handle (what a user does: get the table again). Returns the refusals seen."""
    refusals = 0
    started = asyncio.Event()
    altered = asyncio.Event()

    async def writer() -> None:
        nonlocal refusals
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as own:
            table = await own.get_table(path)
            for n, chunk in enumerate(chunks):
                if n == len(chunks) // 4:
                    started.set()
                if n == len(chunks) * 3 // 4:
                    await asyncio.wait_for(altered.wait(), 60)
                for _ in range(50):
                    try:
                        await write(table, chunk)
                        break
                    except errors.UnknownTableOrBucketError:
                        refusals += 1
                        await asyncio.sleep(0.02)
                        table = await own.get_table(path)
                else:
                    raise AssertionError(f"chunk {n} was refused 50 times")

    task = asyncio.ensure_future(writer())
    await asyncio.wait_for(started.wait(), 60)
    await conn.get_admin().alter_table(path, [TableChange.set_option("bucket.num", "6")])
    altered.set()
    await task
    return refusals


async def read_buckets(table: Any, buckets: list[int]) -> list[tuple[int, int, str, dict[str, Any]]]:
    """(bucket, offset, change type, row) of every record of these buckets, bucket by bucket."""
    scanner = table.new_scan().startup_mode("earliest").create_log_scanner()
    for bucket in buckets:
        scanner.subscribe(bucket, 0)
    out: list[tuple[int, int, str, dict[str, Any]]] = []
    async with scanner:
        async for batch in scanner.iter_batches(to_end=True):
            for r in batch.records():
                out.append((batch.bucket.bucket, r.offset, r.change_type.short_string, r.row))
    order = {b: i for i, b in enumerate(buckets)}
    out.sort(key=lambda x: (order[x[0]], x[1]))
    return out


async def refused_code(conn: Connection, api: ApiKey, request: Any, bucket: TableBucket) -> int:
    """Send a raw request to the bucket's leader; the error code of its one bucket answer."""
    node = conn.metadata.leader_for(bucket)
    assert node is not None
    response: Any = await conn.pool.request(node.host, node.port, api, request, timeout=10)
    answer = response.buckets_resp[0]
    return int(answer.error_code) if answer.HasField("error_code") else 0


def test_pk_table_rescaled_from_2_to_6_under_writes(shared_cluster: Cluster) -> None:
    n, size = 6000, 100

    async def body(conn: Connection) -> None:
        path = TablePath("fluss", f"rescale_pk_{uuid.uuid4().hex[:8]}")
        schema = Schema.from_arrow_schema(PK_SCHEMA, ["id"])
        await conn.get_admin().create_table(path, TableDescriptor(schema, bucket_count=2))
        stale = await conn.get_table(path)  # routes by 2 buckets, forever

        async def upsert(table: Any, chunk: range) -> None:
            async with table.new_upsert().create_writer() as writer:
                for i in chunk:
                    writer.upsert({"id": i, "name": f"n{i}"})

        chunks = [range(s, min(s + size, n)) for s in range(0, n, size)]
        refusals = await rescale_under_writes(shared_cluster, conn, path, chunks, upsert)
        assert refusals > 0, "no write met the rescale: the test did not test it"

        table = await conn.get_table(path)
        assert table.info.bucket_count == 6
        status = await conn.get_admin().describe_cluster()  # what `strom status` shows
        [shown] = [t for t in status.tables if t.table_id == table.info.table_id]
        assert shown.rescale is not None and shown.rescale.startswith("2 -> 6 buckets: DONE")
        found = await table.new_lookup().create_lookuper().lookup_many([(i,) for i in range(n)])
        assert [r and r["name"] for r in found] == [f"n{i}" for i in range(n)]
        # each bucket's changelog folds to exactly the keys that hash to it under 6 buckets
        state: dict[int, dict[int, str]] = {b: {} for b in range(6)}
        for bucket, _, kind, row in await read_buckets(table, list(range(6))):
            if kind in ("+I", "+U"):
                state[bucket][row["id"]] = row["name"]
            else:
                state[bucket].pop(row["id"], None)
        for bucket, rows in state.items():
            assert all(bucket_of(k, 6) == bucket for k in rows), f"a key in the wrong bucket {bucket}"
        assert sorted(k for rows in state.values() for k in rows) == list(range(n))

        # a writer from before the rescale: refused (retriably), and its key lands nowhere
        key = moving_key(n)
        with pytest.raises(errors.UnknownTableOrBucketError, match="now has 6 buckets"):
            async with stale.new_upsert().create_writer() as writer:
                writer.upsert({"id": key, "name": "stale"})
        assert await table.new_lookup().create_lookuper().lookup((key,)) is None
        # the server refuses a lookup routed by 2 buckets rather than answer "not found"
        lookup = pb.LookupRequest(table_id=table.info.table_id)
        lookup.buckets_req.add(bucket_id=bucket_of(3, 2), keys=[KEYS.encode([3])])
        old = TableBucket(table.info.table_id, None, bucket_of(3, 2))
        if bucket_of(3, 6) != old.bucket:
            assert await refused_code(conn, ApiKey.LOOKUP, lookup, old) == 21

    run(shared_cluster, body)


def test_log_table_rescale_keeps_per_key_order(shared_cluster: Cluster) -> None:
    keys, per_chunk, chunks_n = 24, 5, 160

    async def body(conn: Connection) -> None:
        path = TablePath("fluss", f"rescale_log_{uuid.uuid4().hex[:8]}")
        descriptor = TableDescriptor(Schema.from_arrow_schema(LOG_SCHEMA), bucket_count=2, bucket_keys=["k"])
        await conn.get_admin().create_table(path, descriptor)
        stale = await conn.get_table(path)

        # one key per chunk (one bucket: it is taken or refused whole), sequence numbers rising
        chunks = [(c % keys, range(c * per_chunk, (c + 1) * per_chunk)) for c in range(chunks_n)]

        async def append(table: Any, chunk: tuple[int, range]) -> None:
            key, seqs = chunk
            async with table.new_append().create_writer() as writer:
                for s in seqs:
                    writer.append({"k": key, "seq": s})

        refusals = await rescale_under_writes(shared_cluster, conn, path, chunks, append)
        assert refusals > 0, "no write met the rescale: the test did not test it"

        table = await conn.get_table(path)
        # the old buckets to their end, then the new ones: per key, every record once and in order
        seen: dict[int, list[int]] = {}
        for bucket, _, _, row in await read_buckets(table, [0, 1, 2, 3, 4, 5]):
            seen.setdefault(row["k"], []).append(row["seq"])
            if bucket >= 2:
                assert bucket_of(row["k"], 6) == bucket
        for key in range(keys):
            expected = [s for k, seqs in chunks if k == key for s in seqs]
            assert seen[key] == expected, f"key {key}: records lost, repeated or out of order"

        key = moving_key()
        with pytest.raises(errors.UnknownTableOrBucketError, match="now has 6 buckets"):
            async with stale.new_append().create_writer() as writer:
                writer.append({"k": key, "seq": -1})
        assert all(row["seq"] != -1 for *_, row in await read_buckets(table, [0, 1, 2, 3, 4, 5]))

    run(shared_cluster, body)


def test_partitioned_table_rescales_every_partition_and_later_ones(shared_cluster: Cluster) -> None:
    """2 -> 3 (not a multiple: rows also move between old buckets) on both existing partitions; a
    partition created afterwards gets 3 buckets."""
    schema = pa.schema([("id", pa.int32()), ("p", pa.string()), ("name", pa.string())])

    async def body(conn: Connection) -> None:
        path = TablePath("fluss", f"rescale_parted_{uuid.uuid4().hex[:8]}")
        admin = conn.get_admin()
        descriptor = TableDescriptor(
            Schema.from_arrow_schema(schema, ["id", "p"]), bucket_count=2, partition_keys=["p"]
        )
        await admin.create_table(path, descriptor)
        for value in ("a", "b"):
            await admin.create_partition(path, {"p": value})
        table = await conn.get_table(path)
        async with table.new_upsert().create_writer() as writer:
            for i in range(400):
                writer.upsert({"id": i, "p": "ab"[i % 2], "name": f"n{i}"})
        await admin.alter_table(path, [TableChange.set_option("bucket.num", "3")])
        await admin.create_partition(path, {"p": "c"})
        table = await conn.get_table(path)
        async with table.new_upsert().create_writer() as writer:
            for i in range(400, 450):
                writer.upsert({"id": i, "p": "c", "name": f"n{i}"})
        keys = [{"id": i, "p": "ab"[i % 2]} for i in range(400)] + [
            {"id": i, "p": "c"} for i in range(400, 450)
        ]
        found = await table.new_lookup().create_lookuper().lookup_many(keys)
        assert [r and r["name"] for r in found] == [f"n{k['id']}" for k in keys]
        status = await admin.describe_cluster()
        [shown] = [t for t in status.tables if t.table_id == table.info.table_id]
        assert sorted({(b.partition, b.bucket) for b in shown.buckets}) == [
            (p, b) for p in ("a", "b", "c") for b in range(3)
        ]

    run(shared_cluster, body)


@pytest.mark.long
def test_a_coordinator_killed_mid_rescale_is_followed_by_one_that_finishes_it(tmp_path: Path) -> None:
    """SIGKILL of the coordinator while a 2 -> 6 rescale moves 60,000 rows (the state-machine unit test
    is the lean sibling): the next coordinator resumes the stored task, and every key ends up found, in
    the bucket it hashes to."""
    n = 60_000
    cluster = Cluster(tmp_path, tablet_servers=2).start()
    log_file = tmp_path / "logs" / "coordinator-0.log"
    try:
        path = TablePath("fluss", "big")

        async def prepare() -> int:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                schema = Schema.from_arrow_schema(PK_SCHEMA, ["id"])
                await conn.get_admin().create_table(path, TableDescriptor(schema, bucket_count=2))
                table = await conn.get_table(path)
                async with table.new_upsert().create_writer() as writer:
                    for i in range(n):
                        writer.upsert({"id": i, "name": f"n{i}"})
                return table.info.table_id

        table_id = asyncio.run(prepare())
        alter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strom",
                "table",
                "alter",
                str(path),
                "--set",
                "bucket.num=6",
                "--bootstrap",
                cluster.bootstrap,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while "from 2 to 6 buckets: sealed" not in log_file.read_text():
            assert time.monotonic() < deadline, "the rescale did not start"
            time.sleep(0.02)
        cluster.restart_coordinator(kill=True)  # rows are moving now (it takes seconds)
        alter.wait(60)

        async def check() -> None:
            async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
                deadline = time.monotonic() + 90
                while True:
                    try:
                        status = await conn.get_admin().describe_cluster()
                    except errors.FlussError as e:  # the new coordinator is not active yet
                        assert e.retriable and time.monotonic() < deadline, e
                        await asyncio.sleep(0.5)
                        continue
                    [shown] = [t for t in status.tables if t.table_id == table_id]
                    if shown.rescale is not None and "DONE" in shown.rescale:
                        break
                    assert time.monotonic() < deadline, f"not finished: {shown.rescale}"
                    await asyncio.sleep(0.5)
                table = await conn.get_table(path)
                found = await table.new_lookup().create_lookuper().lookup_many([(i,) for i in range(n)])
                state: dict[int, set[int]] = {b: set() for b in range(6)}
                for bucket, _, kind, row in await read_buckets(table, list(range(6))):
                    (state[bucket].add if kind in ("+I", "+U") else state[bucket].discard)(row["id"])
                assert sum(1 for r in found if r is None) == 0
                assert all(bucket_of(k, 6) == b for b, keys in state.items() for k in keys)
                assert sum(len(keys) for keys in state.values()) == n

        for _ in range(60):  # until the restarted coordinator is active
            try:
                asyncio.run(check())
                break
            except errors.LeaderNotAvailableError:
                time.sleep(0.5)
        else:
            raise AssertionError("the restarted coordinator never became active")
        assert "resuming the rescale of table" in log_file.read_text()
    finally:
        cluster.stop()
