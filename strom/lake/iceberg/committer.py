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

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from strom.common.partition import parse_partition_name, partition_qualified_name
from strom.common.table_descriptor import TableInfo
from strom.lake.errors import LakeCommitConflictError, StaleLakeCommitError
from strom.lake.iceberg.catalog import IcebergLakeCatalog
from strom.lake.iceberg.deletes import commit_files
from strom.lake.iceberg.files import delete_quietly
from strom.lake.iceberg.live_files import load_partition_files
from strom.lake.iceberg.maintenance import compact_bucket, expire_snapshots
from strom.lake.iceberg.writer import IcebergWriteResult, partition_values
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import (
    COMMIT_USER_PROPERTY,
    FLUSS_LAKE_TIERING_COMMIT_USER,
    FLUSS_OFFSETS_PROPERTY,
    BucketOffset,
    decode_bucket_offsets,
    encode_bucket_offsets,
    is_tiering_snapshot,
)

__all__ = ["COMMIT_ID_PROPERTY", "IcebergLakeCommitter", "ancestors"]

# Identifies a round's results in the snapshot that holds them (retries are recognised by it).
COMMIT_ID_PROPERTY = "strom-commit-id"
_COMMIT_ATTEMPTS = 3


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
    props = _properties(snapshot)
    offsets = decode_bucket_offsets(props[FLUSS_OFFSETS_PROPERTY])
    return LakeSnapshotInfo(
        snapshot_id=snapshot.snapshot_id,
        bucket_offsets={(o.partition_id, o.bucket): o.offset for o in offsets},
        partition_names={
            o.partition_id: o.partition_name
            for o in offsets
            if o.partition_id is not None and o.partition_name is not None
        },
        properties=props,
        timestamp_ms=snapshot.timestamp_ms,
    )


def latest_tiering_snapshot(table: Table) -> Snapshot | None:
    for snapshot in ancestors(table):
        if is_tiering_snapshot(_properties(snapshot)):
            return snapshot
    return None


def commit_id(results: Sequence[IcebergWriteResult], offsets: Mapping[BucketKey, int]) -> str:
    """A digest of the round's files and offsets: the same round always gets the same id."""
    paths = sorted(f.path for r in results for f in r.files)
    keyed = sorted(((-1 if p is None else p), b, o) for (p, b), o in offsets.items())
    digest = hashlib.sha256(json.dumps([paths, keyed]).encode())
    return digest.hexdigest()[:32]


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
        iceberg_results = [self._check_result(r) for r in results]
        offsets = {(p, int(b)): int(o) for (p, b), o in bucket_offsets.items()}
        for result in iceberg_results:
            if result.bucket_key not in offsets:
                raise ValueError(f"no end offset given for bucket {result.table_bucket} of a write result")
            if result.end_offset is not None and result.end_offset > offsets[result.bucket_key]:
                # The lake would hold records past the recorded offset; the next round would repeat them.
                raise ValueError(
                    f"bucket {result.table_bucket} wrote records up to offset {result.end_offset} but its "
                    f"end offset is given as {offsets[result.bucket_key]}"
                )
        round_id = commit_id(iceberg_results, offsets)
        names = self._partition_names(iceberg_results, partition_names)
        for attempt in range(_COMMIT_ATTEMPTS):
            table = self._load()
            done = self._committed_snapshot(table, round_id)
            if done is not None:
                return done
            latest = latest_tiering_snapshot(table)
            previous = snapshot_info(latest) if latest is not None else None
            self._check_offsets(previous, offsets, iceberg_results)
            self._check_deletes(table, iceberg_results)
            summary = self._summary(previous, offsets, names, properties, round_id)
            added = [f.to_data_file() for r in iceberg_results for f in r.files]
            try:
                return commit_files(table, added, (), summary)
            except (CommitFailedException, ValidationException):
                # Someone committed first: look again (it may have been this very round).
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _check_result(self, result: WriteResult) -> IcebergWriteResult:
        if not isinstance(result, IcebergWriteResult):
            raise TypeError(f"not an Iceberg write result: {type(result).__name__}")
        if result.table_bucket.table_id != self._info.table_id:
            raise ValueError(
                f"write result of {result.table_bucket} is not for table id {self._info.table_id}"
            )
        return result

    def _partition_names(
        self, results: Sequence[IcebergWriteResult], given: Mapping[int, str] | None
    ) -> dict[int, str]:
        """Partition id -> qualified name ("dt=2025/region=eu")."""
        keys = self._info.partition_keys
        names: dict[int, str] = {}
        fluss_names = dict(given or {})
        for r in results:
            if r.table_bucket.partition_id is not None and r.partition_name is not None:
                fluss_names.setdefault(r.table_bucket.partition_id, r.partition_name)
        for pid, name in fluss_names.items():
            spec = parse_partition_name(keys, name)
            names[pid] = partition_qualified_name(keys, [spec[k] for k in keys])
        return names

    @staticmethod
    def _committed_snapshot(table: Table, round_id: str) -> int | None:
        for snapshot in ancestors(table):
            if _properties(snapshot).get(COMMIT_ID_PROPERTY) == round_id:
                return snapshot.snapshot_id
        return None

    def _check_offsets(
        self,
        previous: LakeSnapshotInfo | None,
        offsets: Mapping[BucketKey, int],
        results: Sequence[IcebergWriteResult],
    ) -> None:
        committed = previous.bucket_offsets if previous is not None else {}
        overlapping = {
            r.bucket_key: (r.start_offset, committed[r.bucket_key])
            for r in results
            if r.start_offset is not None
            and r.bucket_key in committed
            and r.start_offset < committed[r.bucket_key]
        }
        if overlapping:
            # A job that started from older offsets re-read records the lake already holds.
            raise StaleLakeCommitError(
                f"Refusing to commit {self._info.table_path}: results start below the lake's tiered "
                f"offsets (first offset written, committed): {overlapping}; those records are already "
                f"in lake snapshot {previous.snapshot_id if previous else None}."
            )
        behind = {k: (o, committed[k]) for k, o in offsets.items() if k in committed and o < committed[k]}
        if behind:
            raise StaleLakeCommitError(
                f"Refusing to commit {self._info.table_path}: buckets {sorted(behind, key=str)} would go "
                f"back from the lake's tiered offsets (given, committed): {behind}. The lake snapshot "
                f"{previous.snapshot_id if previous else None} already holds these records."
            )
        advanced = [k for k, o in offsets.items() if o > committed.get(k, 0) or k not in committed]
        if not advanced:
            raise StaleLakeCommitError(
                f"Refusing to commit {self._info.table_path}: the offsets {dict(offsets)} are not ahead of "
                f"lake snapshot {previous.snapshot_id if previous else None}, which already holds them."
            )

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

    def _summary(
        self,
        previous: LakeSnapshotInfo | None,
        offsets: Mapping[BucketKey, int],
        names: Mapping[int, str],
        properties: Mapping[str, str] | None,
        round_id: str,
    ) -> dict[str, str]:
        merged = dict(previous.bucket_offsets) if previous is not None else {}
        merged.update(offsets)
        known_names = {**(previous.partition_names if previous is not None else {}), **names}
        entries = [
            BucketOffset(p, b, o, None if p is None else known_names.get(p)) for (p, b), o in merged.items()
        ]
        summary = {str(k): str(v) for k, v in (properties or {}).items()}
        summary[COMMIT_USER_PROPERTY] = FLUSS_LAKE_TIERING_COMMIT_USER
        summary[FLUSS_OFFSETS_PROPERTY] = encode_bucket_offsets(entries)
        summary[COMMIT_ID_PROPERTY] = round_id
        return summary

    # -- aborting -------------------------------------------------------------------------------

    def abort(self, results: Sequence[WriteResult]) -> None:
        iceberg_results = [self._check_result(r) for r in results]
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
        latest = latest_tiering_snapshot(table)
        carried: dict[str, str] = {}
        if latest is not None:
            props = _properties(latest)
            carried = {k: props[k] for k in (COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY)}
        return compact_bucket(table, partition, carried)

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        table = self._load()
        latest = latest_tiering_snapshot(table)
        keep = {latest.snapshot_id} if latest is not None else set()
        return expire_snapshots(table, older_than, retain_last, keep)
