"""Opening the files of many replicas at once, with their syncs done together.

A new replica writes a few small files (its identity, the first segment, the leader-epoch entry), and
each used to be made durable by its own fsync: three to four syncs per replica, one after another,
so 2,048 new buckets spent most of ~40 s waiting on the disk (the leader-epoch file now has a writer
thread of its own, leader_epoch.py). Here the opens that a NotifyLeaderAndIsr
starts are gathered into batches: one executor job per batch writes every replica's files without
syncing, then every file and directory the batch wrote is fsynced in parallel (the file system's
journal commits concurrent fsyncs together: 500 of them take ~70 ms on this machine, against ~7 ms
each one after another). Each open completes only once its batch is synced, so what the leadership
is acknowledged on is as durable as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Generic, TypeVar

from strom.server.tablet.log.segment import fsync_path

__all__ = ["ReplicaOpener", "fsync_all"]

T = TypeVar("T")

log = logging.getLogger(__name__)

# replicas per executor job, and jobs under way at once
BATCH_SIZE = 128
CONCURRENT_BATCHES = 4
# file operations (fsyncs, a batch's opens) in flight at once: they wait on the disk, not on the GIL
SYNC_THREADS = 32

_sync_pool: ThreadPoolExecutor | None = None
_sync_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _sync_pool
    with _sync_pool_lock:
        if _sync_pool is None:
            _sync_pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="replica-files")
        return _sync_pool


def fsync_all(paths: list[Path]) -> None:
    """fsync every path (files and directories), many at once; raises the first failure. The files
    go first, then the directories that name them, so that a crash in the middle leaves no entry
    naming a file whose data is not on the disk."""
    if not paths:
        return
    pool = _pool()
    unique = list(dict.fromkeys(paths))
    files = [p for p in unique if not p.is_dir()]
    directories = [p for p in unique if p.is_dir()]
    for group in (files, directories):
        for future in [pool.submit(fsync_path, p) for p in group]:
            future.result()


class _Open(Generic[T]):
    __slots__ = ("close", "future", "work")

    def __init__(
        self, work: Callable[[list[Path]], T], future: asyncio.Future[T], close: Callable[[T], None]
    ) -> None:
        self.work = work
        self.future = future
        self.close = close


class ReplicaOpener(Generic[T]):
    """Runs `work(paths)` calls in batches on an executor; each call appends the paths it wrote and
    that must be fsynced before its result counts (see the module's doc)."""

    def __init__(self, batch_size: int = BATCH_SIZE, concurrency: int = CONCURRENT_BATCHES) -> None:
        self.batch_size = batch_size
        self._waiting: list[_Open[T]] = []
        self._slots = asyncio.Semaphore(concurrency)
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self, work: Callable[[list[Path]], T], close: Callable[[T], None]) -> T:
        """`work`'s result once it and the fsyncs of its batch are done. Should the batch's sync fail,
        `close` releases what `work` opened and the caller gets the error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._waiting.append(_Open(work, future, close))
        if not self._scheduled:
            # the other buckets of the same request are queued in this same pass of the loop
            self._scheduled = True
            loop.call_soon(self._start_batches)
        return await future

    def _start_batches(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        for i in range(0, len(waiting), self.batch_size):
            task = asyncio.get_running_loop().create_task(self._run(waiting[i : i + self.batch_size]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Open[T]]) -> None:
        try:
            async with self._slots:
                outcomes = await asyncio.to_thread(_open_batch, batch)
        except BaseException as e:  # the executor itself failed (or the loop is closing)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        for item, (ok, value) in zip(batch, outcomes, strict=True):
            if item.future.done():  # its caller was cancelled: nobody takes what it opened
                if ok:
                    item.close(value)  # type: ignore[arg-type]
            elif ok:
                item.future.set_result(value)  # type: ignore[arg-type]
            else:
                item.future.set_exception(value)  # type: ignore[arg-type]


def _open_batch(batch: list[_Open[T]]) -> list[tuple[bool, T | BaseException]]:
    """Every work of the batch, then one parallel sync of what they wrote."""
    # the works themselves run side by side too: an existing replica's open still syncs its leader
    # epoch file and renames checkpoints, waits on the disk that overlap
    written: list[list[Path]] = [[] for _ in batch]

    def run(i: int) -> tuple[bool, T | BaseException]:
        try:
            return True, batch[i].work(written[i])
        except Exception as e:
            return False, e

    outcomes = list(_pool().map(run, range(len(batch))))
    paths = [p for w in written for p in w]
    try:
        fsync_all(paths)
    except OSError as e:
        # which replica's file failed matters little: the disk is failing, none of them counts
        for i, (ok, value) in enumerate(outcomes):
            if ok:
                try:
                    batch[i].close(value)  # type: ignore[arg-type]
                except Exception:
                    log.exception("closing a replica whose files could not be synced failed")
                outcomes[i] = (False, e)
    return outcomes
