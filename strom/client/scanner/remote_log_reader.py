"""Reading tiered (remote) log segments: download them into ``client.scanner.io.tmpdir`` ahead of
the reader, and read batches from the local copies.

A fetch below a bucket's local log start is answered with the remote segments that hold the
offset and those after it. As Fluss's client does, the scanner downloads whole segments with
``client.remote-file.download-thread-num`` threads, and keeps up to
``client.scanner.remote-log.prefetch-num`` segments of a bucket downloaded (or downloading) ahead:
while the caller consumes one segment the next ones arrive. A segment's local copy is deleted once
the bucket's reader has moved past it, and every copy when the scanner closes.

Downloads and reads run in the reader's threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.common.file_io import load_file_io
from strom.record.log_batch import LOG_OVERHEAD, MAX_HEADER_SIZE, V0_HEADER_SIZE, iter_batches, read_header
from strom.rpc.gen import fluss_api_pb2 as pb

__all__ = ["REMOTE_READ_BYTES", "RemoteLogReader", "remote_segment_path"]

log = logging.getLogger(__name__)

# Bytes read from a local copy per fetch (grown until it holds a whole batch).
REMOTE_READ_BYTES = 4 * 1024 * 1024
# Longest `close` waits for downloads under way before removing the local copies.
CLOSE_WAIT = 30.0


def remote_segment_path(tablet_dir: str, segment: pb.PbRemoteLogSegment) -> str:
    """Fluss's remote layout: <tablet dir>/<segment id>/<base offset, 20 digits>.log"""
    return f"{tablet_dir}/{segment.remote_log_segment_id}/{segment.remote_log_start_offset:020d}.log"


class RemoteLogReader:
    def __init__(self, tmpdir: str, prefetch_num: int, download_threads: int) -> None:
        self.tmpdir = tmpdir
        self.prefetch_num = max(1, prefetch_num)
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, download_threads), thread_name_prefix="strom-remote-log"
        )
        self._dir: Path | None = None  # made on first use
        # tablet dir (one per bucket) -> segment id -> its download (the local file when done)
        self._segments: dict[str, OrderedDict[str, asyncio.Future[Path]]] = {}
        self._closed = False

    # ------------------------------------------------------------------ reading

    async def read(self, info: pb.PbRemoteLogFetchInfo, fetch_offset: int) -> bytes:
        """Whole batches of the first listed segment from the one holding `fetch_offset` on, at
        most about REMOTE_READ_BYTES; the segments after it start downloading."""
        if self._closed:
            raise OSError("the remote log reader is closed")
        listed = list(info.remote_log_segments)
        if not listed:
            return b""
        tablet_dir = info.remote_log_tablet_dir
        ahead = listed[: self.prefetch_num]
        self._forget_behind(tablet_dir, {s.remote_log_segment_id for s in ahead})
        for segment in ahead:
            self._download(tablet_dir, segment)
        segments = self._segments[tablet_dir]
        first_id = listed[0].remote_log_segment_id
        download = segments[first_id]
        try:
            local = await asyncio.shield(download)
        except OSError:
            if segments.get(first_id) is download:
                del segments[first_id]  # the next read downloads it again
            raise
        start = info.first_start_pos if info.HasField("first_start_pos") else 0
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, _read_batches, local, start, fetch_offset)

    def downloaded(self, tablet_dir: str) -> list[str]:
        """Segment ids of a bucket downloaded or downloading, oldest first (for tests and logs)."""
        return list(self._segments.get(tablet_dir, ()))

    @property
    def held(self) -> int:
        """Segments downloaded or downloading, over all buckets."""
        return sum(len(segments) for segments in self._segments.values())

    def _download(self, tablet_dir: str, segment: pb.PbRemoteLogSegment) -> None:
        segments = self._segments.setdefault(tablet_dir, OrderedDict())
        segment_id = segment.remote_log_segment_id
        if segment_id in segments:
            return
        bucket_dir = hashlib.sha1(tablet_dir.encode()).hexdigest()[:16]
        name = f"{segment.remote_log_start_offset:020d}.log"
        target = self._local_dir() / bucket_dir / segment_id / name
        remote = remote_segment_path(tablet_dir, segment)
        future = asyncio.get_running_loop().run_in_executor(self._executor, _download, remote, target)
        future.add_done_callback(_retrieve)  # a failed prefetch is reported by the read that needs it
        segments[segment_id] = future

    def _forget_behind(self, tablet_dir: str, keep: set[str]) -> None:
        """Drop the local copies of a bucket's segments its reader has moved past."""
        segments = self._segments.get(tablet_dir)
        if not segments:
            return
        for segment_id in [s for s in segments if s not in keep]:
            self._discard(segments.pop(segment_id))

    def _discard(self, future: asyncio.Future[Path]) -> None:
        if not future.done():
            # Still downloading: delete the copy when the download ends.
            future.add_done_callback(lambda f: self._discard(f))
            return
        if not future.cancelled() and future.exception() is None:
            path = future.result()
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _local_dir(self) -> Path:
        if self._dir is None:
            os.makedirs(self.tmpdir, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix="remote-log-", dir=self.tmpdir))
        return self._dir

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pending = [f for segments in self._segments.values() for f in segments.values()]
        self._segments.clear()
        # Downloads under way finish in their threads (they cannot be interrupted); wait for them
        # for a while, then remove every copy.
        unfinished: set[asyncio.Future[Path]] = set()
        if pending:
            _, unfinished = await asyncio.wait(pending, timeout=CLOSE_WAIT)
        if unfinished:
            log.warning(
                "%d remote log segment download(s) still running after %.0fs; their copies may be left in %s",
                len(unfinished),
                CLOSE_WAIT,
                self._dir,
            )
        self._executor.shutdown(wait=False)
        if self._dir is not None:
            await asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, self._dir, True)


def _retrieve(future: asyncio.Future[Path]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.info("downloading a remote log segment failed: %s", future.exception())


def _download(remote: str, target: Path) -> Path:
    """Copy one remote segment file to `target` (written aside first, so a torn copy is never read)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        location = load_file_io(remote)
        location.fs.get_file(location.path, str(partial))
    except OSError:
        raise
    except Exception as e:  # file systems raise their own errors; the reader reports OSError
        raise OSError(f"cannot download {remote}: {e}") from e
    os.replace(partial, target)
    return target


def _read_batches(path: Path, start: int, fetch_offset: int) -> bytes:
    """Whole batches from the batch holding `fetch_offset` (batches before it are skipped by their
    headers alone), from `start` on, about REMOTE_READ_BYTES of them."""
    with open(path, "rb") as f:
        pos = start
        while True:
            f.seek(pos)
            head = f.read(MAX_HEADER_SIZE)  # any magic's header
            if len(head) < V0_HEADER_SIZE:
                return b""
            header = read_header(head)
            if fetch_offset < 0 or header.next_offset > fetch_offset:
                break
            pos += header.length + LOG_OVERHEAD
        size = REMOTE_READ_BYTES
        while True:
            f.seek(pos)
            data = f.read(size)
            end = 0
            for batch_pos, batch in iter_batches(data):
                end = batch_pos + batch.size
            if end or len(data) < size:
                return data[:end]
            size *= 2
