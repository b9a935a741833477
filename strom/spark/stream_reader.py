"""Streaming reads: micro-batches between per-bucket offsets that Spark checkpoints.

The reader object lives in one driver-side Python process for the whole query, but nothing
durable is kept in it: Spark writes every batch's end offsets to the checkpoint before running
it and gives them back as `start` after a restart, so a restarted query neither skips nor repeats
records. `commit` arrives late (only when the next batch is planned) and is not needed.

Partitions created while the stream runs are picked up from their earliest offset; dropped ones
leave the offsets. Admission control (``maxRowsPerTrigger``) caps records per micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strom.client.admin import Admin
from strom.common.table_descriptor import TableInfo
from strom.spark import bridge, lake_source, planner
from strom.spark.batch_reader import read_spec
from strom.spark.lake_source import LakeCut
from strom.spark.offsets import BucketKey, Position, StreamOffsets, admit
from strom.spark.options import ConnectionOptions, ReadOptions, StartupMode, resolve_lake
from strom.spark.read_splits import BucketRange, SplitGroup, bin_pack
from strom.spark.scan import read_group


class FlussStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, connection: ConnectionOptions, table: TableInfo, options: ReadOptions, schema: StructType
    ) -> None:
        self.connection = connection
        self.table = table
        self.options = options
        self.schema = schema
        # Trigger.AvailableNow: the offsets that were latest when the query started.
        self._target: StreamOffsets | None = None

    # ------------------------------------------------------------------ offsets

    async def _initial(self, admin: Admin, lake: LakeCut | None) -> StreamOffsets:
        partitions = await planner.list_partitions(admin, self.table)
        positions: dict[BucketKey, Position]
        if self.table.has_primary_key and self.options.startup_mode is StartupMode.FULL:
            # The table's rows first (lake rows or snapshot, + changelog), then every later change.
            ranges = await planner.plan_kv_ranges(
                admin, self.table, ReadOptions(), (), bridge.supports_snapshots(), lake
            )
            positions = {
                BucketKey(r.partition_id, r.bucket): Position(r.start, r.snapshot_id, r.lake_snapshot_id)
                for r in ranges
            }
        elif lake is not None:
            # Union read: what the lake holds (also what Fluss has expired), then Fluss from there on.
            ranges = await planner.plan_log_ranges(admin, self.table, self.options, (), lake)
            positions = {
                BucketKey(r.partition_id, r.bucket): Position(r.start, lake_snapshot_id=r.lake_snapshot_id)
                for r in ranges
            }
        else:
            found = await planner.start_offsets(admin, self.table, partitions, self.options)
            positions = {k: Position(v) for k, v in found.items()}
        return planner.stream_offsets(self.table, partitions, positions)

    async def _latest(self, admin: Admin, start: StreamOffsets | None) -> StreamOffsets:
        partitions = await planner.list_partitions(admin, self.table)
        latest = await planner.end_offsets(admin, self.table, partitions, self.options)
        positions = {k: Position(v) for k, v in latest.items()}
        if start is not None:
            new = [
                p for p in partitions if not any(k.partition_id == p.partition_id for k in start.positions)
            ]
            if new:
                # A partition born after the stream started is read from its beginning: the first
                # batch that sees it only records where it starts.
                earliest = await planner.earliest_offsets(admin, self.table, new)
                positions.update({k: Position(v) for k, v in earliest.items()})
        return planner.stream_offsets(self.table, partitions, positions)

    def initialOffset(self) -> dict[str, Any]:
        lake = None
        if self.options.union_read and self.table.datalake_enabled:
            # pinned before Fluss's offsets are taken, so the lake is never ahead of them
            lake = lake_source.latest_cut(resolve_lake(self.options.lake, self.table), self.table)
        return bridge.run_admin(self.connection, lambda admin: self._initial(admin, lake)).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_rows_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = bridge.run_admin(self.connection, lambda admin: self._latest(admin, None))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = StreamOffsets.from_json(start, self.table.table_id)
        latest = bridge.run_admin(self.connection, lambda admin: self._latest(admin, begin))
        if self._target is not None:
            latest = _capped(latest, self._target)
        end = _never_backwards(begin, latest)
        if isinstance(limit, ReadMaxRows):
            end = admit(begin, end, limit.max_rows)
        return end.to_json()

    # ------------------------------------------------------------------ reading

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = StreamOffsets.from_json(start, self.table.table_id)
        finish = StreamOffsets.from_json(end, self.table.table_id)
        ranges = []
        for key in finish.sorted_keys():
            position = begin.get(key)
            if position is None:
                continue  # first seen in this batch: `end` holds where it starts
            name = finish.partition_names.get(key.partition_id) if key.partition_id is not None else None
            ranges.append(
                BucketRange(
                    key.partition_id,
                    name,
                    key.bucket,
                    position.offset,
                    finish.positions[key].offset,
                    position.snapshot_id,
                    position.lake_snapshot_id,
                )
            )
        spec = read_spec(self.connection, self.table, self.options, self.schema, merge_by_key=False)
        return [SplitGroup(spec, g) for g in bin_pack(ranges, self.options.splits)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitGroup)
        return read_group(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Fluss keeps no consumer position, the checkpoint holds it."""


def _capped(latest: StreamOffsets, target: StreamOffsets) -> StreamOffsets:
    """`latest` held at the AvailableNow target; partitions created since then stay unread."""
    positions = {}
    for key, position in latest.positions.items():
        bound = target.get(key)
        if bound is None:
            continue
        positions[key] = Position(min(position.offset, bound.offset))
    return StreamOffsets(latest.table_id, positions, latest.partition_names)


def _never_backwards(start: StreamOffsets, latest: StreamOffsets) -> StreamOffsets:
    """End offsets: `latest`, but no bucket before where `start` already is."""
    positions = {}
    for key, position in latest.positions.items():
        begin = start.get(key)
        offset = position.offset if begin is None else max(position.offset, begin.offset)
        positions[key] = Position(offset)
    return StreamOffsets(latest.table_id, positions, latest.partition_names)
