"""The rows of a primary-key table bucket as of a changelog offset: KV snapshot + changelog, merged by key.

    rows = await read_bucket_state(table, bucket, end_offset=1200)     # a pyarrow Table

The bucket's latest KV snapshot (if any, and if it does not cover more than `end_offset`) gives the
rows up to its log offset; the changelog ``[snapshot offset, end_offset)`` is read with a bounded log
scan and folded on top with `merge_changes`: the last change of each key wins, keys whose last change
is a delete (-D, or a dangling -U) disappear. Without a usable snapshot the whole changelog is
replayed from the earliest offset, which gives the same rows (changelogs of primary-key tables are
kept for recovery).

Merging is column-wise: the physical primary key of every row is encoded into one binary column
(Fluss's compacted key encoding, built by Arrow), the last change per key comes from one hash
aggregation, and the snapshot rows that were changed are dropped with one ``is_in``. This is what
Spark batch reads and the tiering service's snapshot splits of primary-key tables need.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.client.offset_spec import OffsetSpec
from strom.client.scanner.log_fetcher import EARLIEST_OFFSET
from strom.client.scanner.snapshot_reader import SnapshotReader
from strom.common.errors import KvSnapshotNotExistError
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.record.change_type import ChangeType
from strom.record.columnar_keys import ColumnarBucketer

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["BucketState", "merge_changes", "read_bucket_state"]

_LIVE = pa.array(
    [int(ChangeType.APPEND_ONLY), int(ChangeType.INSERT), int(ChangeType.UPDATE_AFTER)], pa.int8()
)


class BucketState:
    """Key identity of a table's rows, for merging snapshots and changelogs column-wise."""

    def __init__(self, info: TableInfo) -> None:
        schema = info.schema
        self.arrow_schema = schema.to_arrow_schema()
        self.key_names = list(info.physical_primary_key)
        key_indexes = schema.column_indexes(self.key_names)
        key_schema = pa.schema([self.arrow_schema.field(i) for i in key_indexes])
        key_types = [schema.row_type[i] for i in key_indexes]
        # Compacted key bytes of the key columns: one binary value per row that identifies the key.
        self._keys = ColumnarBucketer(key_types, key_schema, range(len(key_indexes)), None, 1)

    def keys(self, rows: pa.Table) -> pa.Array:
        if rows.num_rows == 0:
            return pa.array([], pa.large_binary())
        batch = pa.RecordBatch.from_arrays(
            [rows.column(n).combine_chunks() for n in self.key_names], names=self.key_names
        )
        return self._keys.key_bytes(batch)

    def merge(self, base: pa.Table, changes: pa.Table, change_types: np.ndarray) -> pa.Table:
        return merge_changes(base, changes, change_types, self.keys)


def merge_changes(
    base: pa.Table,
    changes: pa.Table,
    change_types: np.ndarray | pa.Array,
    keys_of: Callable[[pa.Table], pa.Array],
) -> pa.Table:
    """`base` rows (all current) with `changes` (in log order, one change type per row) applied.

    `keys_of` maps a table to one key value per row (e.g. `BucketState.keys`). The result holds the
    base rows whose key did not change, then the rows whose last change is +I, +U or +A, in the order
    of those last changes.
    """
    if changes.num_rows == 0:
        return base
    types = change_types if isinstance(change_types, pa.Array) else pa.array(change_types, pa.int8())
    changed_keys = keys_of(changes)
    order = pa.array(np.arange(changes.num_rows, dtype=np.int64))
    last = (
        pa.table({"k": changed_keys, "i": order})
        .group_by("k", use_threads=False)
        .aggregate([("i", "max")])
        .column("i_max")
    )
    last = last.combine_chunks()
    last = pc.take(last, pc.sort_indices(last))  # keep the log order of the last changes
    last_types = pc.take(types, last)
    survivors = changes.take(pc.filter(last, pc.is_in(last_types, value_set=_LIVE)))
    if base.num_rows:
        unchanged = pc.invert(pc.is_in(keys_of(base), value_set=changed_keys))
        base = base.filter(unchanged)
    return pa.concat_tables([base, survivors]) if base.num_rows else survivors


async def read_bucket_state(
    table: Table,
    bucket: int,
    partition_id: int | None = None,
    end_offset: int | None = None,
    *,
    projection: Sequence[str] | None = None,
    snapshot_id: int | None = None,
) -> pa.Table:
    """The rows of a bucket of a primary-key table as of changelog offset `end_offset` (exclusive;
    the current high watermark when None), with the given columns (all by default).

    `snapshot_id` picks the KV snapshot to start from (the latest by default, or when it is gone); a
    snapshot that covers more than `end_offset` is not used.
    """
    if not table.has_primary_key:
        raise ValueError(f"Table '{table.path}' has no primary key; read its log instead.")
    table_bucket = TableBucket(table.table_id, partition_id, bucket)
    if end_offset is None:
        end_offset = await _high_watermark(table, table_bucket)
    state = BucketState(table.info)
    base = state.arrow_schema.empty_table()
    start = EARLIEST_OFFSET
    reader = SnapshotReader(table)
    try:
        snapshot = await reader.open(table_bucket, snapshot_id)
    except KvSnapshotNotExistError:
        snapshot = await reader.open(table_bucket, None)  # retention removed it: the newest one
    if snapshot is not None:
        with snapshot:
            if snapshot.log_offset <= end_offset:
                base = await snapshot.to_arrow()
                start = snapshot.log_offset
    changes, change_types = await _read_changelog(table, table_bucket, start, end_offset)
    rows = state.merge(base, changes, change_types)
    return rows if projection is None else rows.select(list(projection))


async def _high_watermark(table: Table, bucket: TableBucket) -> int:
    name = None
    if bucket.partition_id is not None:
        metadata = table.connection.metadata
        name = metadata.partition_name(bucket.partition_id)
        if name is None:
            await metadata.refresh_partitions(table.path, [bucket.partition_id])
            name = metadata.partition_name(bucket.partition_id)
    offsets = await table.connection.get_admin().list_offsets(
        table.path, [bucket.bucket], OffsetSpec.latest(), partition_name=name
    )
    return offsets[bucket.bucket]


async def _read_changelog(
    table: Table, bucket: TableBucket, start: int, end: int
) -> tuple[pa.Table, np.ndarray]:
    schema = table.arrow_schema
    if end <= 0 or (start >= 0 and start >= end):
        return schema.empty_table(), np.zeros(0, dtype=np.int8)
    scanner = table.new_scan().create_log_scanner()
    if bucket.partition_id is None:
        scanner.subscribe(bucket.bucket, start, end)
    else:
        scanner.subscribe_partition(bucket.partition_id, bucket.bucket, start, end)
    batches: list[pa.RecordBatch] = []
    types: list[np.ndarray] = []
    async with scanner:
        async for part in scanner.iter_batches():
            batches.append(part.batch)
            types.append(part.change_type_array().to_numpy(zero_copy_only=False))
    if not batches:
        return schema.empty_table(), np.zeros(0, dtype=np.int8)
    return pa.Table.from_batches(batches, schema=schema), np.concatenate(types)
