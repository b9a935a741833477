"""The RocksDB memory every KV tablet of a tablet server shares: one block cache, one write-buffer
budget, both checked through RocksDB's own properties of real databases; the options that size them;
idle tablets flushing their memtables; tablets opening when leadership arrives, within the bound."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from pathlib import Path

import pytest
from kv_table_maker import KvTable, make_info
from test_kv_service import SERVER, Server, pk_info

from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_path import TablePath
from strom.common.types import BIGINT, STRING
from strom.server.tablet.kv.kv_manager import IDLE_FLUSH_MIN_BYTES, KvManager
from strom.server.tablet.kv.shared_rocksdb import RocksDbSettings, SharedRocksDb

MB = 1 << 20


def schema() -> Schema:
    return Schema([Column("k", BIGINT()), Column("v", STRING())], primary_key=["k"])


def fill(t: KvTable, rows: int, *, start: int = 0, width: int = 200, batch: int = 2000) -> None:
    for first in range(start, start + rows, batch):
        t.put([(k, "x" * width) for k in range(first, min(first + batch, start + rows))])


def test_every_tablet_reads_through_the_servers_one_block_cache(tmp_path: Path) -> None:
    shared = SharedRocksDb(RocksDbSettings(block_cache_bytes=3 * MB))
    a = KvTable(tmp_path / "a", make_info(schema()), rocksdb=shared)
    b = KvTable(tmp_path / "b", make_info(schema()), rocksdb=shared)
    for t in (a, b):
        assert t.kv.rocksdb_property("rocksdb.block-cache-capacity") == 3 * MB
    fill(a, 2000)
    a.kv.flush_memtable()  # the rows now live in an SST file, read through the block cache
    assert a.lookup(7) == (7, "x" * 200)
    used = shared.block_cache_usage()
    assert used > 0
    # b never read anything, yet sees a's blocks: the same cache object
    assert b.kv.rocksdb_property("rocksdb.block-cache-usage") == used
    assert a.kv.rocksdb_property("rocksdb.block-cache-usage") == used


def test_memtables_of_all_tablets_count_against_one_budget(tmp_path: Path) -> None:
    # 64 MB memtables, but a 2 MB budget over both tablets: RocksDB must flush long before 64 MB
    shared = SharedRocksDb(RocksDbSettings(write_buffer_budget_bytes=2 * MB, write_buffer_bytes=64 * MB))
    a = KvTable(tmp_path / "a", make_info(schema()), rocksdb=shared)
    b = KvTable(tmp_path / "b", make_info(schema()), rocksdb=shared)
    fill(b, 200)
    assert shared.write_buffer_usage() >= b.kv.memtable_bytes() > 0
    fill(a, 30_000)  # about 6 MB of rows
    deadline = time.monotonic() + 10
    while a.kv.rocksdb_property("rocksdb.num-files-at-level0") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # the flush RocksDB scheduled runs on its background thread
    assert (a.kv.rocksdb_property("rocksdb.num-files-at-level0") or 0) > 0
    assert a.kv.memtable_bytes() < 6 * MB
    assert a.lookup(29_999) == (29_999, "x" * 200)


def test_options_reach_the_settings_and_bad_values_are_refused() -> None:
    settings = RocksDbSettings.from_config(
        Configuration(
            {
                "kv.rocksdb.block.cache-size": "16mb",
                "kv.rocksdb.shared-memory.write-buffer-size": "1gb",
                "kv.rocksdb.writebuffer.size": "8mb",
                "kv.rocksdb.writebuffer.count": "3",
                "kv.rocksdb.files.open": "100",
                "kv.rocksdb.thread.num": "4",
            }
        )
    )
    assert settings == RocksDbSettings(16 * MB, 1024 * MB, 8 * MB, 3, 100, 4)
    shared = SharedRocksDb(settings)
    assert shared.write_buffer_manager is not None
    assert shared.write_buffer_manager.get_buffer_size() == 1024 * MB
    assert SharedRocksDb(RocksDbSettings(write_buffer_budget_bytes=0)).write_buffer_manager is None
    for key, value in [
        ("kv.rocksdb.files.open", "0"),
        ("kv.rocksdb.writebuffer.count", "0"),
        ("kv.rocksdb.thread.num", "0"),
    ]:
        with pytest.raises(InvalidConfigError, match=re.escape(key)):
            RocksDbSettings.from_config(Configuration({key: value}))
    with pytest.raises(InvalidConfigError, match=r"kv\.open\.concurrency"):
        KvManager(SERVER, open_concurrency=0)


def test_idle_tablets_flush_their_memtables(tmp_path: Path) -> None:
    server = Server(tmp_path)
    info = make_info(schema())
    other = dataclasses.replace(info, table_id=info.table_id + 1, table_path=TablePath("db", "t2"))

    async def scenario() -> None:
        tables = []
        for table_info in (info, other):
            replica = server.lead(table_info)
            kv = await server.kv.leader_tablet(replica)
            await server.kv.wait_for_db(replica.bucket)
            t = KvTable(tmp_path / f"enc-{table_info.table_id}", table_info)
            t.kv.close()
            t.kv, t.log = kv, replica.log_tablet()
            fill(t, 8000)  # about 1.6 MB: over the idle-flush threshold
            assert kv.memtable_bytes() > IDLE_FLUSH_MIN_BYTES
            tables.append(t)
        busy, idle = tables
        assert await server.kv.flush_idle() == 0  # first look: nothing is known to be idle yet
        busy.put([(1, "again")])
        assert await server.kv.flush_idle() == 1  # only the tablet without a write since
        assert idle.kv.memtable_bytes() < IDLE_FLUSH_MIN_BYTES
        assert busy.kv.memtable_bytes() > IDLE_FLUSH_MIN_BYTES
        assert idle.lookup(7999) == (7999, "x" * 200)

    try:
        asyncio.run(scenario())
    finally:
        server.close()


def test_tablets_open_when_leadership_arrives_a_few_at_a_time(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.kv = KvManager(SERVER, open_concurrency=2)
    info = pk_info()
    buckets = 8

    async def scenario() -> None:
        replicas = [server.lead(info, bucket=b) for b in range(buckets)]
        for replica in replicas:
            server.kv.open_soon(replica)  # what the tablet server's on_leader does
        most = 0
        deadline = time.monotonic() + 30
        while server.kv.opening() and time.monotonic() < deadline:
            most = max(most, len(server.kv._opening))
            await asyncio.sleep(0.001)
        # every tablet open without a single write, never more than two at once; new buckets have
        # nothing to restore, so they open in memory, creating no database
        tablets = [server.kv.tablet(r.bucket) for r in replicas]
        assert all(t is not None and t.is_pending for t in tablets)
        assert most <= 2
        # a write finds its tablet open: the same object, not a new open
        opened = server.kv.tablet(replicas[3].bucket)
        assert await server.kv.leader_tablet(replicas[3]) is opened
        assert server.kv.tablet(TableBucket(info.table_id, None, buckets)) is None

    try:
        asyncio.run(scenario())
    finally:
        server.close()
