"""Committing files to an Iceberg table, including merge-on-read position deletes.

pyiceberg (0.12) writes every added file into a *data* manifest and only knows copy-on-write
deletes. A position-delete file in a data manifest is not spec-valid (DuckDB and Java read it as
data), so this module has its own snapshot producer that:

* writes added data files into a data manifest and added position-delete files into a manifest
  whose content is ``deletes`` (the reference's ``s3b`` approach),
* removes files (compaction) by rewriting the manifests that hold them, merged into one manifest
  per partition spec and content type, with each removed entry marked DELETED,
* refuses pyiceberg's automatic retry on a concurrent commit: the committer re-checks offsets and
  referenced files itself, which is what keeps tiering exactly-once.

PIN: this is the only module that uses pyiceberg's private API (``_SnapshotProducer`` and its
hooks, ``ManifestWriterV2``, ``Transaction._table``). It is written against pyiceberg==0.12.0 as
installed here; re-check it (tests/lake) whenever pyiceberg is upgraded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

__all__ = ["ConcurrentCommitError", "commit_files"]


class ConcurrentCommitError(ValidationException):
    """Another commit landed first; pyiceberg must not replay ours on top of it."""


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest writer for position-delete files (content = deletes)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _FilesProducer(_SnapshotProducer["_FilesProducer"]):
    """Adds data and position-delete files and removes files, in one snapshot."""

    def __init__(self, *args: Any, removed_paths: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._removed_paths = removed_paths
        self._rewritten: list[ManifestFile] | None = None

    # -- manifests --------------------------------------------------------------------------

    def _writer(self, spec: PartitionSpec, content: ManifestContent) -> ManifestWriter:
        if content == ManifestContent.DELETES:
            return _DeleteManifestWriter(
                spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
            )
        return self.new_manifest_writer(spec)

    def _added_manifests(self) -> list[ManifestFile]:
        manifests: list[ManifestFile] = []
        spec = self._transaction.table_metadata.spec()
        for content, wanted in (
            (ManifestContent.DATA, lambda f: f.content == DataFileContent.DATA),
            (ManifestContent.DELETES, lambda f: f.content != DataFileContent.DATA),
        ):
            files = [f for f in self._added_data_files if wanted(f)]
            if not files:
                continue
            with self._writer(spec, content) as writer:
                for data_file in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        """The parent's manifests, those holding removed files merged into one new manifest per
        partition spec and content: its entries stay EXISTING (with their snapshot id and sequence
        numbers) and the removed ones are marked DELETED. Merging keeps the manifest count of a
        compacted table small (each round adds one; compaction would otherwise rewrite them one by
        one, and every scan plan reads them all)."""
        if self._rewritten is not None:
            return self._rewritten
        result: list[ManifestFile] = []
        removed: list[DataFile] = []
        # (partition spec id, content) -> entries of the manifests to rewrite
        rewrite: dict[tuple[int, ManifestContent], list[ManifestEntry]] = {}
        parent = self._parent_snapshot_id
        snapshot = self._transaction.table_metadata.snapshot_by_id(parent) if parent is not None else None
        for manifest in snapshot.manifests(self._io) if snapshot is not None else []:
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # only DELETED entries left: nothing live to carry over
            if not self._removed_paths:
                result.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            if not any(e.data_file.file_path in self._removed_paths for e in entries):
                result.append(manifest)
                continue
            rewrite.setdefault((manifest.partition_spec_id, manifest.content), []).extend(entries)
        specs = self._transaction.table_metadata.specs() if rewrite else {}
        for (spec_id, content), entries in rewrite.items():
            with self._writer(specs[spec_id], content) as writer:
                for entry in entries:
                    gone = entry.data_file.file_path in self._removed_paths
                    if gone:
                        removed.append(entry.data_file)
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.DELETED if gone else ManifestEntryStatus.EXISTING,
                            snapshot_id=self._snapshot_id if gone else entry.snapshot_id,
                            sequence_number=entry.sequence_number,
                            file_sequence_number=entry.file_sequence_number,
                            data_file=entry.data_file,
                        )
                    )
            result.append(writer.to_manifest_file())
        missing = self._removed_paths - {f.file_path for f in removed}
        if missing:
            raise ConcurrentCommitError(f"Files to remove are not live any more: {sorted(missing)}")
        # The summary counts removed files from this set.
        self._deleted_data_files = set(removed)
        self._rewritten = result
        return result

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # removed entries are written into the rewritten manifests

    def _manifests(self) -> list[ManifestFile]:
        existing = self._existing_manifests()
        return self._added_manifests() + existing

    def _summary(self, snapshot_properties: Mapping[str, str] = EMPTY_DICT) -> Any:
        self._existing_manifests()  # fills _deleted_data_files before counting
        return super()._summary(dict(snapshot_properties))

    # -- concurrency --------------------------------------------------------------------------

    def _validate_concurrency(self) -> None:
        """Checked by the committer before it commits."""

    def _refresh_for_retry(self) -> None:
        raise ConcurrentCommitError("The table changed while committing; the commit was not retried.")


def commit_files(
    table: Table,
    added: Iterable[DataFile],
    removed: Iterable[DataFile] = (),
    properties: Mapping[str, str] | None = None,
) -> int:
    """Commit added data/position-delete files and removed files as one snapshot of `table` (based
    on the metadata `table` holds); returns the new snapshot id. Raises CommitFailedException or
    ValidationException (nothing committed) when the table moved on in between."""
    added = list(added)
    removed_paths = {f.file_path for f in removed}
    only_data = all(f.content == DataFileContent.DATA for f in added) and not removed_paths
    operation = Operation.APPEND if only_data else Operation.OVERWRITE
    with table.transaction() as tx:
        producer = _FilesProducer(
            operation=operation,
            transaction=tx,
            io=tx._table.io,
            snapshot_properties=dict(properties or {}),
            removed_paths=removed_paths,
        )
        for data_file in added:
            producer.append_data_file(data_file)
        snapshot_id = producer.snapshot_id
        producer.commit()
    return snapshot_id
