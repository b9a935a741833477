"""Batches written under an older schema, read under the current one.

AlterTable only adds columns, so an old batch becomes a current one by matching columns by column id
and filling the added columns with nulls. The stored bytes never change: this happens when a client
reads (FetchLog, Lookup), once per old batch or row, while batches of the current schema pass
through untouched.
"""

from __future__ import annotations

import pyarrow as pa

from strom.common.schema import Schema
from strom.record.arrow_batch import assemble_arrow_log_batch, decode_arrow_batch, serialize_arrow_records
from strom.record.log_batch import LogBatchHeader

Buffer = bytes | bytearray | memoryview


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
