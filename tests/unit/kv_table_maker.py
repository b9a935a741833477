"""A primary-key table bucket for KV tests: a real LogTablet and KvTablet in a temporary directory,
rows and keys encoded as the client encodes them, and the changelog read back from the log."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.change_type import ChangeType
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder
from strom.record.kv_batch import build_kv_batch
from strom.record.log_batch import iter_batches
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.recovery import table_key_encoder
from strom.server.tablet.kv.shared_rocksdb import SharedRocksDb
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import AppendResult, LogTablet

SCHEMA_ID = 1
LOG_CONFIG = LogConfig(segment_bytes=1024 * 1024, segment_ms=None, retention_ms=None)

# An operation for `KvTable.put`: a full row (tuple) to upsert, or ("-", key values...) to delete.
Op = tuple[Any, ...]


def make_info(
    schema: Schema,
    properties: dict[str, str] | None = None,
    *,
    bucket_keys: list[str] | None = None,
    schema_id: int = SCHEMA_ID,
) -> TableInfo:
    descriptor = TableDescriptor(
        schema, bucket_keys=bucket_keys or [], bucket_count=1, properties=dict(properties or {})
    )
    return TableInfo(TablePath("db", "t"), 7, schema_id, descriptor, 0, 0)


class KvTable:
    def __init__(
        self,
        directory: Path,
        info: TableInfo,
        log: LogTablet | None = None,
        rocksdb: SharedRocksDb | None = None,
    ) -> None:
        self.directory = directory
        self.info = info
        self.log = log or LogTablet.open(directory / "log", LOG_CONFIG)
        self.kv = KvTablet.open(directory / "kv" / "db", info, self.log, rocksdb=rocksdb)
        row_type = info.schema.row_type
        self.encode_row = CompactedRowEncoder(row_type).encode
        self.decoder = CompactedRowDecoder(row_type)
        self.key_encoder = table_key_encoder(info)
        self.pk_indexes = info.schema.primary_key_indexes
        self.arrow_schema = info.schema.to_arrow_schema()

    # ---- writing

    def key(self, *key_values: Any) -> bytes:
        return self.key_encoder.encode(list(key_values))

    def batch(self, ops: Sequence[Op], *, writer_id: int = -1, batch_sequence: int = -1) -> bytes:
        records: list[tuple[bytes, bytes | None]] = []
        for op in ops:
            if op and op[0] == "-":
                records.append((self.key(*op[1:]), None))
            else:
                records.append((self.key_encoder.encode_key(op), self.encode_row(op)))
        return build_kv_batch(
            records, schema_id=self.info.schema_id, writer_id=writer_id, batch_sequence=batch_sequence
        )

    def put_bytes(
        self, batch: bytes, target_columns: Sequence[int] | None = None, *, commit: bool = True
    ) -> AppendResult:
        # commit: the sole-replica path (apply at once); otherwise staged in the pre-write buffer
        appended = self.kv.put_as_leader(batch, target_columns, commit=commit)
        if commit:
            self.commit()
        return appended

    def commit(self) -> None:
        self.log.update_high_watermark(self.kv.flush(self.log.log_end_offset))

    def put(
        self,
        ops: Sequence[Op],
        target_columns: Sequence[int] | None = None,
        *,
        writer_id: int = -1,
        batch_sequence: int = -1,
        commit: bool = True,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """Apply one PutKv and return the changelog it appended, as (change, row) pairs."""
        start = self.log.log_end_offset
        self.put_bytes(
            self.batch(ops, writer_id=writer_id, batch_sequence=batch_sequence), target_columns, commit=commit
        )
        return self.changelog(start)

    # ---- reading

    def changelog(self, start: int = 0) -> list[tuple[str, tuple[Any, ...]]]:
        out: list[tuple[str, tuple[Any, ...]]] = []
        offset = start
        end = self.log.log_end_offset
        while offset < end:
            records = self.log.read(offset, 1 << 20).records
            for pos, header in iter_batches(records):
                batch, types = decode_arrow_batch(records, pos, header, self.arrow_schema)
                rows = list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
                for i, row in enumerate(rows):
                    if header.base_offset + i >= offset:
                        assert types is not None
                        out.append((ChangeType(types[i]).short_string, row))
                offset = header.next_offset
        return out

    def batches(self, start: int = 0) -> list[tuple[int, int]]:
        """(base offset, record count) of each changelog batch from `start`."""
        out = []
        records = self.log.read(start, 1 << 24).records
        for _, header in iter_batches(records):
            out.append((header.base_offset, header.record_count))
        return out

    def value(self, row: Sequence[Any]) -> bytes:
        """The stored value of a row: int16 LE schema id + CompactedRow."""
        return self.info.schema_id.to_bytes(2, "little") + self.encode_row(row)

    def lookup(self, *key_values: Any) -> tuple[Any, ...] | None:
        value = self.kv.multi_get([self.key(*key_values)])[0]
        return None if value is None else self.decoder.decode(value[2:])

    def state(self, kv: KvTablet | None = None) -> dict[bytes, bytes]:
        return dict((kv or self.kv).items())

    def rows(self, kv: KvTablet | None = None) -> list[tuple[Any, ...]]:
        return [self.decoder.decode(v[2:]) for v in self.state(kv).values()]
