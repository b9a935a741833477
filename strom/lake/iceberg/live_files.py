"""The live files of one Iceberg partition (one Fluss bucket) and the rows they still hold.

Merge-on-read needs to know where each current row of a key lives (data file + position) so that
an update or delete can be written as a position delete. That is computed from the snapshot: the
partition's data files, minus the positions that the partition's position-delete files remove.
A delete file applies to a data file when the delete's data sequence number is not lower than the
data file's (the spec's rule, which also covers deletes committed together with their data).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IcebergType, PrimitiveType

from strom.common.errors import StorageError

__all__ = ["FILE_COLUMN", "POS_COLUMN", "LiveDataFile", "PartitionFiles", "load_partition_files"]

# Columns added to rows read with their location.
FILE_COLUMN = "__file"
POS_COLUMN = "__pos"


@dataclass
class LiveDataFile:
    data_file: DataFile
    sequence_number: int
    # Sorted positions removed by position deletes.
    deleted: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @property
    def path(self) -> str:
        return self.data_file.file_path

    @property
    def live_count(self) -> int:
        return int(self.data_file.record_count) - len(self.deleted)


@dataclass
class PartitionFiles:
    """One partition's files as of one snapshot."""

    snapshot_id: int | None
    partition: tuple[Any, ...]
    data_files: list[LiveDataFile]
    # Position-delete files of the partition with their data sequence numbers.
    delete_files: list[tuple[DataFile, int]]

    @property
    def paths(self) -> set[str]:
        return {f.path for f in self.data_files}

    def read(
        self, table: Table, files: Sequence[LiveDataFile] | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The live rows of `files` (default: all), with their file path and position appended."""
        parts: list[pa.Table] = []
        for live in self.data_files if files is None else files:
            with table.io.new_input(live.path).open() as stream:
                rows = pq.read_table(stream, columns=list(columns) if columns is not None else None)
            positions = np.arange(rows.num_rows, dtype=np.int64)
            keep = None
            if len(live.deleted):
                keep = ~np.isin(positions, live.deleted, assume_unique=True)
                rows = rows.filter(pa.array(keep))
                positions = positions[keep]
            rows = rows.append_column(FILE_COLUMN, pa.array([live.path] * rows.num_rows, pa.string()))
            rows = rows.append_column(POS_COLUMN, pa.array(positions, pa.int64()))
            parts.append(rows)
        if not parts:
            return pa.table({})
        return pa.concat_tables(parts, promote_options="permissive")


def _partition_of(data_file: DataFile) -> tuple[Any, ...]:
    record = data_file.partition
    return tuple(record[i] for i in range(len(record)))


def _may_contain(manifest: ManifestFile, partition: tuple[Any, ...], types: Sequence[IcebergType]) -> bool:
    """Whether the manifest's partition summaries allow `partition` (skips most manifests)."""
    summaries = manifest.partitions or []
    if len(summaries) != len(partition):
        return True
    for summary, value, iceberg_type in zip(summaries, partition, types, strict=True):
        if value is None:
            if summary.contains_null is False:
                return False
            continue
        if summary.lower_bound is None or summary.upper_bound is None:
            if summary.lower_bound is None and summary.upper_bound is None and summary.contains_null:
                return False  # only nulls in this field
            continue
        if not isinstance(iceberg_type, PrimitiveType):
            continue  # partition fields are primitive; bounds of anything else cannot be read
        lower = from_bytes(iceberg_type, summary.lower_bound)
        upper = from_bytes(iceberg_type, summary.upper_bound)
        if isinstance(value, str) and isinstance(lower, str):
            # String bounds may be truncated prefixes; compare conservatively.
            if value < lower:
                return False
            if value > upper and not value.startswith(upper):
                return False
        elif not (lower <= value <= upper):
            return False
    return True


def load_partition_files(
    table: Table, partition: tuple[Any, ...], snapshot: Snapshot | None = None
) -> PartitionFiles:
    """The live data files of `partition` (in the current spec) and the positions deleted from them."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if snapshot is None:
        return PartitionFiles(None, partition, [], [])
    spec = table.spec()
    types = [f.field_type for f in spec.partition_type(table.schema()).fields]
    data: dict[str, LiveDataFile] = {}
    deletes: list[tuple[DataFile, int]] = []
    for manifest in snapshot.manifests(table.io):
        if manifest.partition_spec_id != spec.spec_id or not _may_contain(manifest, partition, types):
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            if _partition_of(data_file) != partition:
                continue
            seq = entry.sequence_number or 0
            if data_file.content == DataFileContent.DATA:
                data[data_file.file_path] = LiveDataFile(data_file, seq)
            elif data_file.content == DataFileContent.POSITION_DELETES:
                deletes.append((data_file, seq))
            else:
                raise StorageError(
                    f"{table.name()} has equality delete file {data_file.file_path}; Strom only reads "
                    "position deletes (the kind it writes)."
                )
    _apply_deletes(table, data, deletes)
    return PartitionFiles(snapshot.snapshot_id, partition, list(data.values()), deletes)


def _apply_deletes(
    table: Table, data: dict[str, LiveDataFile], deletes: Iterable[tuple[DataFile, int]]
) -> None:
    removed: dict[str, list[np.ndarray]] = defaultdict(list)
    paths = pa.array(list(data), pa.string())
    for delete_file, delete_seq in deletes:
        with table.io.new_input(delete_file.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["file_path", "pos"])
        rows = rows.filter(pc.is_in(rows.column("file_path"), value_set=paths))
        if rows.num_rows == 0:
            continue
        for (path,), group in _group_positions(rows):
            if data[path].sequence_number <= delete_seq:
                removed[path].append(group)
    for path, groups in removed.items():
        data[path].deleted = np.unique(np.concatenate(groups))


def _group_positions(rows: pa.Table) -> Iterable[tuple[tuple[str], np.ndarray]]:
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    file_paths = rows.column("file_path").to_numpy(zero_copy_only=False)
    positions = rows.column("pos").to_numpy()
    boundaries = np.flatnonzero(file_paths[1:] != file_paths[:-1]) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(file_paths)]))
    for start, end in zip(starts, ends, strict=True):
        yield (str(file_paths[start]),), positions[start:end].astype(np.int64)
