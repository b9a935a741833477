"""The lake half of union reads: which tiering snapshot to read, and one bucket's rows from it.

Tiering copies each bucket's log into the lake table up to an offset recorded in the lake
snapshot (``LakeSnapshotInfo.bucket_offsets``). A union read takes those rows from the lake and
only the rest from Fluss. The driver plans against one snapshot id and every task reads exactly
that snapshot, so buckets tiered after planning cannot be read twice or not at all.

Lake rows carry the system columns ``__bucket``, ``__offset`` and ``__timestamp`` (docs/lake.md);
rows are selected by bucket, partition and ``__offset`` below the planned lake offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strom.common.partition import parse_partition_name
from strom.common.table_descriptor import TableInfo
from strom.lake.interface import LakeStorage
from strom.lake.registry import lake_storage_from_config
from strom.lake.system_columns import BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN


@dataclass(frozen=True)
class LakeCut:
    """A lake snapshot pinned by the planner and the offsets it covers per (partition id, bucket)."""

    snapshot_id: int
    bucket_offsets: dict[tuple[int | None, int], int]


def storage(lake: Sequence[tuple[str, str]]) -> LakeStorage:
    return lake_storage_from_config(dict(lake))


def latest_cut(lake: Sequence[tuple[str, str]], table: TableInfo) -> LakeCut | None:
    """The newest tiering snapshot of `table`'s lake table (None when nothing was tiered yet)."""
    lake_storage = storage(lake)
    if not lake_storage.catalog().table_exists(table.table_path):
        return None
    with lake_storage.committer(table) as committer:
        info = committer.latest_snapshot()
    if info is None:
        return None
    return LakeCut(info.snapshot_id, dict(info.bucket_offsets))


def read_bucket(
    lake: Sequence[tuple[str, str]],
    table: TableInfo,
    snapshot_id: int,
    partition_name: str | None,
    bucket: int,
    end_offset: int,
    columns: Sequence[str],
) -> pa.Table:
    """`columns` plus the system columns of one bucket's lake rows below `end_offset`, by offset."""
    lake_storage = storage(lake)
    wanted = [*columns, BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN]
    partition = dict(parse_partition_name(table.partition_keys, partition_name)) if partition_name else {}
    if lake_storage.format == "iceberg":
        rows = _read_iceberg(lake_storage, table, snapshot_id, partition, bucket, end_offset, wanted)
    elif lake_storage.format == "paimon":
        rows = _read_paimon(lake_storage, table, snapshot_id, bucket, wanted)
    elif lake_storage.format == "lance":
        rows = _read_lance(lake_storage, table, snapshot_id, partition, bucket, end_offset, wanted)
    elif lake_storage.format == "delta":
        rows = _read_delta(lake_storage, table, snapshot_id, partition, bucket, end_offset, wanted)
    else:
        raise ValueError(f"Union reads do not support lake format '{lake_storage.format}'.")
    # A column AlterTable added after the lake table's last schema change is not there yet: every
    # lake row predates it (tiering widens the lake table before it writes a row that has it), so
    # it is NULL there, as it is in Fluss for rows written before the ALTER.
    types = table.descriptor.schema.to_arrow_schema()
    for name in wanted:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, types.field(name).type))
    if rows.num_rows == 0:
        return rows
    # The formats prune by these conditions; checking them on the rows keeps the result exact.
    keep = pc.and_(
        pc.equal(rows[BUCKET_COLUMN], pa.scalar(bucket, rows.schema.field(BUCKET_COLUMN).type)),
        pc.less(rows[OFFSET_COLUMN], pa.scalar(end_offset, pa.int64())),
    )
    for key, value in partition.items():
        keep = pc.and_(keep, pc.equal(rows[key].cast(pa.string()), value))
    rows = rows.filter(keep)
    return rows.sort_by(OFFSET_COLUMN).select(wanted)


def _read_iceberg(
    lake_storage: LakeStorage,
    table: TableInfo,
    snapshot_id: int,
    partition: dict[str, str],
    bucket: int,
    end_offset: int,
    columns: Sequence[str],
) -> pa.Table:
    from pyiceberg.expressions import And, BooleanExpression, EqualTo, LessThan, Reference
    from pyiceberg.expressions.literals import literal

    iceberg: Any = lake_storage.catalog().load_table(table.table_path)  # type: ignore[attr-defined]
    # Keyword form: pydantic's generated __init__ is the signature type checkers see.
    condition: BooleanExpression = And(
        EqualTo(term=Reference(BUCKET_COLUMN), value=literal(bucket)),
        LessThan(term=Reference(OFFSET_COLUMN), value=literal(end_offset)),
    )
    for key, value in partition.items():
        condition = And(condition, EqualTo(term=Reference(key), value=literal(value)))
    # The planned snapshot's schema: columns added to the Fluss table since are left to the caller.
    present = {f.name for f in iceberg.scan(snapshot_id=snapshot_id).projection().fields}
    selected = tuple(c for c in columns if c in present)
    scan = iceberg.scan(row_filter=condition, selected_fields=selected, snapshot_id=snapshot_id)
    result: pa.Table = scan.to_arrow()
    return result


def _read_paimon(
    lake_storage: LakeStorage,
    table: TableInfo,
    snapshot_id: int,
    bucket: int,
    columns: Sequence[str],
) -> pa.Table:
    paimon: Any = lake_storage.catalog().load_table(table.table_path)  # type: ignore[attr-defined]
    # Time travel pins the planned snapshot (primary-key tables merge on read up to it).
    builder = paimon.copy({"scan.snapshot-id": str(snapshot_id)}).new_read_builder()
    where = builder.new_predicate_builder()
    # Only the bucket is pushed: a value filter such as __offset could drop a key's newer version
    # before primary-key merging and resurrect an older one.
    columns = [c for c in columns if c in paimon.field_dict]  # the rest: added to Fluss since
    builder = builder.with_projection(list(columns)).with_filter(where.equal(BUCKET_COLUMN, bucket))
    splits = builder.new_scan().plan().splits()
    result = builder.new_read().to_arrow(splits) if splits else None
    if result is None:
        return pa.table({c: pa.array([], pa.null()) for c in columns})
    assert isinstance(result, pa.Table)
    return result


def _bucket_filter(partition: dict[str, str], bucket: int, end_offset: int) -> Any:
    """A pyarrow dataset expression for one bucket's rows below `end_offset` (log tables only)."""
    import pyarrow.dataset as ds

    condition = (ds.field(BUCKET_COLUMN) == bucket) & (ds.field(OFFSET_COLUMN) < end_offset)
    for key, value in partition.items():
        condition = condition & (ds.field(key).cast(pa.string()) == value)
    return condition


def _read_lance(
    lake_storage: LakeStorage,
    table: TableInfo,
    snapshot_id: int,
    partition: dict[str, str],
    bucket: int,
    end_offset: int,
    columns: Sequence[str],
) -> pa.Table:
    # Version `snapshot_id` is the planned one; Lance tables are log tables, so a value filter is exact.
    dataset: Any = lake_storage.catalog().open(table.table_path, snapshot_id)  # type: ignore[attr-defined]
    present = set(dataset.schema.names)  # columns added to Fluss since are not there
    result: pa.Table = dataset.to_table(
        columns=[c for c in columns if c in present], filter=_bucket_filter(partition, bucket, end_offset)
    )
    return result


def _read_delta(
    lake_storage: LakeStorage,
    table: TableInfo,
    snapshot_id: int,
    partition: dict[str, str],
    bucket: int,
    end_offset: int,
    columns: Sequence[str],
) -> pa.Table:
    delta: Any = lake_storage.catalog().open(table.table_path, snapshot_id)  # type: ignore[attr-defined]
    # Partition pruning from the Delta log first; the rest of the condition on the files' rows.
    partitions = [(k, "=", v) for k, v in partition.items()] or None
    present = {f.name for f in delta.schema().fields}  # columns added to Fluss since are not there
    result: pa.Table = delta.to_pyarrow_table(
        partitions=partitions,
        columns=[c for c in columns if c in present],
        filters=_bucket_filter(partition, bucket, end_offset),
    )
    return result
