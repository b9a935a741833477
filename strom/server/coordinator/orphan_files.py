"""Deleting files in remote storage that no metadata refers to.

Remote storage (`remote.data.dir`) holds the tiered log segments (`log/<db>/<table>-<id>[/<partition>-p
<pid>]/<bucket>/<segment id>/`, listed by the bucket's `manifest.json`, whose path the coordinator
keeps) and the KV snapshots (`kv/.../<bucket>/snap-<n>/` and the SSTs they share in `shared/`, listed
by the snapshot handles the coordinator keeps). Files nothing refers to are left behind by a crash
mid-upload, by a leader that died between committing a shorter manifest and deleting what it dropped,
and by dropped tables and partitions, whose replicas delete only local data.

The coordinator, which owns all of that metadata, sweeps the remote root every
`remote.orphan-cleanup.interval` and at once after a table is dropped:
- a table or partition that no longer exists: its directories go, unless an unexpired KV snapshot lease
  still names the table (a reader holds its snapshot);
- of a live bucket, a segment directory its manifest does not list, a `snap-<n>` directory whose
  snapshot the coordinator does not keep (kept ones include leased ones), and an SST in `shared/` no
  kept snapshot lists — each only once it is older than `remote.orphan-cleanup.grace-period`, so an
  upload in flight (written before its manifest or handle is committed) is never taken. A leader's
  next incremental snapshot reuses only SSTs of the latest kept snapshot, which stay referenced.
Everything a tiering job or a reader reaches goes through a manifest or a kept handle, so it stays.

The file-system walk and the deletes are blocking and run in a thread; the metadata is read on the
event loop (the store's reads are in memory). What each pass deleted is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.common.file_io import load_file_io
from strom.server.coordinator.kv_snapshot_leases import leased_table_ids
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"  # strom.server.tablet.remote_log.MANIFEST (servers' modules stay apart)
SNAPSHOT_METADATA = "_METADATA"
_TABLE_DIR = re.compile(r".+-(\d+)$")
_PARTITION_DIR = re.compile(r".+-p(\d+)$")
_SNAPSHOT_DIR = re.compile(r"snap-(\d+)$")


@dataclass(frozen=True, slots=True)
class BucketDir:
    kind: str  # "log" or "kv"
    table_id: int
    partition_id: int | None
    bucket: int
    path: str


@dataclass
class Listing:
    """What the walk found: per table directory (kind, table id, path), its partition directories
    (kind, table id, partition id, path) and its bucket directories."""

    tables: list[tuple[str, int, str]] = field(default_factory=list)
    partitions: list[tuple[str, int, int, str]] = field(default_factory=list)
    buckets: list[BucketDir] = field(default_factory=list)


@dataclass
class Sweep:
    """One pass: what it deleted."""

    files: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)

    def add(self, other: Sweep) -> None:
        self.files += other.files
        self.bytes += other.bytes
        self.paths += other.paths


@dataclass(frozen=True, slots=True)
class Referenced:
    """What the metadata holds of one bucket."""

    manifest: bool  # a committed remote-log manifest (its segment ids come from the file itself)
    snapshot_ids: frozenset[int]
    shared_files: frozenset[str]  # file-system paths of kept snapshots' SSTs


class OrphanFileCleaner:
    def __init__(self, store: OrderedStore, remote_root: str, grace_s: float) -> None:
        self.store = store
        self.remote_root = remote_root.rstrip("/")
        self.grace_s = grace_s
        self.fs = load_file_io(self.remote_root).fs
        self.root_path = load_file_io(self.remote_root).path.rstrip("/")
        self.deleted_files = 0
        self.deleted_bytes = 0
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Sweep now (a table was dropped)."""
        self._wake.set()

    async def run(self, interval_s: float) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval_s)
            self._wake.clear()
            await self.sweep()

    async def sweep(self) -> Sweep:
        listing = await asyncio.to_thread(self._walk)
        done = Sweep()
        # dropped tables and partitions: everything under them (no grace: no metadata can come back)
        gone: list[str] = []
        leased = leased_table_ids(self.store)
        for kind, table_id, path in listing.tables:
            if self.store.get_table_by_id(table_id) is None and not (kind == "kv" and table_id in leased):
                gone.append(path)
        for _, table_id, partition_id, path in listing.partitions:
            if self.store.get_table_by_id(table_id) is None:
                continue  # the table's directory goes as a whole
            if self.store.get_partition_by_id(partition_id) is None:
                gone.append(path)
        gone_set = set(gone)
        live: list[tuple[BucketDir, Referenced]] = []
        for b in listing.buckets:
            if any(b.path.startswith(g + "/") for g in gone_set):
                continue
            if self.store.get_table_by_id(b.table_id) is None:
                continue  # leased: kept whole
            if b.partition_id is not None and self.store.get_partition_by_id(b.partition_id) is None:
                continue
            live.append((b, self._referenced(b)))
        if gone:
            done.add(await asyncio.to_thread(self._delete_trees, gone))
        if live:
            done.add(await asyncio.to_thread(self._sweep_buckets, live, time.time() - self.grace_s))
        if done.files:
            self.deleted_files += done.files
            self.deleted_bytes += done.bytes
            log.info(
                "deleted %d orphan file(s), %d bytes, from remote storage: %s",
                done.files,
                done.bytes,
                ", ".join(done.paths[:10]) + (" ..." if len(done.paths) > 10 else ""),
            )
        return done

    # ---- metadata (event loop)

    def _referenced(self, b: BucketDir) -> Referenced:
        part = -1 if b.partition_id is None else b.partition_id
        if b.kind == "log":
            key = f"remote-log/{b.table_id:020d}/{part}/{b.bucket:06d}"
            return Referenced(self.store.get_document(key) is not None, frozenset(), frozenset())
        ids: set[int] = set()
        shared: set[str] = set()
        for _, value in self.store.list_documents(f"kv-snapshot/{b.table_id:020d}/{part}/{b.bucket:06d}/"):
            handle = json.loads(value)
            ids.add(int(handle["snapshot_id"]))
            for f in handle["kv_snapshot_handle"].get("shared_file_handles", []):
                shared.add(load_file_io(f["kv_file_handle"]["path"]).path)
        return Referenced(False, frozenset(ids), frozenset(shared))

    # ---- the file system (a thread)

    def _walk(self) -> Listing:
        listing = Listing()
        for kind in ("log", "kv"):
            for db_dir in self._dirs(f"{self.root_path}/{kind}"):
                for table_dir in self._dirs(db_dir):
                    match = _TABLE_DIR.match(_name(table_dir))
                    if match is None:
                        continue
                    table_id = int(match.group(1))
                    listing.tables.append((kind, table_id, table_dir))
                    for child in self._dirs(table_dir):
                        name = _name(child)
                        if name.isdigit():
                            listing.buckets.append(BucketDir(kind, table_id, None, int(name), child))
                        elif (p := _PARTITION_DIR.match(name)) is not None:
                            partition_id = int(p.group(1))
                            listing.partitions.append((kind, table_id, partition_id, child))
                            for bucket_dir in self._dirs(child):
                                if _name(bucket_dir).isdigit():
                                    listing.buckets.append(
                                        BucketDir(
                                            kind, table_id, partition_id, int(_name(bucket_dir)), bucket_dir
                                        )
                                    )
        return listing

    def _dirs(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return [e["name"].rstrip("/") for e in entries if e["type"] == "directory"]

    def _delete_trees(self, paths: Iterable[str]) -> Sweep:
        done = Sweep()
        for path in paths:
            done.add(self._delete(path))
        return done

    def _sweep_buckets(self, buckets: list[tuple[BucketDir, Referenced]], older_than: float) -> Sweep:
        done = Sweep()
        for b, ref in buckets:
            try:
                entries = self.fs.ls(b.path, detail=True)
            except FileNotFoundError:
                continue
            if b.kind == "log":
                listed = self._manifest_segments(b.path) if ref.manifest else set()
                for e in entries:
                    name = _name(e["name"])
                    if e["type"] == "directory" and name not in listed and self._older(e["name"], older_than):
                        done.add(self._delete(e["name"]))
                continue
            for e in entries:
                name = _name(e["name"])
                snapshot = _SNAPSHOT_DIR.match(name)
                if e["type"] == "directory" and snapshot is not None:
                    if int(snapshot.group(1)) not in ref.snapshot_ids and self._older(e["name"], older_than):
                        # the handle first, so that a reader listing snapshots never finds a partial one
                        done.add(self._delete(f"{e['name'].rstrip('/')}/{SNAPSHOT_METADATA}"))
                        done.add(self._delete(e["name"]))
                elif e["type"] == "directory" and name == "shared":
                    for f in self.fs.ls(e["name"], detail=True):
                        path = f["name"].rstrip("/")
                        if path not in ref.shared_files and _mtime(f) < older_than:
                            done.add(self._delete(path))
        return done

    def _manifest_segments(self, bucket_path: str) -> set[str]:
        try:
            manifest = json.loads(self.fs.cat_file(f"{bucket_path}/{MANIFEST}"))
        except FileNotFoundError:
            return set()
        return {str(s["segment_id"]) for s in manifest.get("segments", [])}

    def _older(self, path: str, older_than: float) -> bool:
        """Whether everything under `path` was last written before `older_than`."""
        try:
            entries = self.fs.find(path, detail=True, withdirs=False)
        except FileNotFoundError:
            return False
        return all(_mtime(e) < older_than for e in entries.values())

    def _delete(self, path: str) -> Sweep:
        done = Sweep()
        try:
            if self.fs.isdir(path):
                files = self.fs.find(path, detail=True, withdirs=False)
                self.fs.rm(path, recursive=True)
                done.files, done.bytes = len(files), sum(int(f.get("size") or 0) for f in files.values())
            elif self.fs.exists(path):
                size = int(self.fs.info(path).get("size") or 0)
                self.fs.rm(path)
                done.files, done.bytes = 1, size
        except FileNotFoundError:
            return done
        if done.files:
            done.paths.append(path)
        return done


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _mtime(entry: dict[str, Any]) -> float:
    """Seconds since the epoch of an fsspec entry (local: `mtime`; object stores: `LastModified`)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return float(value)
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
    return time.time()  # unknown: treated as new, so never deleted early
