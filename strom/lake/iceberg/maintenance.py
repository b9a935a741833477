"""Lake maintenance for tiered Iceberg tables (``table.datalake.auto-maintenance``, an
option of Fluss's Iceberg design document).

* `compact_buckets` rewrites the small data files of each given bucket's partition into one file
  (all of them in one snapshot; `compact_bucket` for one), with the position deletes applied and
  rows kept in ``__offset`` order, and drops the position-delete files that only pointed into the
  rewritten files. The new snapshot carries the latest tiering
  snapshot's ``commit-user`` and ``fluss-offsets`` (as Fluss does for its rewrite commits), so a
  restarted tiering job still finds its offsets.
* `expire_snapshots` removes old snapshots from the metadata and deletes the manifest lists,
  manifests and data/delete files that no remaining snapshot references.

Both must run between tiering rounds of the table (the service calls them after a commit).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from strom.lake.iceberg.deletes import commit_files
from strom.lake.iceberg.files import DEFAULT_TARGET_FILE_SIZE, DataFileWriter, delete_quietly
from strom.lake.iceberg.live_files import FILE_COLUMN, POS_COLUMN, load_partition_files
from strom.lake.iceberg.schema import OFFSET_COLUMN

__all__ = ["compact_bucket", "compact_buckets", "expire_snapshots"]

DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 60 * 60 * 1000  # history.expire.max-snapshot-age-ms


def compact_bucket(
    table: Table, partition: tuple[Any, ...], properties: Mapping[str, str], min_files: int = 2
) -> int | None:
    """Rewrite the partition's small files into one; the new snapshot id, or None when there is
    nothing worth doing (fewer than `min_files` small files and no deleted rows among them)."""
    return compact_buckets(table, [partition], properties, min_files)


def compact_buckets(
    table: Table, partitions: Sequence[tuple[Any, ...]], properties: Mapping[str, str], min_files: int = 2
) -> int | None:
    """Rewrite the small files of each bucket partition into one file per partition, all in one
    snapshot (one commit, one merge of the manifests, however many buckets the round touched); the
    new snapshot id, or None when no partition had anything worth doing."""
    target = int(table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
    writers: list[DataFileWriter] = []
    added: list[Any] = []
    removed: list[Any] = []
    try:
        for partition in dict.fromkeys(partitions):  # each once, in order
            files = load_partition_files(table, partition)
            small = [f for f in files.data_files if f.data_file.file_size_in_bytes < target]
            if len(small) < min_files and not any(len(f.deleted) for f in small):
                continue
            rows = files.read(table, small)
            rows = rows.drop_columns([FILE_COLUMN, POS_COLUMN]).sort_by([(OFFSET_COLUMN, "ascending")])
            writer = DataFileWriter(table, partition, f"{uuid.uuid4().hex[:12]}-compact")
            writers.append(writer)
            writer.write(rows.cast(writer.schema))
            added.extend(f.to_data_file() for f in writer.close())
            rewritten = {f.path for f in small}
            # Delete files whose every target is rewritten are dead; the others stay (their sequence
            # number is below the new file's, so they never apply to it).
            removed.extend(f.data_file for f in small)
            removed.extend(
                delete_file
                for delete_file, _ in files.delete_files
                if _targets(table, delete_file.file_path) <= rewritten
            )
        if not added:
            return None
        return commit_files(table, added, removed, dict(properties))
    except BaseException:
        for writer in writers:
            writer.discard()
        raise


def _targets(table: Table, delete_path: str) -> set[str]:
    with table.io.new_input(delete_path).open() as stream:
        paths = pq.read_table(stream, columns=["file_path"]).column("file_path")
    return set(pc.unique(paths).to_pylist())


def _snapshot_files(table: Table, snapshots: Iterable[Snapshot], cache: dict[str, list[str]]) -> set[str]:
    """Manifest lists, manifests and live content files of `snapshots`."""
    files: set[str] = set()
    for snapshot in snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            files.add(manifest.manifest_path)
            if manifest.manifest_path not in cache:
                entries = manifest.fetch_manifest_entry(table.io, discard_deleted=True)
                cache[manifest.manifest_path] = [e.data_file.file_path for e in entries]
            files.update(cache[manifest.manifest_path])
    return files


def expire_snapshots(
    table: Table, older_than: datetime | None, retain_last: int, keep: Iterable[int] = ()
) -> int:
    """Expire snapshots older than `older_than` (default: the table's
    ``history.expire.max-snapshot-age-ms``, 5 days) except the newest `retain_last` of the main
    branch, branch/tag heads and `keep`; delete what only they referenced. How many expired."""
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1")
    if older_than is None:
        max_age = int(table.properties.get("history.expire.max-snapshot-age-ms", DEFAULT_MAX_SNAPSHOT_AGE_MS))
        cutoff_ms = int(time.time() * 1000) - max_age
    else:
        cutoff_ms = int(older_than.timestamp() * 1000)
    protected = set(keep) | {ref.snapshot_id for ref in table.metadata.refs.values()}
    snapshot = table.current_snapshot()
    for _ in range(retain_last):
        if snapshot is None:
            break
        protected.add(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    snapshots = table.snapshots()
    expired = [s for s in snapshots if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected]
    if not expired:
        return 0
    expired_ids = {s.snapshot_id for s in expired}
    cache: dict[str, list[str]] = {}
    remaining = _snapshot_files(table, (s for s in snapshots if s.snapshot_id not in expired_ids), cache)
    candidates = _snapshot_files(table, expired, cache)
    table.maintenance.expire_snapshots().by_ids(sorted(expired_ids)).commit()
    for path in sorted(candidates - remaining):
        delete_quietly(table, path)
    return len(expired)
