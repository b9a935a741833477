"""Where a row of a primary-key table lives: its key bytes, its bucket and its partition.

Computed exactly as pyfluss (the Rust client) does, so rows written by either client are found by both:

* the **key** is the physical primary key (primary key minus partition keys) encoded with
  `primary_key_encoder` (the lake format's encoder, or Compacted for kv format version 2 with a custom
  bucket key);
* the **bucket** is the table's bucket function over the bucket key encoded with the lake format's
  encoder; with the default bucket key those bytes are the key bytes themselves, so they are reused;
* the **partition** is the partition-key values rendered as a partition name.

Rows are given as full-width value lists in column order (None where a value is unknown, e.g. the
non-key columns of a delete). A prefix lookup encodes the bucket-key columns with the primary-key
rules (`prefix_encoder`), so that the server can match them as a byte prefix of stored keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from strom.client.writer.bucket_assigner import HashBucketAssigner
from strom.client.writer.partitioner import Partitioner
from strom.common.bucketing import bucket_function_for
from strom.common.table_descriptor import TableInfo
from strom.record.columnar_keys import fluss_buckets, iceberg_buckets, paimon_buckets
from strom.record.key_encoder import CompactedKeyEncoder, RowKeyEncoder, primary_key_encoder

__all__ = ["KeyRouting"]


class KeyRouting:
    def __init__(self, info: TableInfo) -> None:
        schema = info.schema
        self.info = info
        self.names = tuple(schema.column_names)
        self.num_buckets = info.bucket_count
        row_type = schema.row_type
        lake = None if info.datalake_format is None else str(info.datalake_format)
        self.lake_format = lake
        self.is_default_bucket_key = info.descriptor.is_default_bucket_key()
        version = info.kv_format_version
        self.primary_key = tuple(info.primary_key)
        self.primary_key_indexes = tuple(schema.column_indexes(info.primary_key))
        self.key_indexes = tuple(schema.column_indexes(info.physical_primary_key))
        self.bucket_key_indexes = tuple(schema.column_indexes(info.bucket_keys))
        self.key_encoder: RowKeyEncoder = primary_key_encoder(
            row_type, self.key_indexes, lake, version, self.is_default_bucket_key
        )
        # The encoding of the key bytes: None for Compacted, else the lake format's.
        self.key_format = None if isinstance(self.key_encoder.encoder, CompactedKeyEncoder) else lake
        self._bucketer = HashBucketAssigner(info, schema.to_arrow_schema())
        # key bytes -> bucket, for tables whose bucket key is the primary key (is_default_bucket_key)
        self.bucket_function = bucket_function_for(lake)
        self._columnar_buckets = (
            paimon_buckets if lake == "paimon" else iceberg_buckets if lake == "iceberg" else fluss_buckets
        )
        self.partitioner = (
            Partitioner(schema.column_names, row_type, info.partition_keys) if info.is_partitioned else None
        )

    # ------------------------------------------------------------------ rows

    def encode_key(self, row: Sequence[Any]) -> bytes:
        try:
            return self.key_encoder.encode_key(row)
        except (ValueError, TypeError) as e:
            raise ValueError(f"cannot encode the primary key {list(self.primary_key)}: {e}") from e

    def bucket_of(self, row: Sequence[Any], key: bytes) -> int:
        """The bucket of a row whose key bytes are `key`."""
        if self.is_default_bucket_key:
            return self.bucket_function(key, self.num_buckets)
        return self._bucketer.bucket_of_row(row)

    def partition_of(self, row: Sequence[Any]) -> str | None:
        return None if self.partitioner is None else self.partitioner.name_of(row)

    # ------------------------------------------------------------------ many rows

    def buckets_of_batch(self, batch: pa.RecordBatch) -> np.ndarray:
        """The bucket of every row of a batch of the table's Arrow schema, column-wise."""
        return self._bucketer.buckets_of_batch(batch)

    def buckets_of_keys(self, keys: Sequence[bytes], rows: Sequence[Sequence[Any]]) -> np.ndarray:
        """The bucket of every row given its key bytes (hashed column-wise with the default bucket key)."""
        if not keys:
            return np.zeros(0, dtype=np.int32)
        if self.is_default_bucket_key:
            return self._columnar_buckets(pa.array(keys, pa.large_binary()), self.num_buckets)
        return np.fromiter((self._bucketer.bucket_of_row(r) for r in rows), dtype=np.int32, count=len(rows))

    # ------------------------------------------------------------------ prefix lookups

    def prefix_encoder(self, lookup_columns: Sequence[str]) -> RowKeyEncoder:
        """The encoder of prefix-lookup keys: the bucket-key columns under the primary-key rules.

        `lookup_columns` must be the partition keys (if any) followed by the bucket keys, and the
        bucket keys a strict prefix of the physical primary key (what Fluss allows).
        """
        info = self.info
        path = info.table_path
        bucket_keys = list(info.bucket_keys)
        physical = list(info.physical_primary_key)
        if not bucket_keys:
            raise ValueError(f"Cannot do prefix lookups on table '{path}': it has no bucket keys.")
        if physical[: len(bucket_keys)] != bucket_keys:
            raise ValueError(
                f"Cannot do prefix lookups on table '{path}': its bucket keys {bucket_keys} are not a prefix "
                f"of its physical primary key {physical}."
            )
        unknown = [c for c in lookup_columns if c not in self.names]
        if unknown:
            raise ValueError(f"Unknown column(s) {unknown} for a prefix lookup on '{path}'.")
        partition_keys = list(info.partition_keys)
        missing = [k for k in partition_keys if k not in lookup_columns]
        if missing:
            raise ValueError(
                f"Cannot do prefix lookups on table '{path}': the lookup columns {list(lookup_columns)} "
                f"must contain all partition keys {partition_keys}."
            )
        rest = [c for c in lookup_columns if c not in partition_keys]
        if rest != bucket_keys:
            raise ValueError(
                f"Cannot do prefix lookups on table '{path}': the lookup columns {list(lookup_columns)} "
                f"must be the partition keys and then all bucket keys {bucket_keys}, in order."
            )
        if bucket_keys == physical:
            raise ValueError(
                f"Cannot do prefix lookups on table '{path}': the lookup columns are its whole primary key; "
                "use a plain lookuper (new_lookup().create_lookuper())."
            )
        return primary_key_encoder(
            info.schema.row_type,
            self.bucket_key_indexes,
            self.lake_format,
            info.kv_format_version,
            self.is_default_bucket_key,
        )

    def prefix_bucket_of(self, row: Sequence[Any], prefix: bytes) -> int:
        """The bucket of a prefix-lookup key (the bucket key is exactly the prefix columns)."""
        if self.lake_format is None:
            return self.bucket_function(prefix, self.num_buckets)
        return self._bucketer.bucket_of_row(row)
