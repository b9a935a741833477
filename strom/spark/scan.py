"""Executor side of reads: a `SplitGroup` in, Arrow batches in Spark's exact schema out.

Log ranges stream through batch by batch. Primary-key ranges that must become current rows are
gathered per bucket (KV snapshot or lake rows as inserts, then the changelog) and folded by key
first. Union reads emit a bucket's lake rows ahead of its log records.
Optional columns are added column-wise: ``_change_type`` labels and the ``__bucket``,
``__offset``, ``__timestamp`` metadata of each record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from strom.client.scanner.scan_records import ScanBatch
from strom.record.change_type import ChangeType
from strom.spark import bridge, lake_source
from strom.spark.changelog import change_type_labels, fold_by_key
from strom.spark.options import BUCKET_COLUMN, CHANGE_TYPE_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN
from strom.spark.read_splits import BucketRange, ReadSpec, SplitGroup
from strom.spark.types import arrow_schema_for, conform

_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")


def _target_schema(spec: ReadSpec) -> pa.Schema:
    from pyspark.sql.types import StructType

    return arrow_schema_for(StructType.fromJson(json.loads(spec.spark_schema_json)))


def _with_extras(spec: ReadSpec, chunk: ScanBatch) -> dict[str, pa.Array]:
    """The output columns of one chunk by name (conform picks and orders them)."""
    columns = {name: chunk.batch.column(name) for name in spec.columns}
    n = chunk.num_rows
    if spec.include_change_type:
        columns[CHANGE_TYPE_COLUMN] = change_type_labels(chunk.change_type_array())
    if spec.include_metadata:
        columns[BUCKET_COLUMN] = pa.repeat(pa.scalar(chunk.bucket.bucket, pa.int32()), n)
        columns[OFFSET_COLUMN] = chunk.offsets()
        columns[TIMESTAMP_COLUMN] = pa.repeat(pa.scalar(chunk.timestamp, pa.int64()), n).cast(_TIMESTAMP_MS)
    return columns


# A chunk of one bucket's rows: output columns by name, and each row's change type.
Piece = tuple[dict[str, pa.Array], pa.Array]


def _log_piece(spec: ReadSpec, chunk: ScanBatch) -> Piece:
    return _with_extras(spec, chunk), chunk.change_type_array()


def _lake_piece(spec: ReadSpec, r: BucketRange) -> Piece | None:
    """The lake's rows of `r` (offsets below ``r.start``): inserts into a primary-key table."""
    assert r.lake_snapshot_id is not None
    rows = lake_source.read_bucket(
        spec.lake, spec.table, r.lake_snapshot_id, r.partition_name, r.bucket, r.start, spec.columns
    )
    if rows.num_rows == 0:
        return None
    kind = ChangeType.INSERT if spec.table.has_primary_key else ChangeType.APPEND_ONLY
    change_types = pa.repeat(pa.scalar(int(kind), pa.int8()), rows.num_rows)
    columns: dict[str, pa.Array] = {name: rows.column(name) for name in spec.columns}
    if spec.include_change_type:
        columns[CHANGE_TYPE_COLUMN] = change_type_labels(change_types)
    if spec.include_metadata:
        # The lake keeps each row's own offset and commit time.
        columns[BUCKET_COLUMN] = rows.column(BUCKET_COLUMN).cast(pa.int32())
        columns[OFFSET_COLUMN] = rows.column(OFFSET_COLUMN).cast(pa.int64())
        columns[TIMESTAMP_COLUMN] = rows.column(TIMESTAMP_COLUMN).cast(_TIMESTAMP_MS, safe=False)
    return columns, change_types


def _as_batch(columns: dict[str, pa.Array], target: pa.Schema) -> pa.RecordBatch:
    arrays = [columns[f.name] for f in target]
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    names = [f.name for f in target]
    return conform(pa.RecordBatch.from_arrays(arrays, names=names), target)


def _fold(spec: ReadSpec, pieces: list[Piece], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """One bucket's changes (in log order) folded into its current rows."""
    # Lake columns may be typed wider than Fluss's (docs/lake.md): promote to a common schema.
    table = pa.concat_tables([pa.table(columns) for columns, _ in pieces], promote_options="permissive")
    change_types = pa.chunked_array([types for _, types in pieces]).combine_chunks()
    folded = fold_by_key(table, change_types, spec.table.physical_primary_key or spec.table.primary_key)
    for batch in folded.to_batches(max_chunksize=65_536):
        yield _as_batch({name: batch.column(name) for name in batch.schema.names}, target)


def read_group(group: SplitGroup) -> Iterator[pa.RecordBatch]:
    spec = group.spec
    target = _target_schema(spec)
    # KV snapshots and lake rows first: they come before the log records that follow them.
    snapshots: dict[tuple[int | None, int], list[Piece]] = {}
    for r in group.ranges:
        pieces: list[Piece] = []
        if r.snapshot_id is not None:
            pieces = [_log_piece(spec, c) for c in bridge.read_snapshot(spec, r) if c.num_rows]
        elif r.lake_snapshot_id is not None:
            lake = _lake_piece(spec, r)
            pieces = [lake] if lake is not None else []
        if spec.merge_by_key:
            snapshots[(r.partition_id, r.bucket)] = pieces
        else:
            yield from (_as_batch(columns, target) for columns, _ in pieces)
    if not spec.merge_by_key:
        # Changes as they are, all ranges fetched together.
        for chunk in bridge.scan(spec, group.ranges):
            if chunk.num_rows:
                yield _as_batch(_with_extras(spec, chunk), target)
        return
    # Fetch every bucket at once, then fold each bucket (a key lives in one bucket only).
    by_bucket = snapshots
    for chunk in bridge.scan(spec, group.ranges):
        if chunk.num_rows:
            key = (chunk.bucket.partition_id, chunk.bucket.bucket)
            by_bucket.setdefault(key, []).append(_log_piece(spec, chunk))
    for pieces in by_bucket.values():
        if pieces:
            yield from _fold(spec, pieces, target)
