"""`data.dirs`: bad lists refused at start, new replicas spread over the directories, and a restarted
server finds each replica in the directory that holds it (whatever the configured order)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError, LogStorageError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.data_dirs import DataDirs, configured_paths
from strom.server.tablet.replica_manager import ReplicaManager, replica_directory

LEADERSHIP: dict[str, Any] = {
    "database": "db",
    "table": "t",
    "partition_name": None,
    "table_info": make_info(Schema([Column("v", BIGINT())])),
    "leader": 0,
    "leader_epoch": 1,
    "replicas": (0,),
    "isr": (0,),
    "bucket_epoch": 0,
}


def test_bad_data_dirs_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for value, message in (
        (f"{a},{a}/", "twice"),
        (f"{a},{a}/sub", "inside each other"),
        (f"{a}, ,{b}", "empty"),
        (" , ", "lists no directory"),
    ):
        with pytest.raises(InvalidConfigError, match=message):
            configured_paths(tmp_path / "unused", Configuration({"data.dirs": value}))
    # data.dirs wins over data.dir (and --data-dir, which stands for it)
    assert configured_paths(tmp_path / "x", Configuration({"data.dirs": f"{a},{b}"})) == [a, b]
    assert configured_paths(tmp_path / "x", Configuration({})) == [tmp_path / "x"]
    # two servers configured with one directory: the second is refused
    first = DataDirs([a, b])
    first.make()
    with pytest.raises(InvalidConfigError, match="in use by another process"):
        DataDirs([b]).make()
    first.release()


def test_replicas_spread_over_dirs_and_are_found_after_restart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    buckets = [TableBucket(7, None, n) for n in range(4)]

    async def open_all(manager: ReplicaManager) -> None:
        await asyncio.gather(*(manager.take_leadership(bucket, **LEADERSHIP) for bucket in buckets))

    manager = ReplicaManager(0, DataDirs([a, b]), lambda info: LOG_CONFIG)
    asyncio.run(open_all(manager))
    roots = {bucket: manager.replicas[bucket].data_root for bucket in buckets}
    assert sorted(str(r) for r in roots.values()) == [str(a), str(a), str(b), str(b)]
    for n, bucket in enumerate(buckets):
        manager.replicas[bucket].log_tablet().append_as_leader(make_batch(records=n + 1))
    manager.close()

    # restarted with the directories listed the other way round: each replica is found where it is
    again = ReplicaManager(0, DataDirs([b, a]), lambda info: LOG_CONFIG)
    asyncio.run(open_all(again))
    for n, bucket in enumerate(buckets):
        replica = again.replicas[bucket]
        assert replica.data_root == roots[bucket]
        assert replica.log_tablet().log_end_offset == n + 1
    assert [d.replicas for d in again.data_dirs.dirs] == [2, 2]
    again.stop_replica(buckets[0], delete=True)
    assert sum(d.replicas for d in again.data_dirs.dirs) == 3
    again.close()

    # a stale copy in another directory (a disk put back): refused, not guessed
    stale_of = buckets[1]
    original = roots[stale_of]
    assert original is not None
    other = b if original == a else a
    copy = other / relative_of(stale_of, original)
    shutil.copytree(original / relative_of(stale_of, original), copy)
    third = ReplicaManager(0, DataDirs([a, b]), lambda info: LOG_CONFIG)
    with pytest.raises(LogStorageError, match="several data directories"):
        asyncio.run(third.take_leadership(stale_of, **LEADERSHIP))
    third.close()


def relative_of(bucket: TableBucket, root: Path) -> Path:
    return replica_directory(root, "db", "t", bucket, None).relative_to(root)


def test_placing_a_replica_stats_no_disk_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding where a replica's files are stats every directory, and a tie is broken by free space:
    neither touches the disk on the event loop (a busy disk holds a stat for long). The lookup runs in
    an executor; the free space is the one the last check read."""
    a, b = tmp_path / "a", tmp_path / "b"
    dirs = DataDirs([a, b])
    dirs.make()
    assert all(d.free_bytes > 0 for d in dirs.dirs)  # read at start
    dirs.dirs[1].free_bytes = dirs.dirs[0].free_bytes + 1  # as the periodic check would find it
    on_loop: list[str] = []
    real_exists, real_statvfs = Path.exists, os.statvfs

    def exists(path: Path) -> bool:
        if threading.current_thread() is threading.main_thread():
            on_loop.append(f"exists {path}")
        return real_exists(path)

    def statvfs(path: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            on_loop.append(f"statvfs {path}")
        return real_statvfs(path)

    manager = ReplicaManager(0, dirs, lambda info: LOG_CONFIG)
    monkeypatch.setattr(Path, "exists", exists)
    monkeypatch.setattr(os, "statvfs", statvfs)
    asyncio.run(manager.take_leadership(TableBucket(7, None, 0), **LEADERSHIP))
    monkeypatch.undo()
    assert on_loop == [], on_loop
    assert manager.replicas[TableBucket(7, None, 0)].data_root == b  # the one with more free space
    manager.close()
    dirs.release()
