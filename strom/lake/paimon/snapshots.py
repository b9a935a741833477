"""Reading a Paimon table's snapshot history: tiering snapshots and the files snapshots added.

A snapshot made by tiering has commit user ``__fluss_lake_tiering`` (Paimon's own snapshot field,
where Fluss puts it) and a ``fluss-offsets`` property. Strom also writes ``commit-user`` into the
properties, so they read the same as an Iceberg summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.table.file_store_table import FileStoreTable

from strom.lake.interface import LakeSnapshotInfo
from strom.lake.offsets import COMMIT_USER_PROPERTY, FLUSS_LAKE_TIERING_COMMIT_USER, is_tiering_snapshot
from strom.lake.snapshot_summary import tiering_snapshot_info

__all__ = [
    "AddedFile",
    "added_files",
    "latest_tiering_snapshot",
    "newest_first",
    "snapshot_info",
    "snapshot_properties",
]


def snapshot_properties(snapshot: Snapshot) -> dict[str, str]:
    """The snapshot's properties, with its commit user as ``commit-user`` when not written there."""
    props = {str(k): str(v) for k, v in (snapshot.properties or {}).items()}
    props.setdefault(COMMIT_USER_PROPERTY, snapshot.commit_user)
    return props


def _is_tiering(snapshot: Snapshot) -> bool:
    return snapshot.commit_user == FLUSS_LAKE_TIERING_COMMIT_USER and is_tiering_snapshot(
        snapshot_properties(snapshot)
    )


def newest_first(table: FileStoreTable, stop_after: int | None = None) -> Iterator[Snapshot]:
    """Snapshots from the latest back to the earliest still kept (or down to `stop_after`, exclusive)."""
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    floor = 0 if stop_after is None else stop_after
    if latest is None or latest.id <= floor:
        return
    yield latest
    for snapshot_id in range(latest.id - 1, floor, -1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:  # expired: nothing older is kept either
            return
        yield snapshot


def latest_tiering_snapshot(table: FileStoreTable) -> Snapshot | None:
    for snapshot in newest_first(table):
        if _is_tiering(snapshot):
            return snapshot
    return None


def snapshot_info(snapshot: Snapshot) -> LakeSnapshotInfo:
    return tiering_snapshot_info(snapshot.id, snapshot_properties(snapshot), snapshot.time_millis)


@dataclass(frozen=True)
class AddedFile:
    """A data file a snapshot added, and where."""

    snapshot_id: int
    partition: tuple[object, ...]
    bucket: int
    file_name: str


_ADD = 0  # ManifestEntry kind of an added file


def added_files(table: FileStoreTable, after: int | None) -> Iterator[AddedFile]:
    """The data files added by the snapshots newer than snapshot `after` (all kept ones if None)."""
    lists = ManifestListManager(table)
    manifests = ManifestFileManager(table)
    for snapshot in newest_first(table, after):
        for manifest in lists.read_delta(snapshot):
            for entry in manifests.read(manifest.file_name, file_size=manifest.file_size):
                if entry.kind == _ADD:
                    partition = tuple(entry.partition.values)
                    yield AddedFile(snapshot.id, partition, entry.bucket, entry.file.file_name)
