"""One batch on its way to one bucket: the Arrow slices it holds, and its delivery state.

Appended data is kept as zero-copy Arrow slices (rows arrive already converted to Arrow by the
append writer); nothing is serialized until the sender drains the batch. The LogRecordBatch bytes
are then built once (one Arrow IPC message, compressed as the table says) and kept for retries. A
retry whose writer id or batch sequence changed only gets its header patched and its CRC recomputed.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import pyarrow as pa

from strom.common import config as cfg
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.record.arrow_batch import build_arrow_log_batch
from strom.record.batch_statistics import statistics_columns
from strom.record.log_batch import NO_BATCH_SEQUENCE, NO_WRITER_ID, write_crc

__all__ = ["BatchFormat", "WriteBatch"]

_WRITER_FIELDS = struct.Struct("<qi")  # writer id, batch sequence
_WRITER_ID_OFFSET = 32  # V0 and V1 headers


@dataclass(frozen=True, slots=True)
class BatchFormat:
    """What every batch of one table is built with."""

    table_path: TablePath
    table_id: int
    schema_id: int
    arrow_schema: pa.Schema
    compression: str
    zstd_level: int
    # schema positions whose min/max/null counts each batch carries (V1 batches, Fluss 1.0); None:
    # the table sets no `table.statistics.columns`, batches are V0
    statistics_columns: tuple[int, ...] | None = None
    # the bucket count the rows were routed by (a rescale changes it: sender.py)
    bucket_count: int | None = None

    @classmethod
    def of(cls, info: TableInfo) -> BatchFormat:
        arrow_schema = info.schema.to_arrow_schema()
        option = info.properties.get(cfg.TABLE_STATISTICS_COLUMNS)
        return cls(
            info.table_path,
            info.table_id,
            info.schema_id,
            arrow_schema,
            str(info.arrow_compression_type),
            info.arrow_compression_zstd_level,
            None if option is None else statistics_columns(option, arrow_schema),
            info.bucket_count,
        )


class WriteBatch:
    __slots__ = (
        "_parts",
        "_payload",
        "_payload_ids",
        "attempts",
        "batch_id",
        "batch_sequence",
        "bucket_id",
        "closed",
        "created_at",
        "format",
        "future",
        "limit",
        "path",
        "record_count",
        "retry_at",
        "size",
        "table_bucket",
        "writer_id",
    )

    def __init__(
        self,
        batch_id: int,
        path: PhysicalTablePath,
        bucket_id: int,
        fmt: BatchFormat,
        limit: int,
        now: float,
    ) -> None:
        self.batch_id = batch_id
        self.path = path
        self.bucket_id = bucket_id
        self.format = fmt
        self.limit = limit  # client.writer.batch-size
        self.created_at = now
        self._parts: list[pa.RecordBatch] = []
        self.record_count = 0
        self.size = 0  # estimated uncompressed Arrow bytes
        self.closed = False
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Delivery state, set by the accumulator and the sender.
        self.table_bucket: TableBucket | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.writer_id = NO_WRITER_ID
        self.batch_sequence = NO_BATCH_SEQUENCE
        self._payload: bytearray | None = None
        self._payload_ids = (NO_WRITER_ID, NO_BATCH_SEQUENCE)

    # ------------------------------------------------------------------ filling

    def has_room(self, size: int) -> bool:
        """A batch always takes its first record, later ones only within the batch size."""
        return not self.closed and (self.record_count == 0 or self.size + size <= self.limit)

    @property
    def is_full(self) -> bool:
        return self.closed or self.size >= self.limit

    def add_arrow(self, batch: pa.RecordBatch, size: int) -> None:
        self._parts.append(batch)
        self.record_count += batch.num_rows
        self.size += size

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ building

    def records(self) -> pa.RecordBatch:
        """All appended rows as one RecordBatch of the table schema, in append order."""
        if len(self._parts) == 1:
            return self._parts[0]
        return pa.concat_batches(self._parts)

    def payload(self) -> bytes | bytearray:
        """The LogRecordBatch bytes with the current writer id and batch sequence."""
        ids = (self.writer_id, self.batch_sequence)
        if self._payload is None:
            self._payload = bytearray(
                build_arrow_log_batch(
                    self.records(),
                    schema_id=self.format.schema_id,
                    writer_id=self.writer_id,
                    batch_sequence=self.batch_sequence,
                    compression=self.format.compression,
                    zstd_level=self.format.zstd_level,
                    statistics_columns=self.format.statistics_columns,
                )
            )
            self._parts = []  # the bytes are all a retry needs
        elif ids != self._payload_ids:
            _WRITER_FIELDS.pack_into(self._payload, _WRITER_ID_OFFSET, *ids)
            write_crc(self._payload, 0, len(self._payload))
        self._payload_ids = ids
        return self._payload

    @property
    def payload_size(self) -> int:
        return len(self._payload) if self._payload is not None else self.size

    # ------------------------------------------------------------------ completion

    @property
    def done(self) -> bool:
        return self.future.done()

    def complete(self, base_offset: int) -> bool:
        if self.future.done():
            return False
        self.future.set_result(base_offset)
        return True

    def fail(self, error: BaseException) -> bool:
        if self.future.done():
            return False
        self.future.set_exception(error)
        return True

    def __repr__(self) -> str:
        return (
            f"WriteBatch(#{self.batch_id} {self.path} bucket {self.bucket_id}, {self.record_count} rows, "
            f"seq {self.batch_sequence}, attempts {self.attempts})"
        )
