"""One KvRecordBatch on its way to one bucket: encoded records, their target columns, delivery state.

It is the KV flavour of `strom.client.writer.write_batch.WriteBatch` and travels through the same
accumulator, sender and idempotence machinery. Records arrive already encoded (``int32 length,
varint key length, key, CompactedRow or nothing for a delete``), so building the batch is one join,
a header and a CRC. A batch only takes records with its own target columns (a partial update and a
full-row write never share a PutKv request), as in Fluss.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from strom.client.writer.write_batch import WriteBatch
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.record.crc import crc32c
from strom.record.kv_batch import KV_HEADER_SIZE, KV_MAGIC
from strom.record.varint import encode_uvarint

__all__ = ["KvBatchFormat", "KvWriteBatch", "encode_kv_record"]

# length, magic, crc, schema id, attributes, writer id, batch sequence, record count (see kv_batch)
_HEADER = struct.Struct("<ibIhbqii")
_WRITER_FIELDS = struct.Struct("<qi")
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<i")
_CRC_OFFSET = 5
_CRC_START = 9  # the schema id: first byte the CRC covers
_WRITER_ID_OFFSET = 12
# One-byte varints of key lengths, the common case.
_SHORT_LENGTHS = [bytes((n,)) for n in range(128)]


def encode_kv_record(key: bytes, value: bytes | None) -> bytes:
    """One record of a KvRecordBatch: an upsert when `value` is given, else a delete."""
    n = len(key)
    key_length = _SHORT_LENGTHS[n] if n < 128 else encode_uvarint(n)
    if value is None:
        return _LENGTH.pack(len(key_length) + n) + key_length + key
    return _LENGTH.pack(len(key_length) + n + len(value)) + key_length + key + value


@dataclass(frozen=True, slots=True)
class KvBatchFormat:
    """What every KV batch of one table is built with (the accumulator and sender read `table_id`)."""

    table_path: TablePath
    table_id: int
    schema_id: int
    # the bucket count the rows were routed by (a rescale changes it: sender.py)
    bucket_count: int | None = None

    @classmethod
    def of(cls, info: TableInfo) -> KvBatchFormat:
        return cls(info.table_path, info.table_id, info.schema_id, info.bucket_count)


class KvWriteBatch(WriteBatch):
    __slots__ = ("_chunks", "target_columns")

    def __init__(
        self,
        batch_id: int,
        path: PhysicalTablePath,
        bucket_id: int,
        fmt: KvBatchFormat,
        limit: int,
        now: float,
        target_columns: tuple[int, ...] | None,
    ) -> None:
        super().__init__(batch_id, path, bucket_id, fmt, limit, now)  # type: ignore[arg-type]
        self.target_columns = target_columns
        self._chunks: list[bytes | memoryview] = []  # memoryviews of immutable Arrow buffers

    def accepts(self, size: int, target_columns: tuple[int, ...] | None) -> bool:
        """A batch takes its first records whatever their size, later ones within the batch size."""
        if self.closed or target_columns != self.target_columns:
            return False
        return self.record_count == 0 or self.size + size <= self.limit

    def add_records(self, records: bytes | memoryview, count: int) -> None:
        self._chunks.append(records)
        self.record_count += count
        self.size += len(records)

    def add_many(self, records: Sequence[bytes]) -> None:
        self.add_records(b"".join(records), len(records))

    def payload(self) -> bytes | bytearray:
        """The KvRecordBatch bytes with the current writer id and batch sequence."""
        ids = (self.writer_id, self.batch_sequence)
        if self._payload is None:
            body = b"".join(self._chunks)
            header = bytearray(KV_HEADER_SIZE)
            _HEADER.pack_into(
                header,
                0,
                KV_HEADER_SIZE + len(body) - 4,
                KV_MAGIC,
                0,
                self.format.schema_id,
                0,
                self.writer_id,
                self.batch_sequence,
                self.record_count,
            )
            header += body
            self._chunks = []  # the bytes are all a retry needs
            self._payload = header
            _write_crc(header)
        elif ids != self._payload_ids:
            _WRITER_FIELDS.pack_into(self._payload, _WRITER_ID_OFFSET, *ids)
            _write_crc(self._payload)
        self._payload_ids = ids
        return self._payload

    def __repr__(self) -> str:
        partial = "" if self.target_columns is None else f", columns {list(self.target_columns)}"
        return (
            f"KvWriteBatch(#{self.batch_id} {self.path} bucket {self.bucket_id}, {self.record_count} records"
            f"{partial}, seq {self.batch_sequence}, attempts {self.attempts})"
        )


def _write_crc(batch: bytearray) -> None:
    _CRC.pack_into(batch, _CRC_OFFSET, crc32c(memoryview(batch)[_CRC_START:]))
