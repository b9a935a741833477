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

import time
from collections.abc import Mapping, Sequence
from datetime import datetime

from pypaimon.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from pypaimon.snapshot.snapshot_commit import PartitionStatistics, SnapshotCommit
from pypaimon.table.file_store_table import FileStoreTable
from pypaimon.write.file_store_commit import FileStoreCommit

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
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import FLUSS_LAKE_TIERING_COMMIT_USER
from strom.lake.paimon.catalog import PaimonLakeCatalog
from strom.lake.paimon.snapshots import (
    added_files,
    latest_tiering_snapshot,
    newest_first,
    snapshot_info,
    snapshot_properties,
)
from strom.lake.paimon.writer import PaimonWriteResult, discard_messages
from strom.lake.snapshot_summary import qualified_partition_names, tiering_summary

__all__ = ["COMMIT_ID_PROPERTY", "PaimonLakeCommitter"]

# Per commit: fail at once when another snapshot took the id, and record rounds without files too.
_COMMIT_OPTIONS = {"commit.max-retries": "0", "snapshot.ignore-empty-commit": "false"}


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
        paimon_results, offsets = checked_round(
            results, bucket_offsets, PaimonWriteResult, "a Paimon", self._info
        )
        round_id = commit_id((name for r in paimon_results for name in r.file_names), offsets)
        names = qualified_partition_names(self._info, paimon_results, partition_names)
        for attempt in range(COMMIT_ATTEMPTS):
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
            summary = tiering_summary(previous, offsets, names, properties, round_id)
            snapshot_id = 1 if latest is None else latest.id + 1
            if self._commit_as(table, snapshot_id, paimon_results, summary):
                return snapshot_id
            time.sleep(0.05 * (attempt + 1))  # someone committed first: look again
        raise LakeCommitConflictError(
            f"Could not commit a tiering round of {self._info.table_path}: other commits kept taking the "
            f"next snapshot id ({COMMIT_ATTEMPTS} attempts)."
        )

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
        # A method of its own so that tests can commit another round right after the checks.
        check_offsets_ahead(self._info.table_path, previous, offsets, results)

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
        paimon_results = checked_results(results, PaimonWriteResult, "a Paimon", self._info)
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
