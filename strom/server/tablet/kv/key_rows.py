"""Rows made of a primary key alone: what Lookup's `insert_if_not_exists` writes for a missing key.

Fluss inserts a missing key as a partial update of the primary-key columns (the other columns null,
an auto-increment column filled by the tablet). The lookup carries only encoded keys, so the key
columns are read back from the key bytes: with the Compacted key encoding a key is the CompactedRow
encoding of its fields without the null bitset, split as is; keys in a lake format's encoding (Iceberg
and Paimon tables with the default bucket key) are decoded into values and encoded as a CompactedRow,
as Fluss's KeyRecordBatch does. Partitioned tables (whose partition columns are not in the key) are
refused with a message saying so.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from strom.common.errors import CorruptRecordError, InvalidTableError
from strom.common.table_descriptor import TableInfo
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.key_decoder import KeyDecoder, lake_key_decoder
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import build_kv_batch
from strom.server.tablet.kv.recovery import table_key_encoder
from strom.server.tablet.kv.row_merger import VALUE_PREFIX, RowFields

__all__ = ["KeyRows"]


class KeyRows:
    """Builds the KvRecordBatch that inserts key-only rows for a table's encoded keys."""

    __slots__ = (
        "_decode_key",
        "_encode_row",
        "_key_fields",
        "_key_header",
        "_pk",
        "_row_fields",
        "_schema_id",
        "_width",
        "target_columns",
    )

    def __init__(self, info: TableInfo) -> None:
        table = f"'{info.table_path}'"
        if info.is_partitioned:
            raise InvalidTableError(
                f"Lookup with insert_if_not_exists is not supported by Strom for partitioned table {table}."
            )
        schema = info.schema
        encoder = table_key_encoder(info).encoder
        # None: Compacted keys, whose field bytes are copied into the row as they are
        self._decode_key: KeyDecoder | None = None
        self._encode_row = CompactedRowEncoder(schema.row_type).encode
        if not isinstance(encoder, CompactedKeyEncoder):
            self._decode_key = lake_key_decoder(encoder)
        self._pk = schema.primary_key_indexes
        self.target_columns = list(self._pk)
        key_types = [schema.row_type[i] for i in self._pk]
        self._key_fields = RowFields(key_types)
        # a zero null bitset in front: key fields are never null
        self._key_header = bytes(VALUE_PREFIX + (len(key_types) + 7) // 8)
        self._row_fields = RowFields(schema.row_type)
        self._width = len(schema.columns)
        self._schema_id = info.schema_id

    def batch(self, keys: Sequence[bytes]) -> bytes:
        if self._decode_key is not None:
            return self._lake_batch(keys)
        records = []
        for key in keys:
            fields: list[bytes | None] = [None] * self._width
            for index, field in zip(self._pk, self._key_fields.split(self._key_header + key), strict=True):
                fields[index] = field
            records.append((key, self._row_fields.join(b"", fields)))
        return build_kv_batch(records, schema_id=self._schema_id)

    def _lake_batch(self, keys: Sequence[bytes]) -> bytes:
        assert self._decode_key is not None
        records = []
        for key in keys:
            values: list[object] = [None] * self._width
            try:
                key_values = self._decode_key(key)
            except (ValueError, IndexError, struct.error) as e:  # UnicodeDecodeError is a ValueError
                raise CorruptRecordError(f"lookup key {key.hex()} is not a key of this table: {e}") from None
            for index, value in zip(self._pk, key_values, strict=True):
                values[index] = value
            records.append((key, self._encode_row(values)))
        return build_kv_batch(records, schema_id=self._schema_id)
