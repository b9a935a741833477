"""Units of read work and how they are packed into a few Spark partitions.

A `BucketRange` is one bucket's share of a read: an optional KV snapshot (primary-key tables) or
the lake's rows below ``start`` (union reads), followed by the log records in ``[start, end)``.
Spark pays a fixed cost per task (tens of ms on two cores), so ranges are bin-packed into a
handful of `SplitGroup`s instead of one task each.
Each group carries the `ReadSpec` too: ``read()`` runs in an executor and sees nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from strom.common.predicate import Predicate
from strom.common.table_descriptor import TableInfo


@dataclass(frozen=True)
class BucketRange:
    partition_id: int | None
    partition_name: str | None
    bucket: int
    start: int
    end: int
    # Primary-key tables: the KV snapshot to emit before the log range (start is its log offset).
    snapshot_id: int | None = None
    # Union reads: the lake snapshot whose rows of this bucket cover the offsets below start.
    lake_snapshot_id: int | None = None

    @property
    def records(self) -> int:
        return max(0, self.end - self.start)

    @property
    def lake_records(self) -> int:
        """How many offsets of this bucket come from the lake (tiering starts at offset 0)."""
        return self.start if self.lake_snapshot_id is not None else 0

    @property
    def is_empty(self) -> bool:
        return self.snapshot_id is None and self.lake_records == 0 and self.end <= self.start

    def weight(self, snapshot_weight: int) -> int:
        return self.records + self.lake_records + (snapshot_weight if self.snapshot_id is not None else 0)


@dataclass(frozen=True)
class ReadSpec:
    """Everything an executor needs besides the ranges: where, what, and in which shape."""

    bootstrap_servers: str
    client_options: tuple[tuple[str, str], ...]
    table: TableInfo
    # Table columns to fetch (a projection for the server), in output order.
    columns: tuple[str, ...]
    # Primary-key tables: fold the changelog by key into current rows (batch reads).
    merge_by_key: bool
    include_change_type: bool
    include_metadata: bool
    # Log tables only: the server skips batches that cannot match (Spark still checks the rows).
    predicate: Predicate | None
    # Spark's output schema as JSON (StructType.json()), so executors rebuild the exact Arrow schema.
    spark_schema_json: str
    # Union reads: ``datalake.format`` and ``datalake.<format>.*`` of the lake the ranges name.
    lake: tuple[tuple[str, str], ...] = ()


class SplitGroup(InputPartition):
    """One Spark partition: ranges read one after the other by a single task."""

    def __init__(self, spec: ReadSpec, ranges: Sequence[BucketRange]) -> None:
        super().__init__(None)
        self.spec = spec
        self.ranges = tuple(ranges)

    def __repr__(self) -> str:
        return f"SplitGroup({len(self.ranges)} ranges, {sum(r.records for r in self.ranges)} records)"


def bin_pack(
    ranges: Sequence[BucketRange], groups: int, snapshot_weight: int = 10_000
) -> list[list[BucketRange]]:
    """Non-empty ranges spread over at most `groups` lists of similar total weight.

    Largest first into the lightest group (LPT); each group then reads in (partition, bucket) order.
    """
    work = [r for r in ranges if not r.is_empty]
    if not work:
        return []
    count = max(1, min(groups, len(work)))
    bins: list[list[BucketRange]] = [[] for _ in range(count)]
    loads = [0] * count
    for r in sorted(work, key=lambda r: -r.weight(snapshot_weight)):
        i = loads.index(min(loads))
        bins[i].append(r)
        loads[i] += max(1, r.weight(snapshot_weight))
    order = lambda r: (-1 if r.partition_id is None else r.partition_id, r.bucket)  # noqa: E731
    return [sorted(b, key=order) for b in bins]
