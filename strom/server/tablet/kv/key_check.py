"""What a PutKv may write: every row under the key that encodes its own primary key, in this bucket.

A client computes both the key bytes and the bucket, so a buggy or hostile one could store a row under
another row's key, or in a bucket where lookups never look. The check runs column-wise on the rows the
changelog decodes anyway (no per-row Python): the primary-key columns are encoded exactly as the
clients encode them (`strom.record.columnar_keys`) and compared with the keys sent, and the bucket-key
columns are hashed with the table's bucket function. A null primary-key column fails the encoding.
"""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.common.errors import CorruptRecordError
from strom.common.rescale import stale_routing, was_rescaled
from strom.common.table_descriptor import TableInfo
from strom.record.columnar_keys import ColumnarBucketer
from strom.record.key_encoder import CompactedKeyEncoder, primary_key_encoder


class KeyCheck:
    def __init__(self, info: TableInfo, bucket: int | None) -> None:
        schema = info.schema
        row_type = schema.row_type
        arrow_schema = schema.to_arrow_schema()
        lake = None if info.datalake_format is None else str(info.datalake_format)
        key_indexes = schema.column_indexes(info.physical_primary_key)
        encoder = primary_key_encoder(
            row_type, key_indexes, lake, info.kv_format_version, info.descriptor.is_default_bucket_key()
        )
        key_format = None if isinstance(encoder.encoder, CompactedKeyEncoder) else lake
        self._keys = ColumnarBucketer(row_type, arrow_schema, key_indexes, key_format, info.bucket_count)
        self._bucket = bucket
        # built even when no bucket is checked, so that `for_bucket` shares it
        self._bucketer = ColumnarBucketer(
            row_type, arrow_schema, schema.column_indexes(info.bucket_keys), lake, info.bucket_count
        )
        self._names = info.physical_primary_key
        self._info = info
        # (byte, bit mask) of each primary-key column's null bit in a CompactedRow
        self._null_bits = [(i // 8, 1 << (i % 8)) for i in schema.primary_key_indexes]

    @property
    def bucket(self) -> int | None:
        return self._bucket

    def for_bucket(self, bucket: int | None) -> KeyCheck:
        """This check for the rows of `bucket` (the encoders are shared: they hold no state)."""
        if bucket == self._bucket:
            return self
        check = copy.copy(self)
        check._bucket = bucket
        return check

    def check_null_keys(self, values: list[bytes]) -> None:
        """No row may set the null bit of a primary-key column (decoding would misread it)."""
        for n, value in enumerate(values):
            for byte, mask in self._null_bits:
                if byte >= len(value) or value[byte] & mask:
                    raise CorruptRecordError(f"kv record {n}: a primary-key column {self._names} is null")

    def check(self, rows: pa.RecordBatch, keys: list[bytes]) -> None:
        """`rows[i]` is to be stored under `keys[i]`; raises CorruptRecordError at the first that may not."""
        if not keys:
            return
        try:
            expected = self._keys.key_bytes(rows).cast(pa.large_binary())
        except ValueError as e:
            raise CorruptRecordError(f"kv record with a null primary key: {e}") from None
        differs = pc.not_equal(expected, pa.array(keys, pa.large_binary()))
        if pc.any(differs).as_py():
            first = pc.index(differs, True).as_py()
            raise CorruptRecordError(
                f"kv record {first}: its key is not the encoding of the row's primary key {self._names}"
            )
        if self._bucket is not None:
            buckets = self._bucketer.buckets(rows)
            wrong = np.flatnonzero(buckets != self._bucket)
            if len(wrong):
                if was_rescaled(self._info.descriptor) and self._bucket is not None:
                    # a client still routing by the count before the rescale: it may refresh and retry
                    raise stale_routing(self._info, self._bucket, int(buckets[wrong[0]]))
                raise CorruptRecordError(
                    f"kv record {int(wrong[0])}: the row belongs to bucket {int(buckets[wrong[0]])}, "
                    f"not to bucket {self._bucket}"
                )
