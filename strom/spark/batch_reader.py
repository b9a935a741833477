"""Batch reads: a consistent cut of a table, bounded by offsets taken when the read is planned.

The plan (every bucket's offset range) is taken once per DataFrame, when Spark first asks for the
schema, and travels with the pickled data source; every query on that DataFrame then reads the same
cut. This also matches what Spark does anyway: it caches a Python data source's planned partitions
per DataFrame and reuses them for later queries.

That cache is why pushed filters are opt-in (``scan.filter-pushdown``): Spark 4.3 keeps the plan
of the last query that pushed filters and reuses it for the next query that pushes none, so a
DataFrame whose filtered query pruned partitions would return only those partitions to a later
unfiltered query. With the option on, use each loaded DataFrame for one query.

Spark calls `pushFilters` and then pickles the reader; `partitions` runs in another process whose
changes to the reader never reach `read`, so the plan travels inside the partitions themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from strom.common.partition import parse_partition_name
from strom.common.table_descriptor import TableInfo
from strom.spark import bridge, lake_source, planner
from strom.spark.filters import Condition, PushedFilters, partition_matches, push
from strom.spark.options import ConnectionOptions, ReadOptions, StartupMode, resolve_lake
from strom.spark.read_splits import BucketRange, ReadSpec, SplitGroup, bin_pack
from strom.spark.scan import read_group


def read_spec(
    connection: ConnectionOptions,
    table: TableInfo,
    options: ReadOptions,
    schema: StructType,
    merge_by_key: bool,
    pushed: PushedFilters | None = None,
) -> ReadSpec:
    """What executors need to produce `schema` from `table`."""
    wanted = [f.name for f in schema.fields if f.name in set(table.schema.column_names)]
    if merge_by_key:
        # Folding needs the key even when Spark does not output it.
        wanted += [k for k in table.primary_key if k not in wanted]
    return ReadSpec(
        bootstrap_servers=connection.bootstrap_servers,
        client_options=connection.client,
        table=table,
        columns=tuple(wanted),
        merge_by_key=merge_by_key,
        include_change_type=options.include_change_type,
        include_metadata=options.include_metadata,
        predicate=pushed.predicate if pushed else None,
        spark_schema_json=schema.json(),
        lake=resolve_lake(options.lake, table) if options.union_read and table.datalake_enabled else (),
    )


def merges_by_key(table: TableInfo, options: ReadOptions) -> bool:
    # A primary-key table reads as its rows, unless the caller asked for the changes themselves.
    return table.has_primary_key and not options.include_change_type


def plan_ranges(
    connection: ConnectionOptions,
    table: TableInfo,
    options: ReadOptions,
    conditions: Sequence[Condition] = (),
) -> list[BucketRange]:
    """Every bucket's share of a batch read, as of now."""
    # Union reads: the lake snapshot first, so Fluss's end offsets are never behind it.
    lake = (
        lake_source.latest_cut(resolve_lake(options.lake, table), table)
        if options.union_read and table.datalake_enabled
        else None
    )
    if table.has_primary_key and options.startup_mode is StartupMode.FULL:
        snapshots = bridge.supports_snapshots()
        return bridge.run_admin(
            connection,
            lambda admin: planner.plan_kv_ranges(admin, table, options, conditions, snapshots, lake),
        )
    return bridge.run_admin(
        connection, lambda admin: planner.plan_log_ranges(admin, table, options, conditions, lake)
    )


def prune(
    ranges: Sequence[BucketRange], table: TableInfo, conditions: Sequence[Condition]
) -> list[BucketRange]:
    """The ranges of partitions that can match `conditions`."""
    if not conditions or not table.is_partitioned:
        return list(ranges)
    keep: dict[str | None, bool] = {}
    out = []
    for r in ranges:
        if r.partition_name not in keep:
            assert r.partition_name is not None
            spec = parse_partition_name(table.partition_keys, r.partition_name)
            keep[r.partition_name] = partition_matches(conditions, table.schema, spec)
        if keep[r.partition_name]:
            out.append(r)
    return out


class FlussBatchReader(DataSourceReader):
    def __init__(
        self,
        connection: ConnectionOptions,
        table: TableInfo,
        options: ReadOptions,
        schema: StructType,
        pinned: Sequence[BucketRange] | None = None,
    ) -> None:
        self.connection = connection
        self.table = table
        self.options = options
        self.schema = schema
        # The plan taken when the DataFrame was loaded, if any.
        self.pinned = None if pinned is None else list(pinned)
        self.pushed = PushedFilters()

    def partitions(self) -> Sequence[InputPartition]:
        conditions = self.pushed.partition_conditions
        if self.pinned is not None:
            ranges = prune(self.pinned, self.table, conditions)
        else:
            ranges = plan_ranges(self.connection, self.table, self.options, conditions)
        merge = merges_by_key(self.table, self.options)
        spec = read_spec(self.connection, self.table, self.options, self.schema, merge, self.pushed)
        groups = bin_pack(ranges, self.options.splits)
        # Spark wants at least one partition; an empty one reads nothing.
        return [SplitGroup(spec, g) for g in groups] or [SplitGroup(spec, [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitGroup)
        return read_group(partition)


class FlussPushdownReader(FlussBatchReader):
    """A batch reader that also prunes partitions and log batches by Spark's pushed filters."""

    def pushFilters(self, filters: Sequence[Any]) -> Iterator[Any]:
        server_side = not self.table.has_primary_key and bridge.supports_filter()
        self.pushed, back = push(filters, self.table.schema, self.table.partition_keys, server_side)
        return iter(back)
