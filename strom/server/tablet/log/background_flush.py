"""fsync of rolled segments, and unlinking of deleted ones, off the event loop.

A roll makes the previous segment immutable; fsyncing it (up to `log.segment.file-size` of dirty
pages) can take seconds, which must not stall the asyncio loop that serves every bucket. The roll
hands the work to one process-wide worker thread (os.fsync releases the GIL) and advances the
recovery point when the future is done. The job owns duplicated descriptors, so a segment deleted
or closed meanwhile does not affect it, and paths that vanished need no sync.

Deleting a segment renames its files on the loop (segment.py `retire`) and unlinks them here:
unlinking frees the file's blocks, ~15 ms per 64 MB on ext4, so a retention pass over big segments
would otherwise hold the loop for seconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from strom.server.tablet.log.segment import fsync_path

__all__ = ["submit_delete", "submit_fsync"]

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-log-fsync")
        return _executor


def _run(fds: Sequence[int], paths: Sequence[Path]) -> None:
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for path in paths:
        fsync_path(path)


def submit_fsync(fds: Sequence[int], paths: Sequence[Path]) -> Future[None]:
    """fsync (then close) the given descriptors, then fsync the given files or directories."""
    return _get_executor().submit(_run, list(fds), list(paths))


def _unlink(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def submit_delete(paths: Sequence[Path]) -> Future[None]:
    """Unlink files that are no longer part of any log (renamed by `LogSegment.retire`)."""
    return _get_executor().submit(_unlink, list(paths))
