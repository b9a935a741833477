"""The Lance lake committer: one tiering round -> one dataset version carrying Fluss offsets.

A round's fragments are appended by one Lance transaction whose transaction properties hold
``commit-user=__fluss_lake_tiering``, ``fluss-offsets`` and ``strom-commit-id`` (as Fluss's Lance
committer stores them). Exactly once rests on the format-independent checks of
`strom.lake.commit_checks` made against the latest tiering version, and on the commit landing as the
very next version: Lance rebases an append over concurrent appends, so a commit lock refuses any
other version number (and, for a local warehouse, also serialises committers with a file lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import lance

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
from strom.lake.lance.catalog import LanceLakeCatalog, delete_data_files
from strom.lake.lance.writer import LanceWriteResult
from strom.lake.offsets import COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY, is_tiering_snapshot
from strom.lake.snapshot_summary import qualified_partition_names, tiering_snapshot_info, tiering_summary

__all__ = ["LanceLakeCommitter"]

# The file a local warehouse's committers lock while one of them writes a version.
COMMIT_LOCK_FILE = "_strom_commit.lock"

# How old a version must be before `expire_snapshots` removes it by default: Lance's own default
# for `cleanup_old_versions` (two weeks).
DEFAULT_VERSION_MAX_AGE = timedelta(days=14)


class _NotNextVersion(Exception):
    """Lance tried to commit as another version than the one the checks were made against + 1."""


class LanceLakeCommitter(LakeCommitter):
    def __init__(self, catalog: LanceLakeCatalog, table_info: TableInfo) -> None:
        self._catalog = catalog
        self._info = table_info

    # -- reading ------------------------------------------------------------------------------

    def _versions_newest_first(self, dataset: lance.LanceDataset) -> Iterator[tuple[int, dict[str, str]]]:
        """(version, transaction properties) from the latest version back to the first kept one."""
        for version in range(dataset.version, 0, -1):
            try:
                transaction = dataset.read_transaction(version)
            except (ValueError, OSError):
                return  # cleaned up: nothing older is kept either
            if transaction is None:
                continue
            yield version, {str(k): str(v) for k, v in (transaction.transaction_properties or {}).items()}

    def _latest_tiering(self, dataset: lance.LanceDataset) -> LakeSnapshotInfo | None:
        for version, properties in self._versions_newest_first(dataset):
            if is_tiering_snapshot(properties):
                stamp = next((v["timestamp"] for v in dataset.versions() if v["version"] == version), None)
                millis = int(stamp.timestamp() * 1000) if isinstance(stamp, datetime) else 0
                return tiering_snapshot_info(version, properties, millis)
        return None

    def latest_snapshot(self) -> LakeSnapshotInfo | None:
        return self._latest_tiering(self._catalog.open(self._info.table_path))

    # -- committing -----------------------------------------------------------------------------

    def commit(
        self,
        results: Sequence[WriteResult],
        bucket_offsets: Mapping[BucketKey, int],
        properties: Mapping[str, str] | None = None,
        *,
        partition_names: Mapping[int, str] | None = None,
    ) -> int:
        lance_results, offsets = checked_round(
            results, bucket_offsets, LanceWriteResult, "a Lance", self._info
        )
        round_id = commit_id((name for r in lance_results for name in r.file_names), offsets)
        names = qualified_partition_names(self._info, lance_results, partition_names)
        fragments = [fragment for r in lance_results for fragment in r.fragments]
        for attempt in range(COMMIT_ATTEMPTS):
            dataset = self._catalog.open(self._info.table_path)
            done = self._committed_version(dataset, round_id)
            if done is not None:
                return done
            previous = self._latest_tiering(dataset)
            check_offsets_ahead(self._info.table_path, previous, offsets, lance_results)
            summary = tiering_summary(previous, offsets, names, properties, round_id)
            committed = self._append_as_next(dataset, fragments, summary)
            if committed is not None:
                return committed
            time.sleep(0.05 * (attempt + 1))  # another commit took the version: look again
        raise LakeCommitConflictError(
            f"Could not commit a tiering round of {self._info.table_path}: other commits kept taking the "
            f"next version ({COMMIT_ATTEMPTS} attempts)."
        )

    def _append_as_next(
        self, dataset: lance.LanceDataset, fragments: list[Any], properties: dict[str, str]
    ) -> int | None:
        """Append `fragments` as the version after `dataset`'s; None when another commit took it."""
        transaction = lance.Transaction(
            read_version=dataset.version,
            operation=lance.LanceOperation.Append(fragments),
            transaction_properties=properties,
        )
        refused: list[int] = []
        try:
            with self._local_lock():
                committed = lance.LanceDataset.commit(
                    self._catalog.uri(self._info.table_path),
                    transaction,
                    commit_lock=self._next_version_only(dataset.version + 1, refused),
                    storage_options=self._catalog.warehouse.storage_options or None,
                    max_retries=0,
                )
        except OSError:
            if not refused:
                raise
            return None
        return int(committed.version)

    def _committed_version(self, dataset: lance.LanceDataset, round_id: str) -> int | None:
        """The version that already holds this round: looked for down to the latest tiering version."""
        for version, properties in self._versions_newest_first(dataset):
            if properties.get(COMMIT_ID_PROPERTY) == round_id:
                return version
            if is_tiering_snapshot(properties):
                return None
        return None

    @staticmethod
    def _next_version_only(expected: int, refused: list[int]):  # type: ignore[no-untyped-def]
        @contextlib.contextmanager
        def lock(version: int) -> Iterator[None]:
            if version != expected:
                refused.append(version)
                raise _NotNextVersion(f"version {version} is not the next version {expected}")
            yield

        return lock

    @contextlib.contextmanager
    def _local_lock(self) -> Iterator[None]:
        """Serialise the committers of a local dataset (Lance's commit lock needs mutual exclusion)."""
        if not self._catalog.warehouse.is_local:
            yield
            return
        path = os.path.join(self._catalog.uri(self._info.table_path), COMMIT_LOCK_FILE)
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- maintenance ----------------------------------------------------------------------------

    def compact(self, bucket: int, partition_name: str | None = None) -> int | None:
        """Merge the dataset's small fragments (Lance has no buckets or partitions: all of them).

        Lance's compaction commit cannot carry properties, so an empty append right after it carries
        the latest tiering offsets: union reads, which pin the latest tiering version, then read the
        compacted files. A second call in the same round finds nothing to merge and returns None.
        """
        dataset = self._catalog.open(self._info.table_path)
        previous = self._latest_tiering(dataset)
        if previous is None:
            return None
        with self._local_lock():
            metrics = dataset.optimize.compact_files()
        if not metrics.fragments_removed:
            return None
        carried = {k: previous.properties[k] for k in (COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY)}
        for _ in range(COMMIT_ATTEMPTS):
            committed = self._append_as_next(self._catalog.open(self._info.table_path), [], carried)
            if committed is not None:
                return committed
        raise LakeCommitConflictError(
            f"Could not record the tiering offsets after compacting {self._info.table_path}: other commits "
            f"kept taking the next version ({COMMIT_ATTEMPTS} attempts)."
        )

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        """Remove versions older than `older_than` (default: two weeks ago, Lance's default) and the
        files only they reference; how many were removed.

        Kept whatever their age: the latest tiering version (restarts resume from its offsets, union
        reads pin it) and every version after it, the newest `retain_last` versions, tagged versions.
        Files of a round still being written are no version's, and Lance keeps them (it deletes
        unreferenced files only when asked to, and then only week-old ones)."""
        if retain_last < 1:
            raise ValueError("retain_last must be at least 1")
        dataset = self._catalog.open(self._info.table_path)
        latest = self._latest_tiering(dataset)
        if latest is None:
            return 0
        versions = sorted(
            (int(v["version"]), v["timestamp"])
            for v in dataset.versions()
            if isinstance(v["timestamp"], datetime)
        )
        protected = {version for version, _ in versions[-retain_last:]}
        protected.update(version for version, _ in versions if version >= latest.snapshot_id)
        protected.update(int(t["version"]) for t in dataset.tags.list().values())
        expired = [
            version
            for version, stamp in versions
            if version not in protected and _before(stamp, older_than, DEFAULT_VERSION_MAX_AGE)
        ]
        if not expired:
            return 0
        with self._local_lock():
            dataset.cleanup_old_versions(versions=expired, error_if_tagged_old_versions=False)
        return len(expired)

    def abort(self, results: Sequence[WriteResult]) -> None:
        lance_results = checked_results(results, LanceWriteResult, "a Lance", self._info)
        names = {name for r in lance_results for name in r.file_names}
        if not names:
            return
        dataset = self._catalog.open(self._info.table_path)
        committed = {f.path for fragment in dataset.get_fragments() for f in fragment.metadata.files}
        delete_data_files(self._catalog, self._info.table_path, sorted(names - committed))


def _before(stamp: datetime, older_than: datetime | None, default_age: timedelta) -> bool:
    """Whether a version's timestamp is before the cutoff. Lance stamps versions with naive local
    times, so an aware cutoff is compared in local time."""
    if older_than is None:
        older_than = datetime.now(stamp.tzinfo) - default_age
    if stamp.tzinfo is None and older_than.tzinfo is not None:
        older_than = older_than.astimezone().replace(tzinfo=None)
    elif stamp.tzinfo is not None and older_than.tzinfo is None:
        older_than = older_than.astimezone()
    return stamp < older_than
