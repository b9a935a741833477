"""Kafka record batches <-> the Arrow log batches a topic's table stores.

A topic is a log table of a fixed schema (`TOPIC_SCHEMA`): key, value, headers, timestamp. Produce
turns each Kafka batch (magic 2; its CRC checked; any codec, decompressed by aiokafka's C record
reader) into one Fluss ARROW batch with the same number of records, so Fluss offsets are the Kafka
offsets and pyfluss, Spark and lake tiering read a topic as an ordinary table. Fetch turns the stored
Arrow batches back into Kafka batches (aiokafka's C record builder), one Kafka batch per Fluss batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strom.common.errors import CorruptRecordError
from strom.common.schema import Column, Schema
from strom.common.types import ARRAY, BYTES, ROW, STRING, TIMESTAMP_LTZ, DataField
from strom.record.arrow_batch import build_arrow_log_batch, decode_arrow_batch
from strom.record.log_batch import iter_batches

TOPIC_SCHEMA = Schema(
    [
        Column("key", BYTES()),
        Column("value", BYTES()),
        Column("headers", ARRAY(ROW([DataField("key", STRING()), DataField("value", BYTES())]))),
        Column("timestamp", TIMESTAMP_LTZ(3)),
    ]
)

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length (what follows it)
_MAGIC_POS = 16
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_POS = 21
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_BASE_OFFSET = struct.Struct(">q")
_MAX_BATCH = 1 << 31


def is_topic_schema(schema: Schema) -> bool:
    """Whether a table has the topic schema (names and types; nullability and ids aside)."""
    if len(schema.columns) != len(TOPIC_SCHEMA.columns):
        return False
    return all(
        mine.name == theirs.name and _shape(mine.data_type) == _shape(theirs.data_type)
        for mine, theirs in zip(schema.columns, TOPIC_SCHEMA.columns, strict=True)
    )


def _shape(data_type: object) -> str:
    return str(data_type).replace(" NOT NULL", "")


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """One Kafka batch of a produce request: what idempotence needs, and the records as Arrow."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    records: pa.RecordBatch


def split_batches(data: bytes | memoryview) -> Iterator[memoryview]:
    """The Kafka record batches in a produce request's `records`, each as a view. A truncated or
    oversized batch is corrupt."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < _BATCH_HEAD.size + 5:
            raise CorruptRecordError(f"{len(view) - pos} trailing bytes are too few for a record batch")
        _, length = _BATCH_HEAD.unpack_from(view, pos)
        end = pos + _BATCH_HEAD.size + length
        if length < 49 or end > len(view):
            raise CorruptRecordError(
                f"record batch at byte {pos} claims {length} bytes; {len(view) - pos - 12} remain"
            )
        yield view[pos:end]
        pos = end


def decode_producer_batch(batch: memoryview, arrow_schema: pa.Schema) -> ProducerBatch:
    """Check one Kafka batch and decode its records. Raises CorruptRecordError (CRC, magic, record
    framing) or UnsupportedBatch (transactional or control batches)."""
    magic = batch[_MAGIC_POS]
    if magic != 2:
        raise UnsupportedBatch(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) batches are stored")
    (attributes,) = _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_POS)
    if attributes & (_TRANSACTIONAL | _CONTROL):
        raise UnsupportedBatch("transactional and control batches are not supported")
    reader = DefaultRecordBatch(bytes(batch))
    if not reader.validate_crc():
        raise CorruptRecordError("record batch CRC-32C does not match its contents")
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    header_offsets = [0]
    header_keys: list[str] = []
    header_values: list[bytes | None] = []
    timestamps: list[int] = []
    try:
        for record in reader:
            keys.append(record.key)
            values.append(record.value)
            if record.headers:
                for key, value in record.headers:
                    header_keys.append(key)
                    header_values.append(value)
            header_offsets.append(len(header_keys))
            timestamps.append(record.timestamp)
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"record batch does not decode: {e}") from e
    expected = reader.last_offset_delta + 1
    if len(keys) != expected:
        raise CorruptRecordError(f"record batch holds {len(keys)} records, its header says {expected}")
    records = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, arrow_schema.field(0).type),
            pa.array(values, arrow_schema.field(1).type),
            _headers_array(header_offsets, header_keys, header_values, arrow_schema.field(2).type),
            pa.array(timestamps, pa.int64()).cast(arrow_schema.field(3).type),
        ],
        schema=arrow_schema,
    )
    return ProducerBatch(reader.producer_id, reader.producer_epoch, reader.base_sequence, len(keys), records)


class UnsupportedBatch(Exception):
    """A well-formed batch of a kind this listener does not store."""


def to_fluss_batch(batch: ProducerBatch, schema_id: int) -> bytes:
    return build_arrow_log_batch(batch.records, schema_id=schema_id)


def to_kafka_batches(fluss_records: bytes | memoryview, arrow_schema: pa.Schema) -> bytes:
    """The stored Fluss batches of a fetch answer as Kafka batches (one each, offsets kept)."""
    out: list[bytes] = []
    for pos, header in iter_batches(fluss_records):
        if header.record_count == 0:
            continue
        records, _ = decode_arrow_batch(fluss_records, pos, header, arrow_schema)
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, _MAX_BATCH)
        keys = _binary_values(records.column(0))
        values = _binary_values(records.column(1))
        headers = _headers(records.column(2))
        timestamps = records.column(3).cast(pa.int64()).to_pylist()
        for i in range(records.num_rows):
            builder.append(i, timestamps[i], keys[i], values[i], headers[i])
        data = builder.build()
        _BASE_OFFSET.pack_into(data, 0, header.base_offset)  # outside the CRC, as a broker sets it
        out.append(bytes(data))
    return b"".join(out)


def _headers_array(
    offsets: list[int], keys: list[str], values: list[bytes | None], list_type: pa.ListType
) -> pa.Array:
    """The headers column built from flat lists (a list of dicts per record is several times slower)."""
    entry_type = list_type.value_type
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, entry_type.field(0).type), pa.array(values, entry_type.field(1).type)],
        fields=[entry_type.field(0), entry_type.field(1)],
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=list_type)


def _binary_values(column: pa.Array) -> list[bytes | None]:
    """The values of a binary column as bytes, cut from its buffers (`to_pylist` costs several
    microseconds a value; slicing costs a fraction of one)."""
    if len(column) == 0:
        return []
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[column.offset : column.offset + len(column) + 1]
    data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
    bounds = offsets.tolist()
    out: list[bytes | None] = [bytes(data[bounds[i] : bounds[i + 1]]) for i in range(len(column))]
    if column.null_count:
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
            out[i] = None
    return out


def _headers(column: pa.Array) -> list[list[tuple[str, bytes | None]]]:
    """Each record's headers as (key, value) pairs, from the list column's offsets."""
    count = len(column)
    if count == 0:
        return []
    if column.null_count == count:
        return [[] for _ in range(count)]
    bounds = column.offsets.to_pylist()
    if bounds[0] == bounds[-1]:
        return [[] for _ in range(count)]
    entries = column.values.slice(bounds[0], bounds[-1] - bounds[0])
    names = entries.field(0).to_pylist()  # headers are few; their keys are strings
    contents = _binary_values(entries.field(1))
    start = bounds[0]
    return [
        list(
            zip(
                names[bounds[i] - start : bounds[i + 1] - start],
                contents[bounds[i] - start : bounds[i + 1] - start],
                strict=True,
            )
        )
        for i in range(count)
    ]
