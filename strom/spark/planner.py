"""Driver-side planning: which partitions and buckets to read, and between which offsets.

Reads are bounded by offsets the planner takes from the cluster (ListOffsets per partition, all
partitions at once), so a batch read is a consistent cut of the table as of planning time and a
streaming micro-batch reads exactly the records between two checkpointed offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace

from strom.client.admin import Admin, PartitionInfo
from strom.client.offset_spec import OffsetSpec
from strom.common.errors import PartitionNotExistError
from strom.common.schema import Schema
from strom.common.table_descriptor import TableInfo
from strom.spark.filters import Condition, partition_matches
from strom.spark.lake_source import LakeCut
from strom.spark.offsets import BucketKey, Position, StreamOffsets
from strom.spark.options import ReadOptions, StartupMode
from strom.spark.read_splits import BucketRange


@dataclass(frozen=True)
class PartitionRef:
    """A partition to read (None id and name for an unpartitioned table)."""

    partition_id: int | None
    name: str | None


UNPARTITIONED = PartitionRef(None, None)


async def list_partitions(
    admin: Admin, table: TableInfo, conditions: Sequence[Condition] = ()
) -> list[PartitionRef]:
    """The table's partitions that can match `conditions` (one pseudo-partition when unpartitioned)."""
    if not table.is_partitioned:
        return [UNPARTITIONED]
    infos: list[PartitionInfo] = await admin.list_partition_infos(table.table_path)
    schema: Schema = table.schema
    return sorted(
        (
            PartitionRef(p.partition_id, p.partition_name)
            for p in infos
            if partition_matches(conditions, schema, p.spec)
        ),
        key=lambda p: p.partition_id or 0,
    )


async def _offsets(
    admin: Admin, table: TableInfo, partitions: Sequence[PartitionRef], spec: OffsetSpec
) -> dict[BucketKey, int]:
    buckets = range(table.bucket_count)

    async def one(partition: PartitionRef) -> dict[BucketKey, int]:
        try:
            found = await admin.list_offsets(table.table_path, buckets, spec, partition_name=partition.name)
        except PartitionNotExistError:
            return {}  # dropped since it was listed: nothing left to read
        return {BucketKey(partition.partition_id, b): o for b, o in found.items()}

    out: dict[BucketKey, int] = {}
    for found in await asyncio.gather(*(one(p) for p in partitions)):
        out.update(found)
    return out


def _start_spec(options: ReadOptions) -> OffsetSpec:
    if options.startup_mode is StartupMode.LATEST:
        return OffsetSpec.latest()
    if options.startup_mode is StartupMode.TIMESTAMP:
        assert options.startup_timestamp_ms is not None
        return OffsetSpec.timestamp(options.startup_timestamp_ms)
    return OffsetSpec.earliest()


async def start_offsets(
    admin: Admin, table: TableInfo, partitions: Sequence[PartitionRef], options: ReadOptions
) -> dict[BucketKey, int]:
    return await _offsets(admin, table, partitions, _start_spec(options))


async def end_offsets(
    admin: Admin, table: TableInfo, partitions: Sequence[PartitionRef], options: ReadOptions
) -> dict[BucketKey, int]:
    """The high watermarks, lowered to the end timestamp's offsets when one is set."""
    latest = await _offsets(admin, table, partitions, OffsetSpec.latest())
    if options.end_timestamp_ms is None:
        return latest
    bound = await _offsets(admin, table, partitions, OffsetSpec.timestamp(options.end_timestamp_ms))
    return {k: min(v, bound.get(k, v)) for k, v in latest.items()}


async def earliest_offsets(
    admin: Admin, table: TableInfo, partitions: Sequence[PartitionRef]
) -> dict[BucketKey, int]:
    return await _offsets(admin, table, partitions, OffsetSpec.earliest())


def _lake_offset(lake: LakeCut | None, key: BucketKey) -> int:
    """How far the lake covers the bucket (0: not tiered yet, or no union read)."""
    return 0 if lake is None else lake.bucket_offsets.get((key.partition_id, key.bucket), 0)


def with_lake(r: BucketRange, lake_offset: int, lake: LakeCut) -> BucketRange:
    """`r` reading the lake's rows below `lake_offset` and the log only from there. When Fluss has
    already expired rows past the lake's offset, the log still starts where it starts (the lake's rows
    are all below it: nothing is read twice, and what expired untiered is gone from both)."""
    # The lake is taken before the end offsets, so it cannot be ahead of them; clamp anyway.
    start = max(r.start, min(lake_offset, r.end))
    return replace(r, start=start, snapshot_id=None, lake_snapshot_id=lake.snapshot_id)


async def plan_log_ranges(
    admin: Admin,
    table: TableInfo,
    options: ReadOptions,
    conditions: Sequence[Condition] = (),
    lake: LakeCut | None = None,
) -> list[BucketRange]:
    """Bounded ranges of a log (or changelog) read: startup offsets up to the end offsets.

    With a `lake` (union reads), buckets the lake has reached read the lake's rows first and the log
    from the lake's offset (or from the log start, when Fluss has expired rows the lake holds).
    """
    partitions = await list_partitions(admin, table, conditions)
    names = {p.partition_id: p.name for p in partitions}
    starts, ends = await asyncio.gather(
        start_offsets(admin, table, partitions, options), end_offsets(admin, table, partitions, options)
    )
    ranges = []
    for key, end in sorted(ends.items(), key=lambda kv: kv[0].sort_key()):
        if key not in starts:
            continue
        r = BucketRange(key.partition_id, names.get(key.partition_id), key.bucket, starts[key], end)
        lake_offset = _lake_offset(lake, key)
        # the lake's rows wherever it has any: also those Fluss has expired since (table.log.ttl)
        ranges.append(with_lake(r, lake_offset, lake) if lake and lake_offset > 0 else r)
    return ranges


def stream_offsets(
    table: TableInfo, partitions: Sequence[PartitionRef], positions: dict[BucketKey, Position]
) -> StreamOffsets:
    names = {p.partition_id: p.name for p in partitions if p.partition_id is not None and p.name}
    return StreamOffsets(table.table_id, positions, names)


class SnapshotNeededError(RuntimeError):
    """A primary-key bucket's changelog no longer starts at 0 and its KV snapshot cannot be read."""


async def plan_kv_ranges(
    admin: Admin,
    table: TableInfo,
    options: ReadOptions,
    conditions: Sequence[Condition] = (),
    snapshots_readable: bool = False,
    lake: LakeCut | None = None,
) -> list[BucketRange]:
    """Ranges that rebuild a primary-key table's current rows: KV snapshot + changelog after it.

    Without a snapshot reader the whole changelog is replayed instead, which is exact as long as
    it still starts at offset 0. With a `lake` (union reads), the lake's rows stand in for the KV
    snapshot wherever the lake has reached: they are the bucket's state at the lake offset.
    """
    partitions = await list_partitions(admin, table, conditions)
    ends, earliest = await asyncio.gather(
        end_offsets(admin, table, partitions, options), earliest_offsets(admin, table, partitions)
    )

    async def snapshots(partition: PartitionRef) -> dict[BucketKey, tuple[int, int]]:
        try:
            found = await admin.get_latest_kv_snapshots(table.table_path, partition_name=partition.name)
        except PartitionNotExistError:
            return {}
        return {
            BucketKey(partition.partition_id, b): (found.snapshot_ids[b], found.log_offsets[b])
            for b in found.snapshot_ids
            if b in found.log_offsets
        }

    latest_snapshots: dict[BucketKey, tuple[int, int]] = {}
    for found in await asyncio.gather(*(snapshots(p) for p in partitions)):
        latest_snapshots.update(found)
    names = {p.partition_id: p.name for p in partitions}
    ranges: list[BucketRange] = []
    for key, end in sorted(ends.items(), key=lambda kv: kv[0].sort_key()):
        name = names.get(key.partition_id)
        snapshot = latest_snapshots.get(key)
        lake_offset = _lake_offset(lake, key)
        # As Fluss's union reads: the lake wherever it reached the bucket and the changelog after it
        # is still there (else the KV snapshot, as without the lake).
        if lake is not None and lake_offset > 0 and lake_offset >= earliest.get(key, 0):
            whole = BucketRange(key.partition_id, name, key.bucket, 0, end)
            ranges.append(with_lake(whole, lake_offset, lake))
            continue
        if snapshot is not None and snapshots_readable:
            ranges.append(BucketRange(key.partition_id, name, key.bucket, snapshot[1], end, snapshot[0]))
            continue
        start = earliest.get(key, 0)
        if start > 0:
            where = f" partition '{name}'" if name else ""
            raise SnapshotNeededError(
                f"Bucket {key.bucket}{where} of primary-key table '{table.table_path}' keeps its changelog "
                f"only from offset {start}; its older rows live in KV snapshot "
                f"{snapshot[0] if snapshot else '?'}, which this client cannot read yet."
            )
        ranges.append(BucketRange(key.partition_id, name, key.bucket, start, end))
    return ranges
