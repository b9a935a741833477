"""Rows made of a primary key alone: what Lookup's `insert_if_not_exists` writes for a missing key.

Fluss inserts a missing key as a partial update of the primary-key columns (the other columns null,
an auto-increment column filled by the tablet). The lookup carries only encoded keys, so the key
columns are read back from the key bytes: with the Compacted key encoding a key is the CompactedRow
encoding of its fields without the null bitset. Keys in a lake format's encoding (Iceberg, Paimon
tables with the default bucket key) and partitioned tables (whose partition columns are not in the
key) are refused with a message saying so.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.common.errors import InvalidTableError
from strom.common.table_descriptor import TableInfo
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import build_kv_batch
from strom.server.tablet.kv.recovery import table_key_encoder
from strom.server.tablet.kv.row_merger import VALUE_PREFIX, RowFields

__all__ = ["KeyRows"]


class KeyRows:
    """Builds the KvRecordBatch that inserts key-only rows for a table's encoded keys."""

    __slots__ = ("_key_fields", "_key_header", "_pk", "_row_fields", "_schema_id", "_width", "target_columns")

    def __init__(self, info: TableInfo) -> None:
        table = f"'{info.table_path}'"
        if info.is_partitioned:
            raise InvalidTableError(
                f"Lookup with insert_if_not_exists is not supported by Strom for partitioned table {table}."
            )
        if not isinstance(table_key_encoder(info).encoder, CompactedKeyEncoder):
            raise InvalidTableError(
                f"Lookup with insert_if_not_exists is not supported by Strom for table {table}: its keys use "
                f"the {info.datalake_format} lake encoding, which Strom cannot decode back into key columns."
            )
        schema = info.schema
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
        records = []
        for key in keys:
            fields: list[bytes | None] = [None] * self._width
            for index, field in zip(self._pk, self._key_fields.split(self._key_header + key), strict=True):
                fields[index] = field
            records.append((key, self._row_fields.join(b"", fields)))
        return build_kv_batch(records, schema_id=self._schema_id)
