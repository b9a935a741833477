"""KV snapshots and recovery: replay from the changelog, snapshot + replay, incremental uploads,
retention, the snapshot handle JSON."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kv_table_maker import KvTable, Op, make_info

from strom.common.errors import KvStorageError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT, INT, STRING
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.recovery import recover
from strom.server.tablet.kv.snapshot import (
    CompletedSnapshot,
    KvSnapshotStore,
    KvSnapshotter,
    SnapshotFile,
    remote_kv_tablet_dir,
    restore_snapshot,
)

BUCKET = TableBucket(7, None, 0)


def schema() -> Schema:
    return Schema([Column("k", INT()), Column("s", STRING()), Column("n", BIGINT())], primary_key=["k"])


def write_rounds(t: KvTable, rounds: range, *, writer_id: int = -1) -> None:
    """Upserts, updates, deletes (also of missing keys) and no-op batches over several PutKvs."""
    for r in rounds:
        ops: list[Op] = [(k, f"r{r}-{k}", r * 100 + k) for k in range(r % 7, 60, 3)]
        ops += [("-", k) for k in range(r % 5, 60, 11)]
        ops.append(("-", 1000 + r))
        idempotent = writer_id >= 0
        t.put(ops, writer_id=writer_id, batch_sequence=2 * r if idempotent else -1)
        # a no-op: an empty changelog batch for an idempotent writer, nothing otherwise
        t.put([("-", 2000 + r)], writer_id=writer_id, batch_sequence=2 * r + 1 if idempotent else -1)


def rebuilt(t: KvTable, directory: Path, start: int = 0, row_count: int | None = 0) -> KvTablet:
    kv = KvTablet.open(directory, t.info, t.log, flushed_offset=start, row_count=row_count)
    recover(kv, t.log, start, row_count)
    return kv


def test_replay_without_snapshot_rebuilds_the_same_state(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    write_rounds(t, range(12), writer_id=5)
    kv = rebuilt(t, tmp_path / "replayed")
    assert t.state(kv) == t.state()
    assert kv.row_count == t.kv.row_count == len(t.state())
    assert kv.flushed_offset == t.log.log_end_offset


def test_replay_of_a_wal_image_changelog(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema(), {"table.changelog.image": "WAL"}))
    write_rounds(t, range(6))
    kv = rebuilt(t, tmp_path / "replayed", row_count=None)
    assert t.state(kv) == t.state()


def test_replay_puts_the_uncommitted_tail_into_the_buffer(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    t.put([(1, "a", 1), (2, "b", 2)])
    t.put([(1, "a2", 3), ("-", 2)], commit=False)  # appended, high watermark not moved
    hw = t.log.high_watermark
    kv = rebuilt(t, tmp_path / "replayed")
    assert kv.flushed_offset == hw == 2
    assert len(kv.buffer) == 2
    assert {v for v in kv.multi_get([t.key(1), t.key(2)])} == {t.value((1, "a", 1)), t.value((2, "b", 2))}
    kv.flush(t.log.log_end_offset)
    assert kv.multi_get([t.key(1), t.key(2)]) == [t.value((1, "a2", 3)), None]


def test_snapshot_then_more_writes_then_restore_and_replay(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote" / "bucket-0"), BUCKET)
    snapshotter = KvSnapshotter(store, tmp_path / "t" / "kv" / "snapshots")
    write_rounds(t, range(8))
    pending = snapshotter.prepare(t.kv)
    assert pending.state.log_offset == t.kv.flushed_offset == t.log.log_end_offset
    first = pending.upload()
    snapshotter.complete(first)
    assert not pending.checkpoint_dir.exists()  # the local checkpoint is gone after the upload
    state_at_snapshot = dict(t.state())
    write_rounds(t, range(8, 16))
    assert t.state() != state_at_snapshot

    # restore the snapshot alone: exactly the state at snapshot time
    restore_snapshot(first, tmp_path / "restored-only")
    alone = KvTablet.open(tmp_path / "restored-only", t.info, t.log, flushed_offset=first.log_offset)
    assert t.state(alone) == state_at_snapshot
    alone.close()

    # restore + replay from the snapshot's offset: the current state
    restore_snapshot(first, tmp_path / "restored", store)
    kv = rebuilt(t, tmp_path / "restored", first.log_offset, first.row_count)
    assert t.state(kv) == t.state()
    assert kv.row_count == t.kv.row_count


def test_incremental_upload_reuses_unchanged_ssts_and_retention(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote"), BUCKET)
    snapshotter = KvSnapshotter(store, tmp_path / "t" / "kv" / "snapshots", num_retained=2)
    write_rounds(t, range(4))
    s1 = snapshotter.prepare(t.kv).upload()
    snapshotter.complete(s1)
    write_rounds(t, range(4, 8))
    s2 = snapshotter.prepare(t.kv).upload()
    assert snapshotter.complete(s2) == []
    # every SST of snapshot 1 is still live and was not uploaded again
    s1_ssts = {f.local_name: f for f in s1.shared_files}
    s2_ssts = {f.local_name: f for f in s2.shared_files}
    assert s1_ssts and set(s1_ssts) < set(s2_ssts)
    assert all(s2_ssts[name] == f for name, f in s1_ssts.items())
    new_sst_bytes = sum(f.size for name, f in s2_ssts.items() if name not in s1_ssts)
    assert s2.incremental_size == new_sst_bytes + sum(f.size for f in s2.private_files)
    assert s2.incremental_size < s2.size
    assert store.snapshot_ids() == [1, 2]

    # compaction replaces the SSTs; with one snapshot retained the old ones are deleted
    db = t.kv._db
    assert db is not None  # the snapshots above created the tablet's database
    db.compact_range(None, None)
    write_rounds(t, range(8, 10))
    snapshotter.num_retained = 1
    s3 = snapshotter.prepare(t.kv).upload()
    assert snapshotter.complete(s3) == [1, 2]
    assert store.snapshot_ids() == [3]
    remaining = {p.name for p in (tmp_path / "remote" / "shared").iterdir()}
    assert remaining == {f.remote_path.rsplit("/", 1)[1] for f in s3.shared_files}
    restore_snapshot(s3, tmp_path / "restored", store)
    kv = KvTablet.open(tmp_path / "restored", t.info, t.log, flushed_offset=s3.log_offset)
    assert t.state(kv) == t.state()


def test_snapshots_continue_after_restore(tmp_path: Path) -> None:
    """A database restored from a snapshot reuses that snapshot's SSTs in its next snapshot."""
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote"), BUCKET)
    write_rounds(t, range(5))
    s1 = KvSnapshotter(store, tmp_path / "snaps-a").prepare(t.kv).upload()
    restore_snapshot(s1, tmp_path / "restored", store)
    kv = rebuilt(t, tmp_path / "restored", s1.log_offset, s1.row_count)
    snapshotter = KvSnapshotter(store, tmp_path / "snaps-b", base=s1)
    s2 = snapshotter.prepare(kv).upload()
    assert s2.snapshot_id == 2
    assert {f.remote_path for f in s1.shared_files} <= {f.remote_path for f in s2.shared_files}


def test_async_snapshot_with_commit_hook(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote"), BUCKET)
    snapshotter = KvSnapshotter(store, tmp_path / "snaps")
    write_rounds(t, range(3))
    committed: list[bytes] = []

    async def commit(snapshot: CompletedSnapshot) -> None:
        committed.append(snapshot.to_json_bytes())

    snapshot = asyncio.run(snapshotter.snapshot(t.kv, commit=commit))
    assert committed == [snapshot.to_json_bytes()]
    assert snapshotter.latest == snapshot and not snapshotter.in_progress
    assert store.latest() == snapshot

    async def failing(snapshot: CompletedSnapshot) -> None:
        raise RuntimeError("coordinator unreachable")

    t.put([(1, "x", 1)])
    with pytest.raises(RuntimeError):
        asyncio.run(snapshotter.snapshot(t.kv, commit=failing))
    # the upload is complete and stays usable for restore
    assert store.snapshot_ids() == [1, 2] and not snapshotter.in_progress


class _WritesDuringFlush(ThreadPoolExecutor):
    """Runs `KvTablet.flush_memtable` on its thread, then has `write` run on the event loop before
    the flush counts as done: a PutKv that arrives while the snapshot's memtable flush runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop, write: Callable[[], object]) -> None:
        super().__init__(max_workers=1)
        self.loop = loop
        self.write = write
        self.flush_threads: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if getattr(fn, "__name__", "") != "flush_memtable":
            return super().submit(fn, *args, **kwargs)

        def flush_then_write() -> None:
            fn(*args, **kwargs)
            self.flush_threads.append(threading.current_thread().name)
            asyncio.run_coroutine_threadsafe(self._write(), self.loop).result()

        return super().submit(flush_then_write)

    async def _write(self) -> None:
        self.write()


def test_snapshot_flushes_the_memtable_off_the_loop_and_keeps_writes_made_meanwhile(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote"), BUCKET)
    snapshotter = KvSnapshotter(store, tmp_path / "snaps")
    write_rounds(t, range(6))

    async def main() -> tuple[CompletedSnapshot, list[str]]:
        executor = _WritesDuringFlush(asyncio.get_running_loop(), lambda: t.put([(500, "late", 5), ("-", 3)]))
        with executor:
            return await snapshotter.snapshot(t.kv, executor), executor.flush_threads

    snapshot, flush_threads = asyncio.run(main())
    assert flush_threads and flush_threads[0] != threading.main_thread().name
    # the write made during the flush is in the snapshot, which covers the log up to its end
    assert snapshot.log_offset == t.log.log_end_offset
    restore_snapshot(snapshot, tmp_path / "restored")
    restored = KvTablet.open(tmp_path / "restored", t.info, t.log, flushed_offset=snapshot.log_offset)
    assert t.state(restored) == t.state()
    assert t.key(500) in dict(t.state())
    restored.close()


def test_flush_memtable_of_a_closed_tablet_fails(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    write_rounds(t, range(2))
    t.kv.close()
    with pytest.raises(KvStorageError):
        t.kv.flush_memtable()


def test_failed_upload_leaves_nothing_behind(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    store = KvSnapshotStore(str(tmp_path / "remote"), BUCKET)
    snapshotter = KvSnapshotter(store, tmp_path / "snaps")
    write_rounds(t, range(2))
    pending = snapshotter.prepare(t.kv)
    real_put = store.fs.put_file
    calls = 0

    def flaky_put(src: str, dst: str, **kwargs: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError("disk full")
        real_put(src, dst, **kwargs)

    store.fs.put_file = flaky_put
    try:
        with pytest.raises(KvStorageError, match="disk full"):
            pending.upload()
    finally:
        store.fs.put_file = real_put
    snapshotter.abort(pending)
    assert store.snapshot_ids() == [] and store.snapshot_dir_ids() == []
    assert list((tmp_path / "remote" / "shared").iterdir()) == []
    assert not pending.checkpoint_dir.exists()


def test_snapshot_handle_json_is_flusss(tmp_path: Path) -> None:
    snapshot = CompletedSnapshot(
        TableBucket(3, 11, 2),
        5,
        "/remote/kv/db/t-3/p-p11/2/snap-5",
        (SnapshotFile("/remote/kv/db/t-3/p-p11/2/shared/u1", "000009.sst", 100),),
        (SnapshotFile("/remote/kv/db/t-3/p-p11/2/snap-5/u2", "CURRENT", 16),),
        116,
        42,
        7,
    )
    obj = json.loads(snapshot.to_json_bytes())
    assert obj == {
        "version": 1,
        "table_id": 3,
        "partition_id": 11,
        "bucket_id": 2,
        "snapshot_id": 5,
        "snapshot_location": "/remote/kv/db/t-3/p-p11/2/snap-5",
        "kv_snapshot_handle": {
            "shared_file_handles": [
                {
                    "kv_file_handle": {"path": "/remote/kv/db/t-3/p-p11/2/shared/u1", "size": 100},
                    "local_path": "000009.sst",
                }
            ],
            "private_file_handles": [
                {
                    "kv_file_handle": {"path": "/remote/kv/db/t-3/p-p11/2/snap-5/u2", "size": 16},
                    "local_path": "CURRENT",
                }
            ],
            "snapshot_incremental_size": 116,
        },
        "log_offset": 42,
        "row_count": 7,
    }
    assert CompletedSnapshot.from_json_bytes(snapshot.to_json_bytes()) == snapshot
    assert remote_kv_tablet_dir("s3://b/fluss/", "db", "t", TableBucket(3, 11, 2), "p") == (
        "s3://b/fluss/kv/db/t-3/p-p11/2"
    )
    assert remote_kv_tablet_dir("/data", "db", "t", TableBucket(3, None, 0)) == "/data/kv/db/t-3/0"


def test_replay_refuses_a_changelog_with_a_gap(tmp_path: Path) -> None:
    t = KvTable(tmp_path / "t", make_info(schema()))
    write_rounds(t, range(3))
    kv = KvTablet.open(tmp_path / "x", t.info, t.log)
    with pytest.raises(KvStorageError, match="log ends at"):
        recover(kv, t.log, t.log.log_end_offset + 5)
