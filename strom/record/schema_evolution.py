"""Batches written under an older schema, read under the current one.

AlterTable only adds columns, so an old batch becomes a current one by matching columns by column id
and filling the added columns with nulls. The stored bytes never change: this happens when a client
reads (FetchLog, Lookup), once per old batch or row, while batches of the current schema pass
through untouched.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from strom.common.errors import CorruptRecordError
from strom.common.schema import Schema
from strom.record.arrow_batch import assemble_arrow_log_batch, decode_arrow_batch, serialize_arrow_records
from strom.record.compacted_row import null_bitset_size
from strom.record.log_batch import LogBatchHeader

Buffer = bytes | bytearray | memoryview
_SCHEMA_ID = struct.Struct("<h")


def evolve_records(records: pa.RecordBatch, old: Schema, new: Schema) -> pa.RecordBatch:
    """`records` (in `old`'s column order) as `new`'s columns, matched by column id, added ones null."""
    position = {c.column_id: i for i, c in enumerate(old.columns)}
    target = new.to_arrow_schema()
    arrays = [
        records.column(position[c.column_id])
        if c.column_id in position
        else pa.nulls(records.num_rows, target.field(i).type)
        for i, c in enumerate(new.columns)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def evolve_arrow_batch(
    buf: Buffer, pos: int, header: LogBatchHeader, old: Schema, new: Schema, new_schema_id: int
) -> bytes:
    """The ARROW batch at `pos` (written under `old`) rebuilt under `new` with schema id
    `new_schema_id`; offsets, writer, sequence, timestamp and change types are kept."""
    records, change_types = decode_arrow_batch(buf, pos, header, old.to_arrow_schema())
    evolved = evolve_records(records, old, new)
    body = serialize_arrow_records(evolved) if header.record_count else b""
    return assemble_arrow_log_batch(header, body, change_types or b"", schema_id=new_schema_id)


class RowUpgrader:
    """Stored KV values (`int16 LE schema id` + CompactedRow) of older schemas as values of the
    current one. Added columns are null and come last, so the field bytes stay as they are and only
    the null bitset grows (bits of the added fields set) and the schema id changes."""

    def __init__(self, schemas: dict[int, Schema], current_id: int) -> None:
        self.current_id = current_id
        self._prefix = _SCHEMA_ID.pack(current_id)
        count = len(schemas[current_id].columns)
        self._bitset = null_bitset_size(count)
        # schema id -> (bitset bytes of that schema, the bits of the fields it lacks)
        self._older = {
            sid: (null_bitset_size(len(s.columns)), sum(1 << i for i in range(len(s.columns), count)))
            for sid, s in schemas.items()
            if sid != current_id
        }

    def upgrade(self, value: bytes) -> bytes:
        if value[:2] == self._prefix:
            return value
        (schema_id,) = _SCHEMA_ID.unpack_from(value)
        older = self._older.get(schema_id)
        if older is None:
            raise CorruptRecordError(f"kv value has schema id {schema_id}, unknown to the table")
        size, added = older
        bits = int.from_bytes(value[2 : 2 + size], "little") | added
        return b"".join((self._prefix, bits.to_bytes(self._bitset, "little"), value[2 + size :]))
