"""KV snapshots: incremental RocksDB snapshots in remote storage, their retention, and restore.

Layout (Fluss's, through fsspec; `remote.data.dir` may be a local path or a URL such as s3://...):

    <remote.data.dir>/kv/<db>/<table>-<table_id>[/<partition>-p<partition_id>]/<bucket>/
        shared/<uuid>            SST files, shared by the snapshots that contain them
        snap-<id>/<uuid>         the snapshot's other files (MANIFEST, CURRENT, OPTIONS, ...)
        snap-<id>/_METADATA      the snapshot handle, written last: no _METADATA, no snapshot

The handle is Fluss's CompletedSnapshot JSON (version 1: bucket, snapshot id and location, shared and
private file handles with their remote path, size and local file name, incremental size, the changelog
`log_offset` it covers, row count), so the same bytes can go to the coordinator in CommitKvSnapshot and
back to clients through GetKvSnapshotMetadata.

Taking a snapshot has two halves:
* `KvSnapshotter.prepare` (on the event loop, ~1 ms): a RocksDB checkpoint (hard links, memtable
  flushed) in `<kv dir>/snapshots/snap-<id>`, recording the tablet's flushed offset and row count.
  `snapshot` first flushes the memtable in the executor (`KvTablet.flush_memtable`), so the flush in
  the checkpoint, which holds the loop, has only the writes since then to do;
* `PendingSnapshot.upload` (blocking; run it in an executor): uploads the SSTs that the previous
  snapshot of this database did not already upload (SST files are immutable and never renumbered
  within one database lineage, so the local name identifies the content), then the other files, then
  `_METADATA`, and deletes the local checkpoint.
`KvSnapshotter.complete` makes the snapshot the base of the next incremental one and applies
retention (`kv.snapshot.num-retained`): older snapshots are deleted with every shared file that no
retained snapshot references.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.errors import KvStorageError
from strom.common.file_io import load_file_io
from strom.common.table_bucket import TableBucket
from strom.server.tablet.kv.kv_tablet import KvTablet, TabletState

__all__ = [
    "METADATA_FILE",
    "CompletedSnapshot",
    "KvSnapshotStore",
    "KvSnapshotter",
    "PendingSnapshot",
    "SnapshotFile",
    "remote_kv_tablet_dir",
    "restore_snapshot",
]

log = logging.getLogger(__name__)

METADATA_FILE = "_METADATA"
SHARED_DIR = "shared"
SNAPSHOT_DIR_PREFIX = "snap-"
SST_SUFFIX = ".sst"
_JSON_VERSION = 1
_SNAPSHOT_DIR = re.compile(r"snap-(\d+)$")


def remote_kv_tablet_dir(
    remote_data_dir: str,
    database: str,
    table: str,
    bucket: TableBucket,
    partition_name: str | None = None,
) -> str:
    """Fluss's remote directory of one bucket's kv snapshots."""
    path = f"{remote_data_dir.rstrip('/')}/kv/{database}/{table}-{bucket.table_id}"
    if bucket.partition_id is not None:
        path += f"/{partition_name}-p{bucket.partition_id}"
    return f"{path}/{bucket.bucket}"


# ---------------------------------------------------------------------------------------------------
# The snapshot handle


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    remote_path: str
    local_name: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_file_handle": {"path": self.remote_path, "size": self.size},
            "local_path": self.local_name,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SnapshotFile:
        handle = obj["kv_file_handle"]
        return cls(str(handle["path"]), str(obj["local_path"]), int(handle["size"]))


@dataclass(frozen=True, slots=True)
class CompletedSnapshot:
    """One uploaded snapshot of a bucket's RocksDB: what restore needs and the offset it covers."""

    bucket: TableBucket
    snapshot_id: int
    location: str  # the remote snap-<id> directory
    shared_files: tuple[SnapshotFile, ...]  # SSTs
    private_files: tuple[SnapshotFile, ...]  # everything else in the checkpoint
    incremental_size: int  # bytes this snapshot uploaded
    log_offset: int  # the changelog offset to replay from: every change below it is in the snapshot
    row_count: int | None = None

    @property
    def files(self) -> tuple[SnapshotFile, ...]:
        return self.shared_files + self.private_files

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def metadata_path(self) -> str:
        return f"{self.location}/{METADATA_FILE}"

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"version": _JSON_VERSION, "table_id": self.bucket.table_id}
        if self.bucket.partition_id is not None:
            obj["partition_id"] = self.bucket.partition_id
        obj["bucket_id"] = self.bucket.bucket
        obj["snapshot_id"] = self.snapshot_id
        obj["snapshot_location"] = self.location
        obj["kv_snapshot_handle"] = {
            "shared_file_handles": [f.to_json() for f in self.shared_files],
            "private_file_handles": [f.to_json() for f in self.private_files],
            "snapshot_incremental_size": self.incremental_size,
        }
        obj["log_offset"] = self.log_offset
        if self.row_count is not None:
            obj["row_count"] = self.row_count
        return obj

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CompletedSnapshot:
        handle = obj["kv_snapshot_handle"]
        partition = obj.get("partition_id")
        row_count = obj.get("row_count")
        return cls(
            TableBucket(
                int(obj["table_id"]), None if partition is None else int(partition), int(obj["bucket_id"])
            ),
            int(obj["snapshot_id"]),
            str(obj["snapshot_location"]),
            tuple(SnapshotFile.from_json(f) for f in handle["shared_file_handles"]),
            tuple(SnapshotFile.from_json(f) for f in handle["private_file_handles"]),
            int(handle["snapshot_incremental_size"]),
            int(obj["log_offset"]),
            None if row_count is None else int(row_count),
        )

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> CompletedSnapshot:
        return cls.from_json(json.loads(data))


# ---------------------------------------------------------------------------------------------------
# Remote storage of one bucket's snapshots


def _filesystem(url: str) -> tuple[Any, str]:
    location = load_file_io(url)
    return location.fs, location.path.rstrip("/")


class KvSnapshotStore:
    """The remote snapshot directory of one bucket: listing, reading, writing and deleting snapshots.

    Blocking I/O throughout; call it from an executor where latency matters.
    """

    def __init__(self, remote_tablet_dir: str, bucket: TableBucket) -> None:
        self.url = remote_tablet_dir.rstrip("/")
        self.bucket = bucket
        self.fs, self.root = _filesystem(self.url)

    # paths: manifests hold URLs in the form the store was given; fsspec calls take its own form
    def url_of(self, relative: str) -> str:
        return f"{self.url}/{relative}"

    def fs_path(self, remote_path: str) -> str:
        if remote_path.startswith(self.url + "/"):
            return self.root + remote_path[len(self.url) :]
        return _filesystem(remote_path)[1]

    def snapshot_dir_ids(self) -> list[int]:
        """Ids of every snap-<id> directory, complete or not, ascending."""
        if not self.fs.exists(self.root):
            return []
        ids = []
        for entry in self.fs.ls(self.root, detail=False):
            match = _SNAPSHOT_DIR.match(entry.rstrip("/").rsplit("/", 1)[-1])
            if match:
                ids.append(int(match.group(1)))
        return sorted(ids)

    def snapshot_ids(self) -> list[int]:
        """Ids of the complete snapshots (with a _METADATA file), ascending."""
        return [
            i
            for i in self.snapshot_dir_ids()
            if self.fs.exists(f"{self.root}/{SNAPSHOT_DIR_PREFIX}{i}/{METADATA_FILE}")
        ]

    def read(self, snapshot_id: int) -> CompletedSnapshot:
        path = f"{self.root}/{SNAPSHOT_DIR_PREFIX}{snapshot_id}/{METADATA_FILE}"
        try:
            return CompletedSnapshot.from_json_bytes(self.fs.cat_file(path))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KvStorageError(
                f"cannot read kv snapshot {snapshot_id} of {self.bucket} at {path}: {e}"
            ) from e

    def latest(self, max_log_offset: int | None = None) -> CompletedSnapshot | None:
        """The newest readable snapshot (covering at most `max_log_offset` when given)."""
        for snapshot_id in reversed(self.snapshot_ids()):
            try:
                snapshot = self.read(snapshot_id)
            except KvStorageError as e:
                log.warning("skipping kv snapshot: %s", e)
                continue
            if max_log_offset is None or snapshot.log_offset <= max_log_offset:
                return snapshot
        return None

    def write_metadata(self, snapshot: CompletedSnapshot) -> None:
        self.fs.pipe_file(self.fs_path(snapshot.metadata_path), snapshot.to_json_bytes())

    def delete_files(self, files: list[SnapshotFile]) -> None:
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self.fs_path(f.remote_path))

    def delete_snapshot_dir(self, snapshot_id: int) -> None:
        path = f"{self.root}/{SNAPSHOT_DIR_PREFIX}{snapshot_id}"
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def retain(self, num_retained: int, protected: frozenset[int] = frozenset()) -> list[int]:
        """Keep the newest `num_retained` complete snapshots and the `protected` ones (leased by a
        reader); delete the older ones, their private files and the shared files no kept snapshot
        references, and abandoned incomplete snapshot directories below the newest complete one.
        Returns the deleted snapshot ids."""
        num_retained = max(1, num_retained)
        complete = self.snapshot_ids()
        if not complete:
            return []
        kept = [i for i in complete[:-num_retained] if i in protected] + complete[-num_retained:]
        kept_snapshots = [self.read(i) for i in kept]
        referenced = {f.remote_path for s in kept_snapshots for f in s.shared_files}
        deleted: list[int] = []
        for snapshot_id in complete[:-num_retained]:
            if snapshot_id in protected:
                continue
            try:
                old = self.read(snapshot_id)
                self.delete_files([f for f in old.shared_files if f.remote_path not in referenced])
            except KvStorageError as e:
                log.warning("deleting an unreadable kv snapshot: %s", e)
            self.delete_snapshot_dir(snapshot_id)
            deleted.append(snapshot_id)
        complete_set = set(complete)
        for snapshot_id in self.snapshot_dir_ids():
            if snapshot_id < kept[-1] and snapshot_id not in complete_set:
                self.delete_snapshot_dir(snapshot_id)
        return deleted


def restore_snapshot(
    snapshot: CompletedSnapshot, target_dir: Path, store: KvSnapshotStore | None = None
) -> None:
    """Download every file of `snapshot` into `target_dir` under its local name (blocking; the
    directory must not hold another database). Open it with `KvTablet.open(target_dir, ...)`."""
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    for f in snapshot.files:
        local = target_dir / f.local_name
        try:
            if store is not None:
                store.fs.get_file(store.fs_path(f.remote_path), str(local))
            else:
                fs, path = _filesystem(f.remote_path)
                fs.get_file(path, str(local))
        except OSError as e:
            raise KvStorageError(
                f"downloading {f.remote_path} of kv snapshot {snapshot.snapshot_id} of {snapshot.bucket} "
                f"failed: {e}"
            ) from e
        if local.stat().st_size != f.size:
            raise KvStorageError(
                f"{f.remote_path} of kv snapshot {snapshot.snapshot_id} has {local.stat().st_size} bytes, "
                f"its handle says {f.size}"
            )


# ---------------------------------------------------------------------------------------------------
# Taking snapshots


@dataclass
class PendingSnapshot:
    """A local checkpoint waiting to be uploaded. `upload` is blocking and thread-safe with respect
    to the tablet (it only reads the checkpoint's hard links)."""

    store: KvSnapshotStore
    snapshot_id: int
    checkpoint_dir: Path
    state: TabletState
    uploaded_before: dict[str, SnapshotFile]  # local SST name -> its file in the base snapshot
    uploaded: list[SnapshotFile] = field(default_factory=list)  # new files of this snapshot

    def upload(self) -> CompletedSnapshot:
        store = self.store
        location = store.url_of(f"{SNAPSHOT_DIR_PREFIX}{self.snapshot_id}")
        shared_dir = store.url_of(SHARED_DIR)
        try:
            store.fs.makedirs(store.fs_path(location), exist_ok=True)
            store.fs.makedirs(store.fs_path(shared_dir), exist_ok=True)
            shared: list[SnapshotFile] = []
            private: list[SnapshotFile] = []
            incremental = 0
            for name in sorted(os.listdir(self.checkpoint_dir)):
                local = self.checkpoint_dir / name
                is_sst = name.endswith(SST_SUFFIX)
                if is_sst:
                    reused = self.uploaded_before.get(name)
                    if reused is not None:
                        shared.append(reused)
                        continue
                # random remote names: two database lineages may both have a 000012.sst
                remote = f"{shared_dir if is_sst else location}/{uuid.uuid4()}"
                size = local.stat().st_size
                store.fs.put_file(str(local), store.fs_path(remote))
                uploaded = SnapshotFile(remote, name, size)
                self.uploaded.append(uploaded)
                (shared if is_sst else private).append(uploaded)
                incremental += size
            snapshot = CompletedSnapshot(
                store.bucket,
                self.snapshot_id,
                location,
                tuple(shared),
                tuple(private),
                incremental,
                self.state.log_offset,
                self.state.row_count,
            )
            store.write_metadata(snapshot)
            return snapshot
        except Exception as e:
            self.discard_remote()
            raise KvStorageError(
                f"uploading kv snapshot {self.snapshot_id} of {store.bucket} failed: {e}"
            ) from e
        finally:
            self.discard_local()

    def discard_local(self) -> None:
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)

    def discard_remote(self) -> None:
        """Delete what this snapshot uploaded (a failed or abandoned upload)."""
        try:
            self.store.delete_files([f for f in self.uploaded if f.local_name.endswith(SST_SUFFIX)])
            self.store.delete_snapshot_dir(self.snapshot_id)
        except Exception:
            log.exception("cleaning up kv snapshot %d of %s failed", self.snapshot_id, self.store.bucket)


class KvSnapshotter:
    """Incremental snapshots of one open KV tablet (one RocksDB lineage).

    `base` is the snapshot the database was restored from (its SSTs are reused); None for a database
    built from scratch, whose SST names may collide with an older lineage's.
    """

    def __init__(
        self,
        store: KvSnapshotStore,
        local_dir: Path,
        *,
        num_retained: int = 2,
        base: CompletedSnapshot | None = None,
    ) -> None:
        self.store = store
        self.local_dir = Path(local_dir)
        self.num_retained = num_retained
        self._base: dict[str, SnapshotFile] = {}
        self._next_id = max(store.snapshot_dir_ids(), default=0) + 1
        self.latest: CompletedSnapshot | None = None
        self.in_progress = False
        if base is not None:
            self._set_base(base)

    def _set_base(self, snapshot: CompletedSnapshot) -> None:
        self._base = {f.local_name: f for f in snapshot.shared_files}
        self.latest = snapshot
        self._next_id = max(self._next_id, snapshot.snapshot_id + 1)

    @property
    def last_log_offset(self) -> int | None:
        """The changelog offset the newest completed snapshot covers (the log must be kept from it)."""
        return None if self.latest is None else self.latest.log_offset

    def prepare(self, kv: KvTablet) -> PendingSnapshot:
        """Checkpoint the tablet now (synchronously, while no write is in between)."""
        if self.in_progress:
            raise KvStorageError(f"a kv snapshot of {self.store.bucket} is already in progress")
        snapshot_id = self._next_id
        self._next_id += 1
        checkpoint_dir = self.local_dir / f"{SNAPSHOT_DIR_PREFIX}{snapshot_id}"
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        self.local_dir.mkdir(parents=True, exist_ok=True)
        try:
            state = kv.create_checkpoint(checkpoint_dir)
        except Exception:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
            raise
        self.in_progress = True
        return PendingSnapshot(self.store, snapshot_id, checkpoint_dir, state, dict(self._base))

    def complete(self, snapshot: CompletedSnapshot, protected: frozenset[int] = frozenset()) -> list[int]:
        """Record a finished upload as the base of the next snapshot and apply retention (blocking),
        keeping the `protected` snapshots too; returns the deleted snapshot ids."""
        try:
            self._set_base(snapshot)
            return self.store.retain(self.num_retained, protected)
        finally:
            self.in_progress = False  # only now: retention and the next upload never overlap

    def abort(self, pending: PendingSnapshot) -> None:
        self.in_progress = False
        pending.discard_local()

    async def snapshot(
        self,
        kv: KvTablet,
        executor: Executor | None = None,
        commit: Callable[[CompletedSnapshot], Any] | None = None,
    ) -> CompletedSnapshot:
        """memtable flush, upload and retention in `executor` (None: the loop's default), prepare on
        the loop.

        `commit` (a coroutine function, e.g. CommitKvSnapshot to the coordinator) runs between upload
        and retention. If it fails the snapshot stays in remote storage (it is complete and valid for
        restore; the coordinator may have committed it before the failure) but retention waits.
        """
        if self.in_progress:
            raise KvStorageError(f"a kv snapshot of {self.store.bucket} is already in progress")
        loop = asyncio.get_running_loop()
        # The memtable flush is most of a checkpoint's time; off the loop first, it leaves `prepare`
        # (which must run on the loop, between two writes) only what was written meanwhile.
        self.in_progress = True
        try:
            await loop.run_in_executor(executor, kv.flush_memtable)
        finally:
            self.in_progress = False
        pending = self.prepare(kv)
        try:
            completed = await loop.run_in_executor(executor, pending.upload)
        except BaseException:
            self.in_progress = False
            raise
        protected: frozenset[int] = frozenset()
        if commit is not None:
            try:
                protected = await commit(completed) or frozenset()
            except BaseException:
                self.in_progress = False
                self._set_base(completed)
                raise
        await loop.run_in_executor(executor, self.complete, completed, protected)
        return completed
