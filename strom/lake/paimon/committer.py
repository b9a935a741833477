"""The Paimon lake committer: one tiering round -> one Paimon snapshot carrying Fluss offsets.

The snapshot is committed by user ``__fluss_lake_tiering`` (as Fluss does) with Paimon's batch
commit identifier, and its properties hold ``commit-user``, ``fluss-offsets`` (the format of
`strom.lake.offsets`) and ``strom-commit-id``. Exactly-once rests on checks made against the
snapshot the commit builds on, and the commit only lands as the very next snapshot id (another
commit in between makes it fail and start over):

* a round whose files are already in a snapshot (same ``strom-commit-id``) is not committed again,
  its snapshot id is returned;
* offsets must move forward: no bucket may go back, and at least one must advance, relative to the
  latest snapshot made by tiering (StaleLakeCommitError otherwise);
* primary-key tables: no other snapshot may have added files to a result's bucket since its writer
  started, since Paimon orders a key's changes by per-bucket sequence numbers that the writer took
  from that snapshot (LakeCommitConflictError otherwise).

pypaimon cannot compact or expire snapshots, so `compact` and `expire_snapshots` do nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime

from pypaimon.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from pypaimon.snapshot.snapshot_commit import PartitionStatistics, SnapshotCommit
from pypaimon.table.file_store_table import FileStoreTable
from pypaimon.write.file_store_commit import FileStoreCommit

from strom.common.partition import parse_partition_name, partition_qualified_name
from strom.common.table_descriptor import TableInfo
from strom.lake.errors import LakeCommitConflictError, StaleLakeCommitError
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import (
    COMMIT_USER_PROPERTY,
    FLUSS_LAKE_TIERING_COMMIT_USER,
    FLUSS_OFFSETS_PROPERTY,
    BucketOffset,
    encode_bucket_offsets,
)
from strom.lake.paimon.catalog import PaimonLakeCatalog
from strom.lake.paimon.snapshots import (
    added_files,
    latest_tiering_snapshot,
    newest_first,
    snapshot_info,
    snapshot_properties,
)
from strom.lake.paimon.writer import PaimonWriteResult, discard_messages

__all__ = ["COMMIT_ID_PROPERTY", "PaimonLakeCommitter", "commit_id"]

# Identifies a round's results in the snapshot that holds them (retries are recognised by it).
COMMIT_ID_PROPERTY = "strom-commit-id"
_COMMIT_ATTEMPTS = 3
# Per commit: fail at once when another snapshot took the id, and record rounds without files too.
_COMMIT_OPTIONS = {"commit.max-retries": "0", "snapshot.ignore-empty-commit": "false"}


def commit_id(results: Sequence[PaimonWriteResult], offsets: Mapping[BucketKey, int]) -> str:
    """A digest of the round's files and offsets: the same round always gets the same id."""
    names = sorted(name for r in results for name in r.file_names)
    keyed = sorted(((-1 if p is None else p), b, o) for (p, b), o in offsets.items())
    return hashlib.sha256(json.dumps([names, keyed]).encode()).hexdigest()[:32]


class _NextSnapshotOnly(SnapshotCommit):
    """Lets a commit land only as snapshot `snapshot_id`: the one the checks were made against + 1."""

    def __init__(self, inner: SnapshotCommit, snapshot_id: int) -> None:
        self._inner = inner
        self._snapshot_id = snapshot_id

    def commit(
        self, base_snapshot_uuid: str | None, snapshot: Snapshot, statistics: list[PartitionStatistics]
    ) -> bool:
        if snapshot.id != self._snapshot_id:
            return False  # pypaimon reports a failed attempt and, with no retries left, raises
        return bool(self._inner.commit(base_snapshot_uuid, snapshot, statistics))

    def close(self) -> None:
        self._inner.close()


def _oldest_base(results: Sequence[PaimonWriteResult]) -> int | None:
    """The oldest snapshot any result's writer started from (None: from an empty table)."""
    bases = [r.base_snapshot_id for r in results]
    if not bases or any(b is None for b in bases):
        return None
    return min(b for b in bases if b is not None)


class PaimonLakeCommitter(LakeCommitter):
    def __init__(self, catalog: PaimonLakeCatalog, table_info: TableInfo) -> None:
        self._catalog = catalog
        self._info = table_info

    def _load(self) -> FileStoreTable:
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
        paimon_results = [self._check_result(r) for r in results]
        offsets = {(p, int(b)): int(o) for (p, b), o in bucket_offsets.items()}
        for result in paimon_results:
            if result.bucket_key not in offsets:
                raise ValueError(f"no end offset given for bucket {result.table_bucket} of a write result")
            if result.end_offset is not None and result.end_offset > offsets[result.bucket_key]:
                # The lake would hold records past the recorded offset; the next round would repeat them.
                raise ValueError(
                    f"bucket {result.table_bucket} wrote records up to offset {result.end_offset} but its "
                    f"end offset is given as {offsets[result.bucket_key]}"
                )
        round_id = commit_id(paimon_results, offsets)
        names = self._partition_names(paimon_results, partition_names)
        for attempt in range(_COMMIT_ATTEMPTS):
            table = self._load()
            done = self._committed_snapshot(table, round_id, paimon_results)
            if done is not None:
                return done
            latest = table.snapshot_manager().get_latest_snapshot()
            tiering = latest_tiering_snapshot(table)
            previous = snapshot_info(tiering) if tiering is not None else None
            self._check_offsets(previous, offsets, paimon_results)
            if self._info.has_primary_key:
                self._check_sequences(table, latest, paimon_results)
            summary = self._summary(previous, offsets, names, properties, round_id)
            snapshot_id = 1 if latest is None else latest.id + 1
            if self._commit_as(table, snapshot_id, paimon_results, summary):
                return snapshot_id
            time.sleep(0.05 * (attempt + 1))  # someone committed first: look again
        raise LakeCommitConflictError(
            f"Could not commit a tiering round of {self._info.table_path}: other commits kept taking the "
            f"next snapshot id ({_COMMIT_ATTEMPTS} attempts)."
        )

    def _check_result(self, result: WriteResult) -> PaimonWriteResult:
        if not isinstance(result, PaimonWriteResult):
            raise TypeError(f"not a Paimon write result: {type(result).__name__}")
        if result.table_bucket.table_id != self._info.table_id:
            raise ValueError(
                f"write result of {result.table_bucket} is not for table id {self._info.table_id}"
            )
        return result

    def _partition_names(
        self, results: Sequence[PaimonWriteResult], given: Mapping[int, str] | None
    ) -> dict[int, str]:
        """Partition id -> qualified name ("dt=2025/region=eu")."""
        keys = self._info.partition_keys
        fluss_names = dict(given or {})
        for r in results:
            if r.table_bucket.partition_id is not None and r.partition_name is not None:
                fluss_names.setdefault(r.table_bucket.partition_id, r.partition_name)
        names: dict[int, str] = {}
        for pid, name in fluss_names.items():
            spec = parse_partition_name(keys, name)
            names[pid] = partition_qualified_name(keys, [spec[k] for k in keys])
        return names

    def _committed_snapshot(
        self, table: FileStoreTable, round_id: str, results: Sequence[PaimonWriteResult]
    ) -> int | None:
        """The snapshot that already holds this round, if any."""
        if results:
            # The round's files are newer than every snapshot its writers started from.
            stop_after = _oldest_base(results)
        else:
            # A round without files can only be found as the latest tiering snapshot.
            tiering = latest_tiering_snapshot(table)
            if tiering is None:
                return None
            stop_after = tiering.id - 1
        for snapshot in newest_first(table, stop_after):
            if snapshot_properties(snapshot).get(COMMIT_ID_PROPERTY) == round_id:
                return snapshot.id
        return None

    def _check_offsets(
        self,
        previous: LakeSnapshotInfo | None,
        offsets: Mapping[BucketKey, int],
        results: Sequence[PaimonWriteResult],
    ) -> None:
        committed = previous.bucket_offsets if previous is not None else {}
        where = f"lake snapshot {previous.snapshot_id if previous else None}"
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
                f"in {where}."
            )
        behind = {k: (o, committed[k]) for k, o in offsets.items() if k in committed and o < committed[k]}
        if behind:
            raise StaleLakeCommitError(
                f"Refusing to commit {self._info.table_path}: buckets {sorted(behind, key=str)} would go "
                f"back from the lake's tiered offsets (given, committed): {behind}. {where} already holds "
                "these records."
            )
        if not any(k not in committed or o > committed[k] for k, o in offsets.items()):
            raise StaleLakeCommitError(
                f"Refusing to commit {self._info.table_path}: the offsets {dict(offsets)} are not ahead of "
                f"{where}, which already holds them."
            )

    def _check_sequences(
        self, table: FileStoreTable, latest: Snapshot | None, results: Sequence[PaimonWriteResult]
    ) -> None:
        latest_id = latest.id if latest is not None else None
        behind = [r for r in results if r.messages and r.base_snapshot_id != latest_id]
        if not behind:
            return
        for added in added_files(table, _oldest_base(behind)):
            for result in behind:
                base = result.base_snapshot_id or 0
                buckets = {(tuple(m.partition), m.bucket) for m in result.messages}
                if added.snapshot_id > base and (added.partition, added.bucket) in buckets:
                    raise LakeCommitConflictError(
                        f"Bucket {result.table_bucket} of {self._info.table_path} got new files in snapshot "
                        f"{added.snapshot_id} after its writer started from snapshot {base}; the round's "
                        "sequence numbers would not order after them."
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

    def _commit_as(
        self,
        table: FileStoreTable,
        snapshot_id: int,
        results: Sequence[PaimonWriteResult],
        summary: dict[str, str],
    ) -> bool:
        """Commit the round as snapshot `snapshot_id`; False when another commit took that id."""
        target = table.copy(dict(_COMMIT_OPTIONS))
        messages = [m for r in results for m in r.messages if not m.is_empty()]
        guard = _NextSnapshotOnly(target.new_snapshot_commit(), snapshot_id)
        commit = FileStoreCommit(guard, target, FLUSS_LAKE_TIERING_COMMIT_USER)
        try:
            commit.commit(messages, BATCH_COMMIT_IDENTIFIER, summary)
        except RuntimeError:
            latest = table.snapshot_manager().get_latest_snapshot()
            if latest is not None and latest.id >= snapshot_id:
                return False  # lost the race (or won it without hearing back): the caller looks again
            raise
        finally:
            commit.close()
        return True

    # -- aborting -------------------------------------------------------------------------------

    def abort(self, results: Sequence[WriteResult]) -> None:
        paimon_results = [self._check_result(r) for r in results]
        with_files = [r for r in paimon_results if r.messages]
        if not with_files:
            return
        table = self._load()
        # Never delete what a snapshot already holds (the round may have committed after all).
        committed = {a.file_name for a in added_files(table, _oldest_base(with_files))}
        for result in with_files:
            if not committed.intersection(result.file_names):
                discard_messages(table, result.messages)

    # -- maintenance ----------------------------------------------------------------------------

    def compact(self, bucket: int, partition_name: str | None = None) -> int | None:
        """pypaimon has no compaction (it rejects compact increments); small files accumulate."""
        return None

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        """pypaimon cannot expire snapshots; nothing is expired."""
        return 0
