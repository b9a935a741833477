"""The lake plug-in interface: what the tiering service needs from a lake format.

A tiering round for one table runs like this (Fluss's LakeStorage / LakeWriter / LakeCommitter):

1. The driver asks the committer for `LakeCommitter.latest_snapshot()` and resumes every bucket from
   the end offset recorded there (nothing there: from the start of the log).
2. Each split (one bucket, or one bucket of one partition, from a start to a stop offset) runs on an
   executor: ``LakeStorage.writer(table_info, bucket, partition)`` is fed Arrow batches with
   `LakeWriter.write` and finished with `LakeWriter.complete`, which returns a picklable
   `WriteResult` naming the files it wrote. Nothing is visible in the lake yet.
3. The driver hands all results of the round to `LakeCommitter.commit` together with each bucket's
   end offset. That makes exactly one lake snapshot whose properties carry the offsets
   (``fluss-offsets``) and ``commit-user=__fluss_lake_tiering``; only then does the service tell the
   coordinator. A commit whose offsets are not ahead of the latest snapshot's is refused, so a
   restarted or duplicated job can never commit the same records twice.
4. A round that fails before its commit calls `LakeCommitter.abort` to delete the files it wrote.

Formats plug in through `strom.lake.registry`; the service only ever sees these classes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, Self, TypeAlias

import numpy as np
import pyarrow as pa

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath

__all__ = [
    "TABLE_DATALAKE_AUTO_MAINTENANCE",
    "BucketKey",
    "ChangeTypes",
    "LakeCatalog",
    "LakeCommitter",
    "LakeSnapshotInfo",
    "LakeStorage",
    "LakeWriter",
    "MaintenancePlan",
    "RowValues",
    "WriteResult",
    "maintenance_plan",
    "split_bucket",
]

# (partition id or None, bucket): how bucket offsets are keyed.
BucketKey = tuple[int | None, int]
# Change types as a numpy or Arrow int8 array (see strom.record.change_type), one per row.
ChangeTypes: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray
# Per-row offsets (int64) or commit timestamps (epoch milliseconds, or an Arrow timestamp array).
RowValues: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray | Sequence[int]

# Seed 003's single switch for lake maintenance; when set it overrides the two options Fluss shipped
# (table.datalake.auto-compaction and table.datalake.auto-expire-snapshot).
TABLE_DATALAKE_AUTO_MAINTENANCE = "table.datalake.auto-maintenance"


@dataclass(frozen=True)
class WriteResult:
    """What one split wrote: picklable, travels from an executor to the driver.

    Formats subclass it with the files they wrote; these fields are what the service may read.
    """

    table_bucket: TableBucket
    # Fluss partition name ("2024$eu"), None for non-partitioned tables.
    partition_name: str | None
    # Rows handed to the writer (before folding changes of the same key).
    record_count: int
    # One past the largest offset written, None when the split had no rows.
    end_offset: int | None
    # The first offset written, None when the split had no rows. The committer refuses results
    # that start below the lake's tiered offset of their bucket: those rows are already there.
    start_offset: int | None = None

    @property
    def bytes_written(self) -> int:
        """Bytes of the files the split wrote (formats that know them say so)."""
        return 0

    @property
    def bucket_key(self) -> BucketKey:
        return (self.table_bucket.partition_id, self.table_bucket.bucket)


@dataclass(frozen=True)
class LakeSnapshotInfo:
    """A lake snapshot made by tiering and the Fluss offsets it covers."""

    snapshot_id: int
    # End offset (next offset to tier) of every bucket tiered so far, cumulative over rounds.
    bucket_offsets: dict[BucketKey, int]
    # Partition id -> qualified partition name ("dt=2025/region=eu") as stored in the snapshot.
    partition_names: dict[int, str]
    # The snapshot's summary properties (including commit-user and fluss-offsets).
    properties: dict[str, str]
    timestamp_ms: int


@dataclass(frozen=True)
class MaintenancePlan:
    """Which maintenance the tiering service runs for a table after a commit."""

    compact: bool = False
    expire_snapshots: bool = False


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() == "true"


def maintenance_plan(table_info: TableInfo) -> MaintenancePlan:
    """The table's maintenance options: ``table.datalake.auto-maintenance`` (from Fluss's Iceberg
    design document) when set, else Fluss's ``table.datalake.auto-compaction`` /
    ``table.datalake.auto-expire-snapshot``."""
    props = table_info.descriptor.properties
    both = _flag(props.get(TABLE_DATALAKE_AUTO_MAINTENANCE))
    if both is not None:
        return MaintenancePlan(compact=both, expire_snapshots=both)
    return MaintenancePlan(
        compact=bool(_flag(props.get("table.datalake.auto-compaction"))),
        expire_snapshots=bool(_flag(props.get("table.datalake.auto-expire-snapshot"))),
    )


class LakeCatalog(ABC):
    """Creates and drops the lake tables that mirror Fluss tables."""

    @abstractmethod
    def create_table(self, table_info: TableInfo, *, creating_fluss_table: bool = True) -> None:
        """Create the lake table for `table_info` (its namespace too, when missing).

        Idempotent: an existing lake table with the same layout is accepted. One with another
        layout raises LakeTableAlreadyExistError, and so does a non-empty one while
        `creating_fluss_table` (a new Fluss table must not inherit someone else's lake data).
        A table the format cannot represent raises InvalidTableError.
        """

    @abstractmethod
    def drop_table(self, table_path: TablePath, *, purge: bool = False) -> bool:
        """Drop the lake table (its files too when `purge`); False when it did not exist."""

    @abstractmethod
    def table_exists(self, table_path: TablePath) -> bool: ...

    @abstractmethod
    def evolve_table(self, table_info: TableInfo) -> list[str]:
        """Add the Fluss columns the lake table lacks (AlterTable added them), before the system
        columns, keeping the ids of the columns it has; returns the names added."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release catalog resources."""


class LakeWriter(ABC):
    """Writes the records of one split (one bucket) into lake files; runs on an executor."""

    @abstractmethod
    def write(
        self,
        batch: pa.RecordBatch | pa.Table,
        change_types: ChangeTypes | None,
        offsets: RowValues,
        timestamps: RowValues,
    ) -> None:
        """Add rows: the table's columns (by name), each row's change type (None for log tables),
        its log offset and its commit timestamp. Rows arrive in offset order."""

    @abstractmethod
    def complete(self) -> WriteResult:
        """Finish the files and describe them; the writer cannot be used afterwards."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; files of a writer that never completed are deleted."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LakeCommitter(ABC):
    """Turns the write results of a round into one lake snapshot; runs on the driver."""

    @abstractmethod
    def commit(
        self,
        results: Sequence[WriteResult],
        bucket_offsets: Mapping[BucketKey, int],
        properties: Mapping[str, str] | None = None,
        *,
        partition_names: Mapping[int, str] | None = None,
    ) -> int:
        """Commit `results` as one snapshot carrying `bucket_offsets` (end offset per bucket of the
        round) merged over the previous snapshot's; returns the snapshot id.

        `properties` are added to the snapshot summary. `partition_names` maps partition ids to
        Fluss partition names for buckets without a result. Committing the same results again
        returns the snapshot that already holds them; offsets that are not ahead of the latest
        snapshot's raise StaleLakeCommitError; a concurrent change that invalidates the results
        raises LakeCommitConflictError. Nothing is committed in either case.
        """

    @abstractmethod
    def latest_snapshot(self) -> LakeSnapshotInfo | None:
        """The newest snapshot that carries tiering offsets (None before the first round)."""

    @abstractmethod
    def abort(self, results: Sequence[WriteResult]) -> None:
        """Delete the files of results that were never committed."""

    def compact(self, bucket: int, partition_name: str | None = None) -> int | None:
        """Rewrite the small files of one bucket into one; the new snapshot id or None if nothing
        was done. Only between rounds: never while writers of the table are running."""
        return None

    def compact_buckets(self, buckets: Sequence[tuple[int, str | None]]) -> list[int]:
        """`compact` for each (bucket, partition name) of a round; the snapshot ids made. Formats that
        can rewrite several buckets in one snapshot override this (Iceberg)."""
        made = [self.compact(bucket, partition) for bucket, partition in dict.fromkeys(buckets)]
        return [snapshot for snapshot in made if snapshot is not None]

    def expire_snapshots(self, older_than: datetime | None = None, retain_last: int = 1) -> int:
        """Expire old snapshots and delete files nothing references any more; how many expired."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class LakeStorage(ABC):
    """A lake format with its catalog settings: the factory for catalogs, writers and committers.

    Built from the cluster's ``datalake.<format>.*`` options with the prefix stripped. It must be
    picklable (it travels to executors), so only the properties are pickled; connections and
    caches are rebuilt where it lands.
    """

    format: ClassVar[str]

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        self.properties: dict[str, str] = {str(k): str(v) for k, v in (properties or {}).items()}

    @abstractmethod
    def catalog(self) -> LakeCatalog: ...

    @abstractmethod
    def writer(
        self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
    ) -> LakeWriter:
        """A writer for one split; `partition` is the Fluss partition name ("2024$eu")."""

    @abstractmethod
    def committer(self, table_info: TableInfo) -> LakeCommitter: ...

    def __getstate__(self) -> dict[str, Any]:
        return {"properties": dict(self.properties)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["properties"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({sorted(self.properties)})"


def split_bucket(table_info: TableInfo, bucket: TableBucket | int, partition: str | None) -> TableBucket:
    """`bucket` as a TableBucket; a bare bucket number only works for non-partitioned tables."""
    if isinstance(bucket, TableBucket):
        if bucket.table_id != table_info.table_id:
            raise ValueError(f"bucket {bucket} does not belong to table id {table_info.table_id}")
        if (bucket.partition_id is None) != (partition is None):
            raise ValueError(f"bucket {bucket} and partition {partition!r} do not go together")
        return bucket
    if partition is not None or table_info.is_partitioned:
        raise ValueError("a partitioned table needs a TableBucket with the partition id")
    return TableBucket(table_info.table_id, None, int(bucket))
