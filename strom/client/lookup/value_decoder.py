"""Stored values of primary-key tables (``int16 LE schema id`` + CompactedRow) decoded into rows of the
table's schema, whichever schema each value was written with.

Lookups, prefix lookups and KV snapshots all hand out such values. A value written under an older
schema is decoded with that schema (fetched once with GetTableSchema) and mapped onto the reader's
schema by column id: columns added since then are null. Arrow output is built column-wise, one
decode pass and one `pa.array` per column for every group of values sharing a schema id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from strom.common.errors import CorruptRecordError
from strom.common.schema import Schema
from strom.record.compacted_row import CompactedRowDecoder
from strom.record.value_batch import split_value

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["ValueDecoder"]

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class _SchemaCodec:
    decoder: CompactedRowDecoder
    arrow_schema: pa.Schema
    # For each column of the reader's schema, its position in this schema (-1: not there, null).
    positions: tuple[int, ...]


class ValueDecoder:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.schema = table.schema
        self.schema_id = table.schema_id
        self.arrow_schema = self.schema.to_arrow_schema()
        self.names = tuple(self.schema.column_names)
        self._codecs: dict[int, _SchemaCodec] = {self.schema_id: self._codec(self.schema)}
        # values written with the reader's own schema (nearly all): straight into a dict
        self._own_prefix = self.schema_id.to_bytes(2, "little", signed=True)
        self._own_dict = self._codecs[self.schema_id].decoder.dict_decoder(self.names)

    def _codec(self, schema: Schema) -> _SchemaCodec:
        by_id = {c.column_id: i for i, c in enumerate(schema.columns)}
        by_name = {c.name: i for i, c in enumerate(schema.columns)}
        positions = tuple(
            by_id.get(c.column_id, by_name.get(c.name, -1)) if c.column_id >= 0 else by_name.get(c.name, -1)
            for c in self.schema.columns
        )
        return _SchemaCodec(CompactedRowDecoder(schema.row_type), schema.to_arrow_schema(), positions)

    # ------------------------------------------------------------------ schemas

    def knows(self, value: Buffer) -> bool:
        """Whether the schema the value was written with is known (ensure_schemas needs no call)."""
        return split_value(value)[0] in self._codecs

    async def ensure_schemas(self, values: Sequence[Buffer]) -> None:
        """Fetch the schemas of values written with a schema this decoder does not know yet."""
        missing = {split_value(v)[0] for v in values} - self._codecs.keys()
        for schema_id in sorted(missing):
            if schema_id < 0:
                raise CorruptRecordError(f"a stored value has the invalid schema id {schema_id}")
            admin = self.table.connection.get_admin()
            info = await admin.get_table_schema(self.table.path, schema_id)
            self._codecs[schema_id] = self._codec(info.schema)

    def _codec_of(self, schema_id: int) -> _SchemaCodec:
        codec = self._codecs.get(schema_id)
        if codec is None:
            raise CorruptRecordError(
                f"no schema {schema_id} known for table '{self.table.path}' (call ensure_schemas first)"
            )
        return codec

    # ------------------------------------------------------------------ Python rows

    def own_dict(self, value: bytes) -> dict[str, Any] | None:
        """`to_dict` of a value written with the reader's schema; None for any other schema."""
        if value[:2] != self._own_prefix:
            return None
        return self._own_dict(value[2:])

    def to_dict(self, value: Buffer) -> dict[str, Any]:
        """One value as a dict by column name (Python values, as pyarrow's to_pylist gives them)."""
        if isinstance(value, bytes) and (own := self.own_dict(value)) is not None:
            return own
        schema_id, row = split_value(memoryview(value))
        codec = self._codec_of(schema_id)
        decoded = codec.decoder.decode(row)
        if schema_id == self.schema_id:
            return dict(zip(self.names, decoded, strict=True))
        return {n: (decoded[p] if p >= 0 else None) for n, p in zip(self.names, codec.positions, strict=True)}

    # ------------------------------------------------------------------ Arrow

    def to_arrow(self, values: Sequence[Buffer]) -> pa.RecordBatch:
        """Values as one RecordBatch of the table's Arrow schema, in the order given."""
        if not values:
            return _empty(self.arrow_schema)
        views = [memoryview(v) for v in values]
        ids = np.fromiter((split_value(v)[0] for v in views), dtype=np.int32, count=len(views))
        if (ids == self.schema_id).all():
            return self._decode_group(self.schema_id, [v[2:] for v in views])
        parts: list[pa.RecordBatch] = []
        order: list[np.ndarray] = []
        for schema_id in np.unique(ids).tolist():
            rows = np.flatnonzero(ids == schema_id)
            parts.append(self._decode_group(int(schema_id), [views[i][2:] for i in rows.tolist()]))
            order.append(rows)
        combined = pa.Table.from_batches(parts, schema=self.arrow_schema).combine_chunks()
        # Back to the input order: position j of `combined` holds input row positions[j].
        positions = np.concatenate(order)
        inverse = np.empty_like(positions)
        inverse[positions] = np.arange(len(positions))
        return combined.take(pa.array(inverse)).to_batches()[0]

    def _decode_group(self, schema_id: int, rows: list[memoryview]) -> pa.RecordBatch:
        codec = self._codec_of(schema_id)
        decoded = codec.decoder.to_arrow(rows, codec.arrow_schema)
        if schema_id == self.schema_id:
            return decoded
        arrays = []
        for field, p in zip(self.arrow_schema, codec.positions, strict=True):
            if p < 0:
                arrays.append(pa.nulls(len(rows), field.type))
            else:
                column = decoded.column(p)
                arrays.append(column if column.type == field.type else column.cast(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
