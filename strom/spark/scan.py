"""Executor side of reads: a `SplitGroup` in, Arrow batches in Spark's exact schema out.

Log ranges stream through batch by batch. Primary-key ranges that must become current rows are
gathered per bucket (KV snapshot rows as inserts, then the changelog) and folded by key first.
Optional columns are added column-wise: ``_change_type`` labels and the ``__bucket``,
``__offset``, ``__timestamp`` metadata of each record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from strom.client.scanner.scan_records import ScanBatch
from strom.spark import bridge
from strom.spark.changelog import change_type_labels, fold_by_key
from strom.spark.options import BUCKET_COLUMN, CHANGE_TYPE_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN
from strom.spark.splits import ReadSpec, SplitGroup
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


def _as_batch(columns: dict[str, pa.Array], target: pa.Schema) -> pa.RecordBatch:
    arrays = [columns[f.name] for f in target]
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    names = [f.name for f in target]
    return conform(pa.RecordBatch.from_arrays(arrays, names=names), target)


def _fold(spec: ReadSpec, chunks: list[ScanBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """One bucket's changes (in log order) folded into its current rows."""
    table = pa.Table.from_batches([pa.RecordBatch.from_pydict(_with_extras(spec, c)) for c in chunks])
    change_types = pa.chunked_array([c.change_type_array() for c in chunks]).combine_chunks()
    folded = fold_by_key(table, change_types, spec.table.physical_primary_key or spec.table.primary_key)
    for batch in folded.to_batches(max_chunksize=65_536):
        yield _as_batch({name: batch.column(name) for name in batch.schema.names}, target)


def read_group(group: SplitGroup) -> Iterator[pa.RecordBatch]:
    spec = group.spec
    target = _target_schema(spec)
    # KV snapshots first: their rows come before the changelog that follows them.
    snapshots: dict[tuple[int | None, int], list[ScanBatch]] = {}
    for r in group.ranges:
        if r.snapshot_id is not None:
            chunks = [c for c in bridge.read_snapshot(spec, r) if c.num_rows]
            if spec.merge_by_key:
                snapshots[(r.partition_id, r.bucket)] = chunks
            else:
                yield from (_as_batch(_with_extras(spec, c), target) for c in chunks)
    if not spec.merge_by_key:
        # Changes as they are, all ranges fetched together.
        for chunk in bridge.scan(spec, group.ranges):
            if chunk.num_rows:
                yield _as_batch(_with_extras(spec, chunk), target)
        return
    # Fetch every bucket at once, then fold each bucket (a key lives in one bucket only).
    by_bucket: dict[tuple[int | None, int], list[ScanBatch]] = snapshots
    for chunk in bridge.scan(spec, group.ranges):
        if chunk.num_rows:
            by_bucket.setdefault((chunk.bucket.partition_id, chunk.bucket.bucket), []).append(chunk)
    for chunks in by_bucket.values():
        if chunks:
            yield from _fold(spec, chunks, target)
