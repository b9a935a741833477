"""The KV tablets of the primary-key buckets this server leads: opening, snapshots, closing.

A tablet opens when its bucket's leadership arrives (`open_soon`, called on NotifyLeaderAndIsr), the
way a Fluss leader initialises its KvTablet: the local kv directory is discarded, the newest snapshot
in remote storage that the log can continue from is downloaded and RocksDB is opened (both in an
executor: a database creation syncs several files, tens of ms), then the changelog after it is
replayed (recovery.py; in steps, yielding to the event loop). With no snapshot the whole changelog is
replayed, which needs the log from offset 0. At most `kv.open.concurrency` tablets open at once; a
request for a tablet that has not started opening yet (`leader_tablet`) opens it at once, without
waiting for its turn, and a request for one that is opening waits for that tablet only.

A small tablet has no database until it needs one (pending_store.py says why): a bucket whose log is
empty (a new table, a new partition), or whose changelog holds fewer than PENDING_MAX_LOG_RECORDS
changes and no snapshot (a restart), opens from memory (`KvTablet.pending`, replaying that changelog
into memory). Its database is created, one at a time in the background, once its rows pass
PENDING_TABLET_BYTES or its changelog PENDING_MAX_LOG_RECORDS, or a snapshot of it is asked for;
while every pending tablet together holds more than `pending_budget_bytes`, a request for a pending
tablet waits for its database, which goes to the front of the queue. So 2,048 new buckets take their
first writes without 2,048 database creations (each 30-70 ms, with rocksdict holding the GIL: it
stalls the event loop too). A snapshot (the periodic round included) of a pending tablet that holds
changes creates its database first: the creations move from the first write to the snapshot round.

Every tablet's RocksDB shares the server's block cache and write-buffer budget (shared_rocksdb.py).
A tablet that had no write for `kv.rocksdb.idle-flush.interval` flushes its memtables
(`run_idle_flush`), handing their memory back to the shared budget.

A tablet belongs to one leadership: if the replica object, its log or its leader epoch changed (a new
leadership after someone else led, so the log may have been truncated) or a write failed, the next
`leader_tablet` rebuilds it. Call `drop` when a replica stops or becomes a follower (its open
RocksDB and pre-write buffer go; the close, which flushes the memtable, runs in an executor and an
open of the same bucket waits for it), and wire `flush_to_high_watermark` into the replica's high-watermark
advance so RocksDB holds every committed change before the high watermark shows it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.common.errors import InvalidConfigError, KvStorageError, NotLeaderOrFollowerError
from strom.common.supervision import spawn
from strom.common.table_bucket import TableBucket
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.pending_store import PendingBudget
from strom.server.tablet.kv.recovery import DEFAULT_READ_BYTES, iter_recover
from strom.server.tablet.kv.shared_rocksdb import SharedRocksDb
from strom.server.tablet.kv.snapshot import (
    CompletedSnapshot,
    KvSnapshotStore,
    KvSnapshotter,
    remote_kv_tablet_dir,
    restore_snapshot,
)
from strom.server.tablet.replica_manager import Replica

if TYPE_CHECKING:
    from rocksdict import Rdict

__all__ = ["KV_DIR", "PENDING_BUDGET_BYTES", "CommitSnapshot", "KvManager"]

log = logging.getLogger(__name__)

KV_DIR = "kv"  # <replica dir>/kv/{db, snapshots}

# An idle tablet flushes only memtables bigger than this: a flush writes and syncs a file, which is
# not worth it for the few KB of a tablet holding a handful of rows.
IDLE_FLUSH_MIN_BYTES = 1 << 20

# The rows every tablet still waiting for its database may hold in memory together, per server: a
# new table's first writes fit many times over, and a bulk load into one waits for the databases
# instead of growing the heap.
PENDING_BUDGET_BYTES = 64 << 20
# A pending tablet gets its database past either bound: rows worth a database of their own, or a
# changelog long enough that replaying it at every restart would cost more than a snapshot.
PENDING_TABLET_BYTES = 1 << 20
PENDING_MAX_LOG_RECORDS = 4096

# Called with each uploaded snapshot and the leader epoch it was taken under (CommitKvSnapshot).
# commits a snapshot; answers the snapshot ids of the bucket that must survive retention (leased ones)
CommitSnapshot = Callable[[CompletedSnapshot, int], Awaitable[frozenset[int] | None]]


_Restored = tuple[CompletedSnapshot | None, KvSnapshotter | None, KvTablet]


def _close_opened(done: asyncio.Future[_Restored | None]) -> None:
    if not done.cancelled() and done.exception() is None:
        restored = done.result()
        if restored is not None:
            restored[2].close()


@dataclass
class _Open:
    replica: Replica
    kv: KvTablet
    leader_epoch: int
    snapshotter: KvSnapshotter | None
    # set once a pending tablet's database is attached, or its creation failed or was abandoned
    db_ready: asyncio.Future[None] | None = None

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
        rocksdb: SharedRocksDb | None = None,
        open_concurrency: int = 4,
        recover_read_bytes: int = DEFAULT_READ_BYTES,
        pending_budget_bytes: int = PENDING_BUDGET_BYTES,
        executor: Executor | None = None,
        commit_snapshot: CommitSnapshot | None = None,
        on_snapshot: Callable[[Replica, CompletedSnapshot, float], None] = lambda replica, done, seconds: (
            None
        ),
    ) -> None:
        self.server_id = server_id
        self.remote_data_dir = remote_data_dir
        self.snapshot_num_retained = snapshot_num_retained
        self.snapshot_interval = 600.0  # kv.snapshot.interval in seconds, set by the server
        self.rocksdb = rocksdb or SharedRocksDb()
        if open_concurrency < 1:
            raise InvalidConfigError(f"kv.open.concurrency must be at least 1, not {open_concurrency}")
        self.open_concurrency = open_concurrency
        self.recover_read_bytes = recover_read_bytes  # changelog bytes read per replay step
        self.executor = executor
        # RocksDB opens and restores get threads of their own, so that a thousand of them queued at
        # leadership never hold up the default executor's other blocking work; one thread more than
        # the opens in turn, for a request that opens its tablet out of turn
        self._open_executor = ThreadPoolExecutor(open_concurrency + 1, thread_name_prefix="kv-open")
        self._open_turns = asyncio.Semaphore(open_concurrency)
        self._scheduled: dict[TableBucket, asyncio.Task[None]] = {}  # open_soon tasks
        self._opened_in_memory = 0  # new tablets opened since the last log line about them
        self._idle_seen: dict[TableBucket, int] = {}  # flushed offset at the previous idle check
        self.commit_snapshot = commit_snapshot
        self.on_snapshot = on_snapshot  # every completed snapshot and how long it took (metrics)
        self._tablets: dict[TableBucket, _Open] = {}
        self._opening: dict[TableBucket, asyncio.Future[_Open]] = {}
        self._locks: dict[TableBucket, asyncio.Lock] = {}
        # Closing a tablet flushes its memtable (rocksdict always does, tens of ms to seconds), so
        # closes run on threads of their own, off the event loop; an open of the same bucket waits
        # for its close (RocksDB's lock on the directory, and the open clears the directory first).
        self._close_executor = ThreadPoolExecutor(2, thread_name_prefix="kv-close")
        self._closing: dict[TableBucket, asyncio.Future[None]] = {}
        # pending tablets whose database is still to be created, in turn, and the creations under way
        self._pending_budget = PendingBudget(pending_budget_bytes)
        self._to_create: OrderedDict[TableBucket, _Open] = OrderedDict()
        self._creators = 0
        self._creating: dict[TableBucket, asyncio.Task[None]] = {}
        self._creating_entry: dict[TableBucket, _Open] = {}

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

    def open_soon(self, replica: Replica) -> None:
        """Open the replica's tablet in the background, in turn (it just became the leader). A
        failure is logged; the next request for the tablet tries again and reports it."""
        bucket = replica.bucket
        if bucket in self._scheduled or bucket in self._opening:
            return
        entry = self._tablets.get(bucket)
        if entry is not None and entry.is_current(replica):
            return
        task = spawn(self._open_in_turn(replica), name="kv-open")
        self._scheduled[bucket] = task
        task.add_done_callback(lambda done: self._unschedule(bucket, done))

    def _unschedule(self, bucket: TableBucket, done: asyncio.Task[None]) -> None:
        if self._scheduled.get(bucket) is done:
            del self._scheduled[bucket]
        if not self._scheduled:
            self._log_opened_in_memory()

    def _log_opened_in_memory(self) -> None:
        """One line for the tablets opened in memory since the last one (a line per tablet cost the
        event loop ~0.5 ms each: a second for a 2,048-bucket table)."""
        if self._opened_in_memory:
            log.info(
                "opened kv tablets of %d bucket(s) in memory (no database until they grow)",
                self._opened_in_memory,
            )
            self._opened_in_memory = 0

    async def _open_in_turn(self, replica: Replica) -> None:
        async with self._open_turns:
            if not replica.is_leader(self.server_id) or replica.log is None:
                return  # the leadership moved on while this tablet waited for its turn
            try:
                await self.leader_tablet(replica)
            except NotLeaderOrFollowerError as e:
                log.info("kv tablet of %s not opened: %s", replica.bucket, e)
            except Exception:
                log.exception(
                    "opening the kv tablet of %s failed; the next request for it retries", replica.bucket
                )

    def opening(self) -> int:
        """Tablets waiting for their turn to open or opening now, or serving from memory while their
        database is created."""
        return len(
            self._scheduled.keys() | self._opening.keys() | self._to_create.keys() | self._creating.keys()
        )

    async def leader_tablet(self, replica: Replica) -> KvTablet:
        """The KV tablet of a replica this server leads: the open one, or the one being opened, or
        opened now (restored and replayed) if it has not started opening yet."""
        bucket = replica.bucket
        entry = self._tablets.get(bucket)
        if entry is not None:
            if entry.is_current(replica):
                kv = entry.kv
                if kv.is_pending:
                    if self._pending_budget.exhausted:
                        await self._wait_for_db(entry)
                    elif (
                        kv.pending_bytes() > PENDING_TABLET_BYTES
                        or kv.log.log_end_offset > PENDING_MAX_LOG_RECORDS
                    ):
                        self._queue_db(entry)
                return kv
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
        closing = self._closing.get(bucket)
        if closing is not None:
            await asyncio.shield(closing)  # never fails: _close_tablet logs
        creating = self._creating.get(bucket)
        if creating is not None:  # an earlier leadership's database, which it closes when it sees it stale
            await asyncio.shield(creating)  # never fails: _create_db logs
        log_end = log_tablet.log_end_offset
        if log_end == 0:
            return self._open_pending(replica)

        def restore_and_open() -> _Restored | None:
            snapshot = snapshotter = None
            if store is not None:
                snapshot = store.latest(max_log_offset=log_end)
            if snapshot is None and log_end <= PENDING_MAX_LOG_RECORDS:
                return None  # a short changelog and no snapshot: rebuilt in memory
            # Rebuilt from scratch each leadership: the local database may be ahead of a truncated log.
            shutil.rmtree(kv_dir, ignore_errors=True)
            if store is not None:
                if snapshot is not None:
                    restore_snapshot(snapshot, db_dir, store)
                snapshotter = KvSnapshotter(
                    store, kv_dir / "snapshots", num_retained=self.snapshot_num_retained, base=snapshot
                )
            kv = KvTablet.open(
                db_dir,
                info,
                log_tablet,
                flushed_offset=0 if snapshot is None else snapshot.log_offset,
                row_count=0 if snapshot is None else snapshot.row_count,
                rocksdb=self.rocksdb,
                bucket=bucket.bucket,
            )
            return snapshot, snapshotter, kv

        loop = asyncio.get_running_loop()
        pending = loop.run_in_executor(self._open_executor, restore_and_open)
        try:
            restored = await asyncio.shield(pending)
        except asyncio.CancelledError:
            # the thread goes on: close what it opens, or the database stays locked for the next open
            pending.add_done_callback(_close_opened)
            raise
        if restored is None:
            entry = self._pending_entry(replica)
            try:
                for _ in iter_recover(entry.kv, log_tablet, 0, 0, read_bytes=self.recover_read_bytes):
                    await asyncio.sleep(0)
            except BaseException:
                entry.kv.close()
                raise
            if replica.log is not log_tablet or replica.leader_epoch != epoch:
                entry.kv.close()
                raise NotLeaderOrFollowerError(
                    f"the leadership of {bucket} changed while its kv tablet opened"
                )
            self._tablets[bucket] = entry
            log.debug(
                "opened kv tablet of %s in memory from its changelog (%d changes, no snapshot)",
                bucket,
                log_end,
            )
            self._opened_in_memory += 1  # one line for them all (`_log_opened_in_memory`)
            if bucket not in self._scheduled:
                self._log_opened_in_memory()
            return entry
        snapshot, snapshotter, kv = restored
        start = 0 if snapshot is None else snapshot.log_offset
        row_count = 0 if snapshot is None else snapshot.row_count
        kv.use_schemas(replica.schema_history)
        try:
            for _ in iter_recover(kv, log_tablet, start, row_count, read_bytes=self.recover_read_bytes):
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

    def _open_pending(self, replica: Replica) -> _Open:
        """The tablet of a bucket with an empty log: serving from memory now."""
        entry = self._pending_entry(replica)
        self._tablets[replica.bucket] = entry
        log.debug("opened kv tablet of %s in memory (no database until it grows)", replica.bucket)
        self._opened_in_memory += 1
        if replica.bucket not in self._scheduled:  # opened by a request, not in turn
            self._log_opened_in_memory()
        return entry

    def _pending_entry(self, replica: Replica) -> _Open:
        kv = KvTablet.pending(
            replica.directory / KV_DIR / "db",
            replica.table_info,
            replica.log_tablet(),
            self._pending_budget,
            bucket=replica.bucket.bucket,
        )
        kv.use_schemas(replica.schema_history)
        return _Open(replica, kv, replica.leader_epoch, None, asyncio.get_running_loop().create_future())

    def _queue_db(self, entry: _Open, *, first: bool = False) -> None:
        """Queue the creation of a pending tablet's database (`first`: ahead of the others)."""
        bucket = entry.replica.bucket
        if bucket in self._creating and self._creating_entry.get(bucket) is entry:
            return
        if self._to_create.get(bucket) is not entry:
            self._to_create[bucket] = entry
        if first:
            self._to_create.move_to_end(bucket, last=False)
        # one creation at a time: rocksdict holds the GIL while RocksDB creates a database, so more
        # in parallel would only stall the event loop longer
        if self._creators == 0:
            self._creators += 1
            spawn(self._create_dbs(), name="kv-create-db")

    async def wait_for_db(self, bucket: TableBucket) -> None:
        """Wait until the bucket's open tablet has its database (at once when it already has one)."""
        entry = self._tablets.get(bucket)
        if entry is not None and entry.kv.is_pending:
            await self._wait_for_db(entry)

    async def _wait_for_db(self, entry: _Open) -> None:
        """The pending budget is spent: this tablet's database comes next, and the caller waits."""
        bucket = entry.replica.bucket
        self._queue_db(entry, first=True)
        assert entry.db_ready is not None
        await asyncio.shield(entry.db_ready)
        if entry.kv.failed:
            raise KvStorageError(f"creating the kv store of {bucket} failed; the next request rebuilds it")

    async def _create_dbs(self) -> None:
        """One of at most `open_concurrency` workers creating the queued tablets' databases."""
        try:
            while self._to_create:
                bucket, entry = self._to_create.popitem(last=False)
                async with self._open_turns:
                    if self._tablets.get(bucket) is not entry:  # closed while it waited
                        continue
                    task = asyncio.ensure_future(self._create_db(bucket, entry))
                    self._creating[bucket] = task
                    self._creating_entry[bucket] = entry
                    try:
                        await asyncio.shield(task)
                    finally:
                        if self._creating.get(bucket) is task:
                            del self._creating[bucket]
                            del self._creating_entry[bucket]
        finally:
            self._creators -= 1

    async def _create_db(self, bucket: TableBucket, entry: _Open) -> None:
        """Create the database of a pending tablet and attach it; a tablet closed meanwhile gets its
        database closed again (before a new leadership of the bucket clears the directory)."""
        kv = entry.kv
        ready = entry.db_ready
        assert ready is not None
        try:
            if self._tablets.get(bucket) is not entry or not kv.is_pending or kv.failed:
                return
            store = self.snapshot_store(entry.replica)
            kv_dir = entry.replica.directory / KV_DIR
            retained = self.snapshot_num_retained

            def create() -> tuple[Rdict, KvSnapshotter | None]:
                shutil.rmtree(kv_dir, ignore_errors=True)
                snapshotter = None
                if store is not None:
                    snapshotter = KvSnapshotter(store, kv_dir / "snapshots", num_retained=retained)
                return KvTablet.create_db(kv_dir / "db", self.rocksdb), snapshotter

            loop = asyncio.get_running_loop()
            try:
                db, snapshotter = await loop.run_in_executor(self._open_executor, create)
            except Exception as e:
                log.exception("creating the kv store of %s failed; the next request rebuilds it", bucket)
                kv.mark_failed(e)
                return
            if self._tablets.get(bucket) is not entry or not kv.is_pending or kv.failed:
                await loop.run_in_executor(self._close_executor, db.close)
                return
            try:
                kv.attach_db(db)
            except KvStorageError:
                # the tablet is failed and owns the database now: the next request closes and rebuilds it
                log.exception("moving the rows of kv tablet %s into its new store failed", bucket)
                return
            entry.snapshotter = snapshotter
            log.info("opened kv tablet of %s: created its store, %d rows moved in", bucket, kv.row_count or 0)
        except Exception:  # anything else (a cancelled executor at shutdown): logged, tablet unusable
            log.exception("creating the kv store of %s failed", bucket)
        finally:
            if not ready.done():
                ready.set_result(None)

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
        if entry is not None and entry.kv.is_pending:
            if not force and entry.kv.flushed_offset == 0:
                return None  # nothing written: no database needed yet
            await self._wait_for_db(entry)  # a snapshot is of the database: it comes first
            if self._tablets.get(bucket) is not entry:
                return None
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

            async def commit(completed: CompletedSnapshot) -> frozenset[int] | None:
                return await commit_fn(completed, epoch)

        started = time.monotonic()
        completed = await snapshotter.snapshot(entry.kv, self.executor, commit)
        if completed is not None:
            self.on_snapshot(entry.replica, completed, time.monotonic() - started)
        return completed

    def memory_usage(self) -> int:
        """Bytes of RocksDB memtables and table readers over the open tablets."""
        return sum(entry.kv.memory_usage() for entry in list(self._tablets.values()))

    # ---- idle tablets ------------------------------------------------------------------------

    async def flush_idle(self) -> int:
        """Flush the memtables of the tablets with no write since the previous call (and more than
        IDLE_FLUSH_MIN_BYTES in memtables), one at a time in the executor; returns how many."""
        flushed = 0
        seen: dict[TableBucket, int] = {}
        loop = asyncio.get_running_loop()
        for bucket, entry in list(self._tablets.items()):
            kv = entry.kv
            if kv.failed:
                continue
            offset = seen[bucket] = kv.flushed_offset
            if self._idle_seen.get(bucket) != offset or kv.memtable_bytes() < IDLE_FLUSH_MIN_BYTES:
                continue
            try:
                await loop.run_in_executor(self.executor, kv.flush_memtable)
                flushed += 1
            except KvStorageError as e:
                if self._tablets.get(bucket) is entry:  # not closed meanwhile: a real failure
                    log.error("flushing the memtable of idle kv tablet %s failed: %s", bucket, e)
        self._idle_seen = seen
        return flushed

    async def run_idle_flush(self, interval_s: float) -> None:
        """`flush_idle` every `interval_s` seconds (`kv.rocksdb.idle-flush.interval`), forever."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                count = await self.flush_idle()
            except Exception:
                log.exception("flushing idle kv tablets failed")
                continue
            if count:
                log.info("flushed the memtables of %d idle kv tablet(s)", count)

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

    async def run_snapshots(self) -> None:
        """Snapshot every open tablet every `snapshot_interval` seconds (`kv.snapshot.interval`, which
        a dynamic cluster config may change between rounds), forever."""
        while True:
            await asyncio.sleep(self.snapshot_interval)
            await self.snapshot_all()

    # ---- closing -----------------------------------------------------------------------------

    def _close(self, bucket: TableBucket) -> None:
        """Forget the bucket's tablet and close it in the close executor (at once without an event
        loop); `_open` of the bucket waits for that close."""
        entry = self._tablets.pop(bucket, None)
        if entry is None:
            return
        if self._to_create.get(bucket) is entry:
            del self._to_create[bucket]
        if entry.kv.is_pending:
            # no database to flush; on the loop, because the pending budget is counted there. A
            # creation under way sees the tablet gone and closes its database (`_open` waits for it).
            entry.kv.close()
            if entry.db_ready is not None and not entry.db_ready.done():
                entry.db_ready.set_result(None)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _close_tablet(bucket, entry.kv)
            return
        closing = loop.run_in_executor(self._close_executor, _close_tablet, bucket, entry.kv)
        self._closing[bucket] = closing

        def forget(done: asyncio.Future[None]) -> None:
            if self._closing.get(bucket) is done:
                del self._closing[bucket]

        closing.add_done_callback(forget)

    async def wait_closed(self) -> None:
        """Wait for the closes under way (before their directories' files are deleted)."""
        pending: list[asyncio.Future[None]] = [*self._closing.values(), *self._creating.values()]
        if pending:
            await asyncio.gather(*(asyncio.shield(f) for f in pending))

    def drop(self, bucket: TableBucket) -> None:
        """Close the bucket's tablet (its replica stops or becomes a follower), in the background."""
        self._close(bucket)
        self._locks.pop(bucket, None)

    def _close_all(self) -> None:
        for task in list(self._scheduled.values()):
            task.cancel()
        self._scheduled.clear()
        self._to_create.clear()
        for bucket in list(self._tablets):
            self._close(bucket)
        self._locks.clear()

    async def aclose(self) -> None:
        """Close every tablet, in parallel and off the event loop (server shutdown)."""
        self._close_all()
        await self.wait_closed()
        await asyncio.to_thread(self._shutdown_executors)

    def close(self) -> None:
        """Close every tablet and wait for it (blocking: for callers without an event loop)."""
        self._close_all()
        self._shutdown_executors()

    def _shutdown_executors(self) -> None:
        self._close_executor.shutdown(wait=True)
        self._open_executor.shutdown(wait=True, cancel_futures=True)


def _close_tablet(bucket: TableBucket, kv: KvTablet) -> None:
    try:
        kv.close()
    except Exception:
        if kv.directory.exists():
            log.exception("closing the kv tablet of %s failed", bucket)
        else:  # its replica was deleted meanwhile: the memtable flush had nowhere to go
            log.info("closed the kv tablet of deleted replica %s without its final flush", bucket)
