"""The KV tablets of the primary-key buckets this server leads: opening, snapshots, closing.

A tablet is opened the first time a bucket's replica is used as leader (`leader_tablet`), the way a
Fluss leader initialises its KvTablet: the local kv directory is discarded, the newest snapshot in
remote storage that the log can continue from is downloaded (in an executor), and the changelog after
it is replayed (recovery.py; in steps, yielding to the event loop). With no snapshot the whole
changelog is replayed, which needs the log from offset 0.

A tablet belongs to one leadership: if the replica object, its log or its leader epoch changed (a new
leadership after someone else led, so the log may have been truncated) or a write failed, the next
`leader_tablet` rebuilds it. Call `drop` when a replica stops or becomes a follower (its open
RocksDB and pre-write buffer go), and wire `flush_to_high_watermark` into the replica's high-watermark
advance so RocksDB holds every committed change before the high watermark shows it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from strom.common.errors import KvStorageError, NotLeaderOrFollowerError
from strom.common.table_bucket import TableBucket
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.recovery import DEFAULT_READ_BYTES, iter_recover
from strom.server.tablet.kv.snapshot import (
    CompletedSnapshot,
    KvSnapshotStore,
    KvSnapshotter,
    remote_kv_tablet_dir,
    restore_snapshot,
)
from strom.server.tablet.replica_manager import Replica

__all__ = ["KV_DIR", "CommitSnapshot", "KvManager"]

log = logging.getLogger(__name__)

KV_DIR = "kv"  # <replica dir>/kv/{db, snapshots}

# Called with each uploaded snapshot and the leader epoch it was taken under (CommitKvSnapshot).
CommitSnapshot = Callable[[CompletedSnapshot, int], Awaitable[None]]


@dataclass
class _Open:
    replica: Replica
    kv: KvTablet
    leader_epoch: int
    snapshotter: KvSnapshotter | None

    def is_current(self, replica: Replica) -> bool:
        return (
            self.replica is replica
            and self.leader_epoch == replica.leader_epoch
            and self.kv.log is replica.log
            and not self.kv.failed
        )


class KvManager:
    def __init__(
        self,
        server_id: int,
        *,
        remote_data_dir: str | None = None,
        snapshot_num_retained: int = 2,
        write_buffer_bytes: int | None = None,
        recover_read_bytes: int = DEFAULT_READ_BYTES,
        executor: Executor | None = None,
        commit_snapshot: CommitSnapshot | None = None,
        on_snapshot: Callable[[Replica, CompletedSnapshot, float], None] = lambda replica, done, seconds: (
            None
        ),
    ) -> None:
        self.server_id = server_id
        self.remote_data_dir = remote_data_dir
        self.snapshot_num_retained = snapshot_num_retained
        self.write_buffer_bytes = write_buffer_bytes
        self.recover_read_bytes = recover_read_bytes  # changelog bytes read per replay step
        self.executor = executor
        self.commit_snapshot = commit_snapshot
        self.on_snapshot = on_snapshot  # every completed snapshot and how long it took (metrics)
        self._tablets: dict[TableBucket, _Open] = {}
        self._opening: dict[TableBucket, asyncio.Future[_Open]] = {}
        self._locks: dict[TableBucket, asyncio.Lock] = {}

    # ---- access ------------------------------------------------------------------------------

    def lock(self, bucket: TableBucket) -> asyncio.Lock:
        """Serializes the writes (PutKv) of one bucket: each merges against the previous one."""
        lock = self._locks.get(bucket)
        if lock is None:
            lock = self._locks[bucket] = asyncio.Lock()
        return lock

    def tablet(self, bucket: TableBucket) -> KvTablet | None:
        """The open tablet of `bucket`, if any (no opening, no checks)."""
        entry = self._tablets.get(bucket)
        return None if entry is None else entry.kv

    async def leader_tablet(self, replica: Replica) -> KvTablet:
        """The KV tablet of a replica this server leads, opened (restored and replayed) on first use."""
        bucket = replica.bucket
        entry = self._tablets.get(bucket)
        if entry is not None:
            if entry.is_current(replica):
                return entry.kv
            self._close(bucket)
        opening = self._opening.get(bucket)
        if opening is None:
            opening = asyncio.get_running_loop().create_future()
            self._opening[bucket] = opening
            try:
                entry = await self._open(replica)
            except BaseException as e:
                opening.set_exception(e)
                opening.exception()  # a failure nobody else awaited is not "never retrieved"
                raise
            finally:
                if self._opening.get(bucket) is opening:
                    del self._opening[bucket]
            opening.set_result(entry)
        else:
            entry = await asyncio.shield(opening)
        if not entry.is_current(replica) or not replica.is_leader(self.server_id):
            raise NotLeaderOrFollowerError(
                f"server {self.server_id} is no longer the leader of {bucket} (it changed while the kv "
                "tablet was being restored)"
            )
        return entry.kv

    def snapshot_store(self, replica: Replica) -> KvSnapshotStore | None:
        """The remote snapshot directory of the replica's bucket (None without remote storage): the
        table's own remote data dir when it has one, else the server's `remote.data.dir`."""
        remote = replica.table_info.remote_data_dir or self.remote_data_dir
        if not remote:
            return None
        directory = remote_kv_tablet_dir(
            remote, replica.database, replica.table, replica.bucket, replica.partition_name
        )
        return KvSnapshotStore(directory, replica.bucket)

    def delete_snapshots(self, replica: Replica) -> None:
        """Delete every remote snapshot of the replica's bucket (its table or partition was dropped).
        Blocking: run it in an executor."""
        store = self.snapshot_store(replica)
        if store is not None and store.fs.exists(store.root):
            store.fs.rm(store.root, recursive=True)

    async def _open(self, replica: Replica) -> _Open:
        bucket = replica.bucket
        info = replica.table_info
        log_tablet = replica.log_tablet()
        epoch = replica.leader_epoch
        kv_dir = replica.directory / KV_DIR
        db_dir = kv_dir / "db"
        store = self.snapshot_store(replica)
        log_end = log_tablet.log_end_offset

        def restore() -> tuple[CompletedSnapshot | None, KvSnapshotter | None]:
            # Rebuilt from scratch each leadership: the local database may be ahead of a truncated log.
            shutil.rmtree(kv_dir, ignore_errors=True)
            if store is None:
                return None, None
            snapshot = store.latest(max_log_offset=log_end)
            if snapshot is not None:
                restore_snapshot(snapshot, db_dir, store)
            snapshotter = KvSnapshotter(
                store, kv_dir / "snapshots", num_retained=self.snapshot_num_retained, base=snapshot
            )
            return snapshot, snapshotter

        loop = asyncio.get_running_loop()
        snapshot, snapshotter = await loop.run_in_executor(self.executor, restore)
        start = 0 if snapshot is None else snapshot.log_offset
        row_count = 0 if snapshot is None else snapshot.row_count
        kv = KvTablet.open(
            db_dir,
            info,
            log_tablet,
            flushed_offset=start,
            row_count=row_count,
            write_buffer_bytes=self.write_buffer_bytes,
            bucket=bucket.bucket,
        )
        kv.use_schemas(replica.schema_history)
        try:
            for _ in iter_recover(
                kv, log_tablet, start, row_count, read_bytes=self.recover_read_bytes
            ):
                await asyncio.sleep(0)  # let other buckets' requests run between chunks
        except BaseException:
            kv.close()
            raise
        if replica.log is not log_tablet or replica.leader_epoch != epoch:
            kv.close()
            raise NotLeaderOrFollowerError(f"the leadership of {bucket} changed while its kv tablet opened")
        log.info(
            "opened kv tablet of %s from %s, flushed offset %d, %d rows buffered",
            bucket,
            f"snapshot {snapshot.snapshot_id}" if snapshot else "an empty store",
            kv.flushed_offset,
            len(kv.buffer),
        )
        entry = _Open(replica, kv, epoch, snapshotter)
        self._tablets[bucket] = entry
        return entry

    # ---- commits -----------------------------------------------------------------------------

    def flush_to_high_watermark(self, replica: Replica, candidate: int) -> int:
        """Flush the bucket's buffered writes below `candidate` (the high watermark the ISR allows)
        and return the high watermark that may be published: never beyond what RocksDB holds, so a
        change visible in the log can also be looked up. Wire it into the replica's high-watermark
        advance. Without an open tablet of this replica: `candidate` (nothing is buffered)."""
        entry = self._tablets.get(replica.bucket)
        if entry is None or entry.replica is not replica or entry.kv.failed:
            return candidate
        try:
            return min(candidate, entry.kv.flush(candidate))
        except KvStorageError:
            log.exception("flushing the kv tablet of %s failed; it will be rebuilt", replica.bucket)
            return candidate if replica.log is None else min(candidate, replica.log.high_watermark)

    # ---- snapshots ---------------------------------------------------------------------------

    def min_retain_offset(self, bucket: TableBucket) -> int:
        """The changelog offset below which the log may be deleted (the newest snapshot's offset)."""
        entry = self._tablets.get(bucket)
        if entry is None or entry.snapshotter is None:
            return 0
        return entry.snapshotter.last_log_offset or 0

    async def snapshot(self, bucket: TableBucket, *, force: bool = False) -> CompletedSnapshot | None:
        """Take and upload a snapshot of an open tablet; None when there is no remote storage, a
        snapshot is already running, or nothing changed since the last one (unless `force`)."""
        entry = self._tablets.get(bucket)
        if entry is None or entry.snapshotter is None or entry.snapshotter.in_progress:
            return None
        snapshotter = entry.snapshotter
        if not force and snapshotter.last_log_offset == entry.kv.flushed_offset:
            return None
        if not force and snapshotter.latest is None and entry.kv.flushed_offset == 0:
            return None
        epoch = entry.leader_epoch
        commit = None
        if self.commit_snapshot is not None:
            commit_fn = self.commit_snapshot

            async def commit(completed: CompletedSnapshot) -> None:
                await commit_fn(completed, epoch)

        started = time.monotonic()
        completed = await snapshotter.snapshot(entry.kv, self.executor, commit)
        if completed is not None:
            self.on_snapshot(entry.replica, completed, time.monotonic() - started)
        return completed

    def memory_usage(self) -> int:
        """Bytes of RocksDB memtables and table readers over the open tablets."""
        return sum(entry.kv.memory_usage() for entry in list(self._tablets.values()))

    async def snapshot_all(self) -> list[CompletedSnapshot]:
        """One snapshot round over every open tablet; failures are logged, not raised."""
        done: list[CompletedSnapshot] = []
        for bucket in list(self._tablets):
            try:
                snapshot = await self.snapshot(bucket)
            except Exception:
                log.exception("kv snapshot of %s failed", bucket)
                continue
            if snapshot is not None:
                done.append(snapshot)
        return done

    async def run_snapshots(self, interval_s: float) -> None:
        """Snapshot every open tablet every `interval_s` seconds (`kv.snapshot.interval`), forever."""
        while True:
            await asyncio.sleep(interval_s)
            await self.snapshot_all()

    # ---- closing -----------------------------------------------------------------------------

    def _close(self, bucket: TableBucket) -> None:
        entry = self._tablets.pop(bucket, None)
        if entry is not None:
            try:
                entry.kv.close()
            except Exception:
                log.exception("closing the kv tablet of %s failed", bucket)

    def drop(self, bucket: TableBucket) -> None:
        """Close the bucket's tablet (its replica stops or becomes a follower)."""
        self._close(bucket)
        self._locks.pop(bucket, None)

    def close(self) -> None:
        for bucket in list(self._tablets):
            self._close(bucket)
        self._locks.clear()
