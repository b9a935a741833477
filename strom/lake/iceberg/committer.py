"""The Iceberg lake committer: one tiering round -> one Iceberg snapshot carrying Fluss offsets.

Exactly-once rests on three checks made against the metadata the commit is based on (and pyiceberg
fails the commit, without retrying it, if the table moves on before it lands):

* a round whose files are already in a snapshot (same ``strom-commit-id``) is not committed again,
  its snapshot id is returned;
* offsets must move forward: no bucket may go back, and at least one must advance, relative to the
  latest snapshot made by tiering (StaleLakeCommitError otherwise);
* position deletes must still point at live data files (LakeCommitConflictError otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from strom.common.table_descriptor import TableInfo
from strom.lake.commit_checks import (
    COMMIT_ATTEMPTS,
    COMMIT_ID_PROPERTY,
    check_offsets_ahead,
    checked_results,
    checked_round,
    commit_id,
)
from strom.lake.errors import LakeCommitConflictError
from strom.lake.iceberg.catalog import IcebergLakeCatalog
from strom.lake.iceberg.deletes import commit_files
from strom.lake.iceberg.files import delete_quietly
from strom.lake.iceberg.live_files import load_partition_files
from strom.lake.iceberg.maintenance import compact_bucket, compact_buckets, expire_snapshots
from strom.lake.iceberg.writer import IcebergWriteResult, partition_values
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY, is_tiering_snapshot
from strom.lake.snapshot_summary import qualified_partition_names, tiering_snapshot_info, tiering_summary

__all__ = ["COMMIT_ID_PROPERTY", "IcebergLakeCommitter", "ancestors"]


def ancestors(table: Table) -> Iterator[Snapshot]:
    """The main branch's snapshots, newest first."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None


def _properties(snapshot: Snapshot) -> dict[str, str]:
    summary = snapshot.summary
    if summary is None:
        return {}
    return {"operation": summary.operation.value, **summary.additional_properties}


def snapshot_info(snapshot: Snapshot) -> LakeSnapshotInfo:
    return tiering_snapshot_info(snapshot.snapshot_id, _properties(snapshot), snapshot.timestamp_ms)


def latest_tiering_snapshot(table: Table) -> Snapshot | None:
    for snapshot in ancestors(table):
        if is_tiering_snapshot(_properties(snapshot)):
            return snapshot
    return None


class IcebergLakeCommitter(LakeCommitter):
    def __init__(self, catalog: IcebergLakeCatalog, table_info: TableInfo) -> None:
        self._catalog = catalog
        self._info = table_info

    def _load(self) -> Table:
        return self._catalog.load_table(self._info.table_path)

    # -- reading ------------------------------------------------------------------------------

    def latest_snapshot(self) -> LakeSnapshotInfo | None:
        snapshot = latest_tiering_snapshot(self._load())
        return None if snapshot is None else snapshot_info(snapshot)

    # -- committing -----------------------------------------------------------------------------

    def commit(
        self,
        results: Sequence[WriteResult],
        bucket_offsets: Mapping[BucketKey, int],
        properties: Mapping[str, str] | None = None,
        *,
        partition_names: Mapping[int, str] | None = None,
    ) -> int:
        iceberg_results, offsets = checked_round(
            results, bucket_offsets, IcebergWriteResult, "an Iceberg", self._info
        )
        round_id = commit_id((f.path for r in iceberg_results for f in r.files), offsets)
        names = qualified_partition_names(self._info, iceberg_results, partition_names)
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._load()
            done = self._committed_snapshot(table, round_id)
            if done is not None:
                return done
            latest = latest_tiering_snapshot(table)
            previous = snapshot_info(latest) if latest is not None else None
            check_offsets_ahead(self._info.table_path, previous, offsets, iceberg_results)
            self._check_deletes(table, iceberg_results)
            summary = tiering_summary(previous, offsets, names, properties, round_id)
            added = [f.to_data_file() for r in iceberg_results for f in r.files]
            try:
                return commit_files(table, added, (), summary)
            except (CommitFailedException, ValidationException):
                # Someone committed first: look again (it may have been this very round).
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    @staticmethod
    def _committed_snapshot(table: Table, round_id: str) -> int | None:
        for snapshot in ancestors(table):
            if _properties(snapshot).get(COMMIT_ID_PROPERTY) == round_id:
                return snapshot.snapshot_id
        return None

    def _check_deletes(self, table: Table, results: Sequence[IcebergWriteResult]) -> None:
        current = table.current_snapshot()
        current_id = current.snapshot_id if current is not None else None
        for result in results:
            if not result.delete_files or result.base_snapshot_id == current_id:
                continue
            partition = result.delete_files[0].partition
            live = load_partition_files(table, partition, current).paths
            referenced = {p for f in result.delete_files for p in f.referenced_data_files}
            gone = referenced - live
            if gone:
                raise LakeCommitConflictError(
                    f"Bucket {result.table_bucket} of {self._info.table_path} was rewritten since snapshot "
                    f"{result.base_snapshot_id}; its deletes point at files no longer live: {sorted(gone)}."
                )

    # -- aborting -------------------------------------------------------------------------------

    def abort(self, results: Sequence[WriteResult]) -> None:
        iceberg_results = checked_results(results, IcebergWriteResult, "an Iceberg", self._info)
        if not iceberg_results:
            return
        table = self._load()
        live = self._referenced_paths(table, iceberg_results)
        for result in iceberg_results:
            for f in result.files:
                if f.path not in live:  # never delete what a snapshot already references
                    delete_quietly(table, f.path)

    @staticmethod
    def _referenced_paths(table: Table, results: Sequence[IcebergWriteResult]) -> set[str]:
        wanted = {f.path for r in results for f in r.files}
        found: set[str] = set()
        seen: set[str] = set()
        for snapshot in table.snapshots():
            for manifest in snapshot.manifests(table.io):
                if manifest.manifest_path in seen:
                    continue
                seen.add(manifest.manifest_path)
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    if entry.data_file.file_path in wanted:
                        found.add(entry.data_file.file_path)
        return found

    # -- maintenance ----------------------------------------------------------------------------

    def compact(self, bucket: int, partition_name: str | None = None) -> int | None:
        table = self._load()
        partition = partition_values(table, self._info, bucket, partition_name)
        return compact_bucket(table, partition, self._carried(table))

    @staticmethod
    def _carried(table: Table) -> dict[str, str]:
        """The latest tiering snapshot's offsets, which a compaction snapshot carries on."""
        latest = latest_tiering_snapshot(table)
        if latest is None:
            return {}
        props = _properties(latest)
        return {k: props[k] for k in (COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY)}

    def compact_buckets(self, buckets: Sequence[tuple[int, str | None]]) -> list[int]:
        """All the buckets' rewrites in one snapshot (one commit and one manifest merge per round)."""
        table = self._load()
        partitions = [partition_values(table, self._info, b, name) for b, name in buckets]
        snapshot = compact_buckets(table, partitions, self._carried(table))
        return [] if snapshot is None else [snapshot]

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        table = self._load()
        latest = latest_tiering_snapshot(table)
        keep = {latest.snapshot_id} if latest is not None else set()
        return expire_snapshots(table, older_than, retain_last, keep)
