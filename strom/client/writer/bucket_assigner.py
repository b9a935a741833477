"""Which bucket a write goes to.

* Tables with bucket keys: the hash of the encoded bucket key, with the key encoder and bucket
  function the table's lake format implies (exactly pyfluss's routing). Rows are hashed one by one,
  Arrow batches column-wise (`strom.record.columnar_keys`).
* Tables without: ``client.writer.bucket.no-key-assigner``. STICKY (the default) keeps writing to
  one random bucket among those with a leader until its batch is full, then moves to another one;
  ROUND_ROBIN takes the next available bucket for every row (or Arrow chunk), starting at a random
  position.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from strom.client.cluster import Cluster
from strom.common.bucketing import bucket_function_for
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import PhysicalTablePath
from strom.record.columnar_keys import ColumnarBucketer
from strom.record.key_encoder import bucket_key_encoder

__all__ = [
    "HashBucketAssigner",
    "NoKeyBucketAssigner",
    "RoundRobinBucketAssigner",
    "StickyBucketAssigner",
]

_INT_MAX = (1 << 31) - 1


class NoKeyBucketAssigner(Protocol):
    # When True, an append that would start a new batch asks for a new bucket first.
    abort_if_batch_full: bool

    def assign(self, cluster: Cluster) -> int: ...

    def on_new_batch(self, cluster: Cluster, previous: int) -> None: ...


class StickyBucketAssigner:
    abort_if_batch_full = True

    def __init__(self, path: PhysicalTablePath, num_buckets: int) -> None:
        self.path = path
        self.num_buckets = num_buckets
        self.current = -1

    def assign(self, cluster: Cluster) -> int:
        if self.current < 0:
            self._move(cluster, -1)
        return self.current

    def on_new_batch(self, cluster: Cluster, previous: int) -> None:
        self._move(cluster, previous)

    def _move(self, cluster: Cluster, previous: int) -> None:
        old = self.current
        if old >= 0 and old != previous:
            return  # someone already moved on from `previous`
        available = [loc.table_bucket.bucket for loc in cluster.available_buckets(self.path)]
        if not available:
            self.current = random.randrange(self.num_buckets)
        elif len(available) == 1:
            self.current = available[0]
        else:
            choices = [b for b in available if b != old] or available
            self.current = random.choice(choices)


class RoundRobinBucketAssigner:
    abort_if_batch_full = False

    def __init__(self, path: PhysicalTablePath, num_buckets: int) -> None:
        self.path = path
        self.num_buckets = num_buckets
        self.counter = random.randrange(_INT_MAX)

    def assign(self, cluster: Cluster) -> int:
        value = self.counter
        self.counter = (self.counter + 1) & _INT_MAX
        available = cluster.available_buckets(self.path)
        if not available:
            return value % self.num_buckets
        return available[value % len(available)].table_bucket.bucket

    def assign_many(self, cluster: Cluster, count: int) -> np.ndarray:
        """The buckets of `count` consecutive rows, as `assign` would give them one by one."""
        start = self.counter
        self.counter = (self.counter + count) & _INT_MAX
        positions = (start + np.arange(count, dtype=np.int64)) & _INT_MAX
        available = cluster.available_buckets(self.path)
        if not available:
            return (positions % self.num_buckets).astype(np.int32)
        ids = np.array([loc.table_bucket.bucket for loc in available], dtype=np.int32)
        return ids[positions % len(ids)]

    def on_new_batch(self, cluster: Cluster, previous: int) -> None:
        pass


class HashBucketAssigner:
    """Bucket of a row, or of every row of an Arrow batch, from the bucket-key columns."""

    def __init__(self, info: TableInfo, arrow_schema: pa.Schema) -> None:
        schema = info.schema
        self.num_buckets = info.bucket_count
        key_indexes = schema.column_indexes(info.bucket_keys)
        lake = None if info.datalake_format is None else str(info.datalake_format)
        self._encoder = bucket_key_encoder(schema.row_type, key_indexes, lake)
        self._function = bucket_function_for(lake)
        self._columnar = ColumnarBucketer(schema.row_type, arrow_schema, key_indexes, lake, self.num_buckets)

    def bucket_of_row(self, values: Sequence[Any]) -> int:
        try:
            key = self._encoder.encode_key(values)
        except (ValueError, TypeError) as e:
            raise ValueError(f"cannot encode the bucket key of the row: {e}") from e
        return self._function(key, self.num_buckets)

    def buckets_of_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        return self._columnar.buckets(batch)
