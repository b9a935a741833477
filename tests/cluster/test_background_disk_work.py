"""Disk work a tablet server does off its event loop still happens, and leaves the data intact: a
dropped table's files are deleted, retention deletes expired segments while the rest of the log
stays readable. (How long the loop waits is measured by bench/loop_stalls.py, not here.)"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from harness import Cluster

from strom.client import Connection, Schema, TableChange, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET
from strom.common.errors import LogOffsetOutOfRangeError
from strom.server.tablet.replica_manager import TRASH_DIR

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def run(cluster: Cluster, body: Callable[[Connection], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            return await asyncio.wait_for(body(conn), 90)

    return asyncio.run(main())


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    # random text: the batches are compressed, and the logs must span many segments
    return pa.table({"id": pa.array(ids, pa.int64()), "payload": [os.urandom(100).hex() for _ in ids]})


async def create(conn: Connection, path: TablePath, buckets: int, **properties: str) -> Any:
    descriptor = TableDescriptor(
        Schema.from_arrow_schema(SCHEMA), bucket_count=buckets, properties=properties
    )
    await conn.get_admin().create_table(path, descriptor)
    return await conn.get_table(path)


async def write(table: Any, start: int, count: int, per_batch: int = 500) -> None:
    writer = table.new_append().create_writer()
    for first in range(start, start + count, per_batch):
        writer.write_arrow(rows(first, min(per_batch, start + count - first)))
    await writer.flush()


async def read_ids(table: Any, buckets: int) -> list[int]:
    scanner = table.new_scan().create_log_scanner()
    for bucket in range(buckets):
        scanner.subscribe(bucket, EARLIEST_OFFSET)
    async with scanner:
        return sorted(
            i for b in [b async for b in scanner.iter_batches(to_end=True)] for i in b.batch["id"].to_pylist()
        )


def table_dirs(cluster: Cluster, table_id: int) -> list[Path]:
    return [
        path for server in cluster.tablet_servers.values() for path in server.data_dir.glob(f"*/*-{table_id}")
    ]


def trash_entries(cluster: Cluster) -> list[Path]:
    return [
        p
        for s in cluster.tablet_servers.values()
        if (s.data_dir / TRASH_DIR).is_dir()
        for p in (s.data_dir / TRASH_DIR).iterdir()
    ]


def test_a_dropped_tables_files_are_deleted_and_other_tables_keep_theirs(cluster_factory: Any) -> None:
    cluster = cluster_factory(tablet_servers=2, config={"log.segment.file-size": "1mb"})
    dropped = TablePath("fluss", f"dropped_{uuid.uuid4().hex[:8]}")
    kept = TablePath("fluss", f"kept_{uuid.uuid4().hex[:8]}")

    async def body(conn: Connection) -> int:
        doomed = await create(conn, dropped, buckets=2, **{"table.replication.factor": "2"})
        table = await create(conn, kept, buckets=2)
        await write(doomed, 0, 20000)
        await write(table, 0, 1000)
        assert len(table_dirs(cluster, doomed.table_id)) == 2  # 2 replicas of each bucket
        assert sum(1 for d in table_dirs(cluster, doomed.table_id) for _ in d.rglob("*.log")) >= 6
        await conn.get_admin().drop_table(dropped)
        deadline = time.monotonic() + 30
        while table_dirs(cluster, doomed.table_id) or trash_entries(cluster):
            assert time.monotonic() < deadline, (table_dirs(cluster, doomed.table_id), trash_entries(cluster))
            await asyncio.sleep(0.1)
        await write(table, 1000, 1000)
        assert await read_ids(table, 2) == list(range(2000))
        return doomed.table_id

    run(cluster, body)


def test_retention_deletes_expired_segments_and_keeps_the_log_readable(cluster_factory: Any) -> None:
    cluster = cluster_factory(
        config={
            "log.segment.file-size": "1mb",
            "log.retention.check-interval": "500ms",
            "remote.log.task-interval-duration": "1h",  # retention alone, no tiering
        }
    )
    path = TablePath("fluss", f"ttl_{uuid.uuid4().hex[:8]}")

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, **{"table.log.ttl": "2s"})
        await write(table, 0, 40000)
        (directory,) = table_dirs(cluster, table.table_id)
        before = sorted(p.name for p in directory.rglob("*.log"))
        assert len(before) > 2
        await asyncio.sleep(2.5)  # the first batches expire; newer ones are written meanwhile
        await write(table, 40000, 10000)
        deadline = time.monotonic() + 30
        while (await conn.get_admin().list_offsets(path, [0], _earliest()))[0] == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        start = (await conn.get_admin().list_offsets(path, [0], _earliest()))[0]
        # the expired segments' files are gone (unlinked in the background), later ones stay
        while any(p.name.endswith(".deleted") for p in directory.rglob("*")):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        after = sorted(p.name for p in directory.rglob("*.log"))
        assert after and after[0] > before[0] and set(after) - set(before)
        assert await read_ids(table, 1) == list(range(start, 50000))

    run(cluster, body)


def _earliest() -> Any:
    from strom.client import OffsetSpec

    return OffsetSpec.earliest()


def test_tiering_expires_remote_segments_and_keeps_the_log_readable(cluster_factory: Any) -> None:
    cluster = cluster_factory(
        config={
            "log.segment.file-size": "1mb",
            "log.retention.check-interval": "1h",  # the remote-log task alone
            "remote.log.task-interval-duration": "300ms",
        }
    )
    path = TablePath("fluss", f"tiered_{uuid.uuid4().hex[:8]}")
    remote = cluster.base_dir / "remote" / "log"

    def remote_logs() -> set[Path]:
        return set(remote.rglob("*.log"))

    async def wait_for(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.1)

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, **{"table.log.ttl": "3s"})
        await write(table, 0, 40000)
        await wait_for(lambda: len(remote_logs()) >= 2, "no segments were tiered")
        first = remote_logs()
        await asyncio.sleep(3.5)  # the first wave expires
        await write(table, 40000, 40000)
        await wait_for(lambda: not first & remote_logs(), "expired remote segments were not deleted")
        # stop expiry before reading: under load a 3 s TTL can overtake the reader (CI saw it)
        await conn.get_admin().alter_table(path, [TableChange.set_option("table.log.ttl", "1h")])
        for _ in range(5):  # until the tablet server has the new TTL
            start = (await conn.get_admin().list_offsets(path, [0], _earliest()))[0]
            assert start > 0
            try:
                ids = await read_ids(table, 1)
            except LogOffsetOutOfRangeError:
                await asyncio.sleep(0.5)
                continue
            assert ids == list(range(start, 80000))
            return
        raise AssertionError("the log start kept moving after table.log.ttl was raised to 1h")

    run(cluster, body)


def test_local_copies_of_tiered_segments_go_by_local_ttl(cluster_factory: Any) -> None:
    """table.log.local-ttl (Fluss): a leader drops its local copies of tiered segments once they are
    older than it, long before table.log.ttl and with more than table.log.tiered.local-segments
    left; readers get those offsets from remote storage."""
    cluster = cluster_factory(
        config={
            "log.segment.file-size": "1mb",
            "log.retention.check-interval": "300ms",
            "remote.log.task-interval-duration": "300ms",
        }
    )
    path = TablePath("fluss", f"local_ttl_{uuid.uuid4().hex[:8]}")
    properties = {"table.log.ttl": "1h", "table.log.local-ttl": "2s", "table.log.tiered.local-segments": "50"}

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, **properties)
        await write(table, 0, 40000)
        (directory,) = table_dirs(cluster, table.table_id)
        before = sorted(p.name for p in directory.rglob("*.log"))
        assert len(before) > 2
        deadline = time.monotonic() + 30
        while before[0] in {p.name for p in directory.rglob("*.log")}:
            assert time.monotonic() < deadline, "local copies past table.log.local-ttl were kept"
            await asyncio.sleep(0.2)
        assert (await conn.get_admin().list_offsets(path, [0], _earliest()))[0] == 0  # remote has them
        assert await read_ids(table, 1) == list(range(40000))

    run(cluster, body)


def test_segments_whose_remote_copies_expired_are_not_uploaded_again(cluster_factory: Any) -> None:
    """When every remote segment of a bucket has expired, the remote log still knows how far tiering
    got: later rounds upload nothing again (they used to re-upload the local segments and expire them
    at once, rewriting the manifest every round)."""
    cluster = cluster_factory(
        config={
            "log.segment.file-size": "1mb",
            "log.retention.check-interval": "1h",  # the remote-log task alone
            "remote.log.task-interval-duration": "200ms",
        }
    )
    path = TablePath("fluss", f"expired_{uuid.uuid4().hex[:8]}")
    remote = cluster.base_dir / "remote" / "log"

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, **{"table.log.ttl": "2s"})
        await write(table, 0, 20000)
        deadline = time.monotonic() + 30
        while not list(remote.rglob("*.log")):
            assert time.monotonic() < deadline, "no segments were tiered"
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.5)  # everything uploaded is past its TTL now
        while list(remote.rglob("*.log")):
            assert time.monotonic() < deadline, "expired remote segments were not deleted"
            await asyncio.sleep(0.1)
        (manifest,) = remote.rglob("manifest.json")
        written = manifest.stat().st_mtime_ns
        await asyncio.sleep(1.5)  # seven rounds of the remote-log task
        assert manifest.stat().st_mtime_ns == written, "the manifest was rewritten: segments uploaded again"
        assert not list(remote.rglob("*.log"))

    run(cluster, body)


def _local_log_start(cluster: Cluster, table_id: int) -> int:
    """The base offset of the oldest segment file a tablet server still holds for the table."""
    files = [f for d in table_dirs(cluster, table_id) for f in d.rglob("*.log")]
    offsets = [int(f.stem) for f in files if f.stem.isdigit()]
    return min(offsets, default=0)


def test_a_scanner_reads_tiered_segments_downloading_them_ahead(cluster_factory: Any, tmp_path: Path) -> None:
    """Rows below the local log start come from remote segments, which the client downloads into
    client.scanner.io.tmpdir, client.scanner.remote-log.prefetch-num at a time, and deletes."""
    cluster = cluster_factory(
        config={
            "log.segment.file-size": "256kb",
            "remote.log.task-interval-duration": "200ms",
        }
    )
    path = TablePath("fluss", f"remote_read_{uuid.uuid4().hex[:8]}")
    io_dir = tmp_path / "client-io"

    async def body(conn: Connection) -> None:
        table = await create(conn, path, buckets=1, **{"table.log.tiered.local-segments": "1"})
        await write(table, 0, 8000)
        remote = cluster.base_dir / "remote" / "log"
        deadline = time.monotonic() + 30
        # most of the log is tiered, and gone from the tablet server's disk
        while len(list(remote.rglob("*.log"))) < 3 or _local_log_start(cluster, table.table_id) == 0:
            assert time.monotonic() < deadline, "the log was not tiered"
            await asyncio.sleep(0.1)

        scanner = table.new_scan().create_log_scanner()
        scanner.subscribe(0, EARLIEST_OFFSET)
        fetcher = scanner._fetcher
        seen: list[int] = []
        most_downloaded = 0
        async with scanner:
            async for batch in scanner.iter_batches(to_end=True):
                seen.extend(batch.batch["id"].to_pylist())
                most_downloaded = max(most_downloaded, fetcher.remote.held)
        assert seen == list(range(8000))
        assert 1 < most_downloaded <= 2, most_downloaded  # read ahead, but no more than prefetch-num
        assert not list(io_dir.rglob("*.log")), "the downloaded copies outlived the scanner"

    async def main() -> None:
        settings = {
            "bootstrap.servers": cluster.bootstrap,
            "client.scanner.io.tmpdir": str(io_dir),
            "client.scanner.remote-log.prefetch-num": "2",
            "client.writer.batch-size": "64kb",  # batches well below the segment size
        }
        async with await Connection.create(settings) as conn:
            await asyncio.wait_for(body(conn), 90)

    asyncio.run(main())
