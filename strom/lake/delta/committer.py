"""The Delta lake committer: one tiering round -> one Delta table version carrying Fluss offsets.

A round's files are added by one ``WRITE`` (append) commit whose commitInfo carries, as custom
metadata, ``commit-user=__fluss_lake_tiering``, ``fluss-offsets`` and ``strom-commit-id``. Exactly
once rests on the format-independent checks of `strom.lake.commit_checks` made against the latest
tiering version, and on the commit landing as the very next version: it is made with no commit
retries, so if another writer took that version delta-rs fails it and the committer looks again (the
round is then found committed, or refused as stale).

Primary-key tables: the round is one MERGE of the splits' staged changes (each key's last change)
into the table, matched on the primary key: a key whose last change removes it is deleted, any other
is updated or inserted with its new row (system columns included). The MERGE commit carries the same
metadata; the staged files are deleted once it landed (or when the round is aborted).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from strom.common.file_io import load_file_io
from strom.common.partition import parse_partition_name
from strom.common.table_descriptor import TableInfo
from strom.lake.commit_checks import (
    COMMIT_ATTEMPTS,
    COMMIT_ID_PROPERTY,
    check_offsets_ahead,
    checked_results,
    checked_round,
    commit_id,
)
from strom.lake.delta.catalog import STAGED_DELETE_COLUMN, DeltaLakeCatalog
from strom.lake.delta.writer import DeltaFile, DeltaWriteResult
from strom.lake.errors import LakeCommitConflictError
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY, is_tiering_snapshot
from strom.lake.snapshot_summary import qualified_partition_names, tiering_snapshot_info, tiering_summary
from strom.lake.warehouse import delete_files

__all__ = ["DeltaLakeCommitter"]

# History entries read at once while looking for the latest tiering commit.
_HISTORY_PAGE = 50

# Delta's table property for how long removed files stay readable, and its default (Delta's own).
FILE_RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
DEFAULT_FILE_RETENTION = timedelta(weeks=1)
_INTERVAL_UNITS = {
    "millisecond": timedelta(milliseconds=1),
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}


def parse_interval(text: str) -> timedelta:
    """A Delta interval property value (`interval 1 week`, `interval 36 hours`)."""
    match = re.fullmatch(r"\s*(?:interval\s+)?(\d+)\s+([a-z]+?)s?\s*", text.lower())
    if match is None or match.group(2) not in _INTERVAL_UNITS:
        raise ValueError(f"Cannot read the Delta interval '{text}' (expected e.g. 'interval 7 days').")
    return int(match.group(1)) * _INTERVAL_UNITS[match.group(2)]


def _properties(entry: Mapping[str, Any]) -> dict[str, str]:
    """A commitInfo's custom metadata (delta-rs puts it next to the standard fields)."""
    return {str(k): str(v) for k, v in entry.items() if isinstance(v, str)}


class DeltaLakeCommitter(LakeCommitter):
    def __init__(self, catalog: DeltaLakeCatalog, table_info: TableInfo) -> None:
        self._catalog = catalog
        self._info = table_info

    # -- reading ------------------------------------------------------------------------------

    def _history(self, table: DeltaTable) -> Iterator[tuple[int, int, dict[str, str]]]:
        """(version, timestamp ms, properties) from the latest commit back to the first kept one."""
        entries = table.history(_HISTORY_PAGE)
        if len(entries) >= _HISTORY_PAGE:
            entries = table.history()
        for entry in entries:
            yield int(entry["version"]), int(entry.get("timestamp", 0)), _properties(entry)

    def _latest_tiering(self, table: DeltaTable) -> LakeSnapshotInfo | None:
        for version, millis, properties in self._history(table):
            if is_tiering_snapshot(properties):
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
        delta_results, offsets = checked_round(
            results, bucket_offsets, DeltaWriteResult, "a Delta", self._info
        )
        round_id = commit_id((name for r in delta_results for name in r.file_names), offsets)
        names = qualified_partition_names(self._info, delta_results, partition_names)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=f.path,
                size=f.size,
                partition_values=dict(f.partition_values),
                modification_time=f.modification_time,
                data_change=True,
                stats=f.stats,
            )
            for r in delta_results
            for f in r.files
        ]
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._catalog.open(self._info.table_path)
            done = self._committed_version(table, round_id)
            if done is not None:
                return done
            previous = self._latest_tiering(table)
            check_offsets_ahead(self._info.table_path, previous, offsets, delta_results)
            summary = tiering_summary(previous, offsets, names, properties, round_id)
            version = table.version()
            commit_properties = CommitProperties(custom_metadata=summary, max_commit_retries=0)
            staged = [r.staged for r in delta_results if r.staged is not None]
            try:
                if staged:
                    self._merge(table, staged, commit_properties)
                else:
                    table.create_write_transaction(
                        actions,
                        mode="append",
                        schema=pa.schema(table.schema().to_arrow()),
                        partition_by=list(self._info.partition_keys) or None,
                        commit_properties=commit_properties,
                    )
            except CommitFailedError:
                time.sleep(0.05 * (attempt + 1))  # another commit took the version: look again
                continue
            delete_files([f.uri for f in staged], self._catalog.warehouse.storage_options)
            return version + 1
        raise LakeCommitConflictError(
            f"Could not commit a tiering round of {self._info.table_path}: other commits kept taking the "
            f"next version ({COMMIT_ATTEMPTS} attempts)."
        )

    def _merge(self, table: DeltaTable, staged: list[DeltaFile], properties: CommitProperties) -> None:
        """One MERGE of the staged changes by the primary key (no two splits share a key)."""
        target = pa.schema(table.schema().to_arrow())
        options = self._catalog.warehouse.storage_options
        parts = []
        for f in staged:
            fs, path = load_file_io(f.uri, options).parts()
            parts.append(pq.read_table(path, filesystem=fs))
        changes = pa.concat_tables(parts)
        columns = {name: f"s.`{name}`" for name in target.names}
        match = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self._info.primary_key)
        removes = f"s.`{STAGED_DELETE_COLUMN}`"
        (
            table.merge(
                changes,
                match,
                source_alias="s",
                target_alias="t",
                commit_properties=properties,
            )
            .when_matched_delete(predicate=removes)
            .when_matched_update(columns, predicate=f"NOT {removes}")
            .when_not_matched_insert(columns, predicate=f"NOT {removes}")
            .execute()
        )

    def _committed_version(self, table: DeltaTable, round_id: str) -> int | None:
        """The version that already holds this round: looked for down to the latest tiering version."""
        for version, _, properties in self._history(table):
            if properties.get(COMMIT_ID_PROPERTY) == round_id:
                return version
            if is_tiering_snapshot(properties):
                return None
        return None

    # -- maintenance ----------------------------------------------------------------------------

    def compact(self, bucket: int, partition_name: str | None = None) -> int | None:
        """Merge the small files of one partition (Delta has no buckets: all of the partition's).

        The OPTIMIZE commit carries the latest tiering offsets, so union reads, which pin the latest
        tiering version, read the compacted files. None when there was nothing to merge.
        """
        table = self._catalog.open(self._info.table_path)
        previous = self._latest_tiering(table)
        if previous is None:
            return None
        keys = list(self._info.partition_keys)
        filters = None
        if keys and partition_name is not None:
            spec = parse_partition_name(keys, partition_name)
            filters = [(k, "=", spec[k]) for k in keys]
        carried = {k: previous.properties[k] for k in (COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY)}
        before = table.version()
        metrics = table.optimize.compact(
            partition_filters=filters,
            commit_properties=CommitProperties(custom_metadata=carried, max_commit_retries=0),
        )
        if not metrics.get("numFilesRemoved") or table.version() == before:
            return None
        return int(table.version())

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        """Make versions older than `older_than` unreadable: a "lite" VACUUM deletes the files the log
        removed before the cutoff (no version after it references them), and log entries past
        `delta.logRetentionDuration` go at the next checkpoint. The default cutoff is the table's
        `delta.deletedFileRetentionDuration` (a week by default, as in Delta). How many files were
        deleted.

        Kept whatever their age: the latest tiering version (restarts resume from its offsets, union
        reads pin it) and the newest `retain_last` versions. Files of a round still being written are
        in no log, and a lite VACUUM never deletes such files. Its commits carry the latest tiering
        offsets, as compaction's do."""
        if retain_last < 1:
            raise ValueError("retain_last must be at least 1")
        table = self._catalog.open(self._info.table_path)
        latest = self._latest_tiering(table)
        if latest is None:
            return 0
        now_ms = time.time() * 1000
        if older_than is None:
            configured = table.metadata().configuration.get(FILE_RETENTION_PROPERTY)
            age = parse_interval(configured) if configured else DEFAULT_FILE_RETENTION
            cutoff_ms = now_ms - age.total_seconds() * 1000
        else:
            cutoff_ms = older_than.timestamp() * 1000
        # VACUUM counts whole hours: rounded up, so it never deletes a file removed after the cutoff
        retention_hours = max(0, math.ceil((now_ms - cutoff_ms) / 3_600_000))
        newest = [version for version, _, _ in self._history(table)][:retain_last]
        carried = {k: latest.properties[k] for k in (COMMIT_USER_PROPERTY, FLUSS_OFFSETS_PROPERTY)}
        removed = table.vacuum(
            retention_hours=retention_hours,
            dry_run=False,
            enforce_retention_duration=False,
            keep_versions=sorted({latest.snapshot_id, *newest}),
            full=False,
            commit_properties=CommitProperties(custom_metadata=carried, max_commit_retries=0),
        )
        table = self._catalog.open(self._info.table_path)
        now_latest = self._latest_tiering(table)
        if now_latest is not None and now_latest.snapshot_id == table.version():
            # log entries before the last checkpoint and past delta.logRetentionDuration; the latest
            # (tiering) version's own entry is never before a checkpoint, so its offsets stay
            table.cleanup_metadata()
        return len(removed)

    def abort(self, results: Sequence[WriteResult]) -> None:
        delta_results = checked_results(results, DeltaWriteResult, "a Delta", self._info)
        files = [f for r in delta_results for f in r.files]
        if not files:
            return
        table = self._catalog.open(self._info.table_path)
        committed = set(table.get_add_actions(flatten=True).column("path").to_pylist())
        delete_files(
            [f.uri for f in files if f.path not in committed], self._catalog.warehouse.storage_options
        )
