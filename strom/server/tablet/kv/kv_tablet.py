"""The KV tablet of a primary-key table bucket: the current row of every key, in RocksDB.

Keys are the primary-key bytes exactly as the client encodes them (the KvRecordBatch key); values are
`int16 LE schema id` + CompactedRow, so Lookup, PrefixLookup and LimitScan return stored bytes as is.

Write path (all synchronous; the caller serializes PutKvs of one bucket):
1. `prepare_put` parses the KvRecordBatch, reads the old rows (pre-write buffer first, then one RocksDB
   multi-get), merges each record (row_merger.py) and derives the changelog: +I for a new key, -U old
   and +U new for an update (only +U with `table.changelog.image` WAL), -D old for a delete of an
   existing key, nothing for a delete of a missing key or a merge that changes nothing. The changelog
   becomes ONE ARROW log batch built column-wise, stamped with the table's schema id and the KV batch's
   writer id and batch sequence, so the log's idempotence check recognises a retried PutKv.
2. The caller appends the changelog to the log tablet (`put_as_leader` does 1-3 in one go).
3. `stage` puts the row writes into the pre-write buffer at their log offsets, so the next PutKv merges
   against them. A duplicate (a retried batch the log already holds) stages nothing.
4. Once the changelog is committed (high watermark past it), `flush` writes the buffered writes below
   the watermark to RocksDB in one WriteBatch. Raise the high watermark only to `flushed_offset`, so a
   client that sees a change in the log can also look it up.
A sole replica commits on append: `apply` (or `put_as_leader(..., commit=True)`) does 3 and 4 at once
and skips the buffer when it is empty.

An all-no-op batch (deletes of missing keys, FIRST_ROW duplicates, versioned losers) from an idempotent
writer still appends an EMPTY batch (no rows, one offset, as Fluss does since its PR #312), because the
writer's next batch sequence must follow this one. Without a writer id nothing is appended. Readers of
the changelog (scanners, tiering, recovery) must treat such batches as advancing the offset by one
(Fluss issue #3892: a tiering round over only empty batches must still move the bucket's offset).

RocksDB runs without its own WAL: the changelog is the write-ahead log, and a tablet is always rebuilt
from a snapshot plus the changelog after it (recovery.py).

A tablet with nothing to restore (its bucket's log is empty) may start before its database exists
(`KvTablet.pending`): its committed rows live in a `PendingStore` until the server has created the
database and `attach_db` moved them there (pending_store.py says why).
"""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, overload

import pyarrow as pa
from rocksdict import Checkpoint, Rdict, ReadOptions, WriteBatch, WriteOptions

from strom.common.config import ChangelogImage, DeleteBehavior
from strom.common.errors import (
    CorruptRecordError,
    DeletionDisabledError,
    KvStorageError,
    SchemaNotExistError,
)
from strom.common.schema import Schema
from strom.common.table_descriptor import TableInfo
from strom.record.arrow_batch import build_arrow_log_batch
from strom.record.change_type import ChangeType
from strom.record.kv_batch import KvRecordBatch
from strom.record.log_batch import NO_WRITER_ID
from strom.record.schema_evolution import RowUpgrader
from strom.server.tablet.kv.auto_increment import auto_increment_column
from strom.server.tablet.kv.pending_store import PendingBudget, PendingStore
from strom.server.tablet.kv.pre_write_buffer import PreWriteBuffer
from strom.server.tablet.kv.row_merger import DefaultRowMerger, RowMerger, create_row_merger
from strom.server.tablet.kv.shared_rocksdb import SharedRocksDb
from strom.server.tablet.kv.table_codecs import table_codecs
from strom.server.tablet.log.log_tablet import AppendResult, LogTablet

__all__ = ["KvScan", "KvTablet", "PreparedPut", "TabletState"]

Buffer = bytes | bytearray | memoryview

_SCHEMA_ID = struct.Struct("<h")
_INSERT = int(ChangeType.INSERT)
_UPDATE_BEFORE = int(ChangeType.UPDATE_BEFORE)
_UPDATE_AFTER = int(ChangeType.UPDATE_AFTER)
_DELETE = int(ChangeType.DELETE)


@dataclass(frozen=True, slots=True)
class PreparedPut:
    """A merged PutKv: the changelog to append and the row writes to stage once it is appended."""

    changelog: bytes | None  # one ARROW log batch (maybe empty); None when nothing is to be appended
    change_types: bytes  # one ChangeType per changelog row
    # (key, stored value or None for a delete, index of the changelog row that made it, row-count delta)
    writes: list[tuple[bytes, bytes | None, int, int]]
    base_offset: int  # the log end offset the merge was computed against
    record_count: int  # records in the KV batch


@dataclass(frozen=True, slots=True)
class TabletState:
    """What a snapshot of the tablet covers: every change below `log_offset` is in RocksDB."""

    log_offset: int
    row_count: int | None  # None when not tracked (changelog image WAL)


class KvScan:
    """A consistent read of a tablet's rows as of one moment (ScanKv): a RocksDB snapshot and an
    iterator over it, or a copy of the pending rows. `log_offset` is the changelog offset the rows
    cover (every change below it, none at or above it). Read it with `KvTablet.read_scan`."""

    __slots__ = ("_iterator", "_snapshot", "log_offset", "released", "upgrader")

    def __init__(
        self,
        log_offset: int,
        iterator: Iterator[bytes],
        snapshot: object | None,
        upgrader: RowUpgrader | None,
    ) -> None:
        self.log_offset = log_offset
        self._iterator: Iterator[bytes] | None = iterator
        self._snapshot = snapshot  # kept alive while the iterator reads it
        self.upgrader = upgrader
        self.released = False

    def release(self) -> None:
        """Drop the iterator and the snapshot (before the database closes)."""
        self._iterator = None
        self._snapshot = None
        self.released = True


def _prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with `prefix` (None: no such key)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


class KvTablet:
    """RocksDB state of one primary-key bucket plus its pre-write buffer. Use `KvTablet.open`.

    Not thread-safe: the replica's owner (the server's event loop) serializes all calls. The one
    exception is `flush_memtable`, made for an executor thread while the loop goes on.
    """

    def __init__(
        self,
        directory: Path,
        db: Rdict | PendingStore,
        table_info: TableInfo,
        log: LogTablet,
        flushed_offset: int,
        row_count: int | None,
        bucket: int | None = None,
    ) -> None:
        self.directory = directory
        self.table_info = table_info
        self.log = log
        self.buffer = PreWriteBuffer()
        # exactly one of the two: the database, or the rows waiting for it
        self._db: Rdict | None = db if isinstance(db, Rdict) else None
        self._pending: PendingStore | None = db if isinstance(db, PendingStore) else None
        self._flushed_offset = flushed_offset
        self._row_count = row_count
        self._wal_image = table_info.changelog_image is ChangelogImage.WAL
        self._key_check = table_codecs(table_info).key_check.for_bucket(bucket)
        self._compression = table_info.arrow_compression_type.value
        self._zstd_level = table_info.arrow_compression_zstd_level
        # every schema of the table by id (AlterTable adds columns; rows keep the id they were
        # written with and are upgraded when read)
        self.schemas: dict[int, Schema] = {table_info.schema_id: table_info.schema}
        self._use_schema(table_info)
        self._failure: BaseException | None = None
        self._closed = False
        # held by `flush_memtable` and `read_scan` on an executor thread, so `close` never closes
        # RocksDB under them
        self._flush_guard = threading.Lock()
        # open ScanKv reads, released (their snapshots dropped) before the database closes
        self._scans: set[KvScan] = set()

    def _use_schema(self, table_info: TableInfo) -> None:
        self.table_info = table_info
        self.schemas[table_info.schema_id] = table_info.schema
        self._schema_id = table_info.schema_id
        self._schema_prefix = _SCHEMA_ID.pack(table_info.schema_id)
        codecs = table_codecs(table_info)  # compiled once per table, shared by its tablets
        self._arrow_schema = codecs.arrow_schema
        self._decoder = codecs.decoder
        self._empty_records = codecs.empty_records
        self._mergers: dict[tuple[int, ...], RowMerger] = {}
        self._upgrader = RowUpgrader(self.schemas, self._schema_id) if len(self.schemas) > 1 else None
        # New keys get their auto-increment id here; the caller reserves the ids (auto_increment.py).
        self.auto_increment = auto_increment_column(table_info)

    def use_schemas(self, schemas: dict[int, Schema]) -> None:
        """Learn the table's older schemas (the replica's history), so their rows can be read."""
        self.schemas.update(schemas)
        self._use_schema(self.table_info)

    def table_altered(self, table_info: TableInfo) -> None:
        """AlterTable: writes and reads from now on are in the new schema (and, after a rescale, are
        checked against the new bucket count)."""
        self._use_schema(table_info)
        self._key_check = table_codecs(table_info).key_check.for_bucket(self._key_check.bucket)

    @overload
    def _upgrade(self, values: list[bytes]) -> list[bytes]: ...
    @overload
    def _upgrade(self, values: list[bytes | None]) -> list[bytes | None]: ...

    def _upgrade(self, values: list[Any]) -> list[Any]:
        upgrader = self._upgrader
        if upgrader is None:
            return values
        return [None if v is None else upgrader.upgrade(v) for v in values]

    @classmethod
    def open(
        cls,
        directory: Path,
        table_info: TableInfo,
        log: LogTablet,
        *,
        flushed_offset: int = 0,
        row_count: int | None = 0,
        rocksdb: SharedRocksDb | None = None,
        bucket: int | None = None,
    ) -> KvTablet:
        """Open (creating when absent) the RocksDB database in `directory`. Blocking (tens of ms:
        RocksDB syncs several files to create a database): servers call it in an executor.

        `flushed_offset` and `row_count` describe what the database already holds (a restored
        snapshot); a fresh database holds nothing (0, 0). Row counts are not kept with a WAL image.
        `rocksdb` holds the tablet server's shared block cache and write-buffer budget (without it the
        tablet gets resources of its own). With `bucket`, a row whose bucket key hashes elsewhere is
        refused (`KeyCheck`).
        """
        directory = Path(directory)
        db = cls.create_db(directory, rocksdb)
        if table_info.changelog_image is ChangelogImage.WAL:
            row_count = None
        return cls(directory, db, table_info, log, flushed_offset, row_count, bucket)

    @classmethod
    def pending(
        cls,
        directory: Path,
        table_info: TableInfo,
        log: LogTablet,
        budget: PendingBudget,
        *,
        bucket: int | None = None,
    ) -> KvTablet:
        """An empty tablet whose database does not exist yet (its log must be empty): it serves at
        once from memory; create the database with `create_db` (in an executor) and hand it to
        `attach_db`. Touches no file."""
        row_count = None if table_info.changelog_image is ChangelogImage.WAL else 0
        return cls(Path(directory), PendingStore(budget), table_info, log, 0, row_count, bucket)

    @staticmethod
    def create_db(directory: Path, rocksdb: SharedRocksDb | None = None) -> Rdict:
        """Open (creating when absent) the RocksDB database in `directory`, without RocksDB's WAL.
        Blocking, tens of ms."""
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = Rdict(str(directory), (rocksdb or SharedRocksDb()).options())
            write_options = WriteOptions()
            # the changelog is the write-ahead log; rocksdict's stub declares this property a method
            write_options.disable_wal = True  # type: ignore[method-assign, assignment]
            db.set_write_options(write_options)
        except Exception as e:
            raise KvStorageError(f"cannot open the kv store in {directory}: {e}") from e
        return db

    @property
    def is_pending(self) -> bool:
        """The database is not created yet: rows are held in memory (`attach_db` ends that)."""
        return self._pending is not None

    def pending_bytes(self) -> int:
        return 0 if self._pending is None else self._pending.nbytes

    def attach_db(self, db: Rdict) -> None:
        """Move the pending rows into the newly created `db` (one WriteBatch) and serve from it.
        On the tablet's owner thread. A closed tablet refuses (the caller closes `db`)."""
        pending = self._pending
        if pending is None:
            raise KvStorageError(f"the kv tablet in {self.directory} already has its database")
        with self._flush_guard:
            self._check_usable()
            self._db = db
            self._pending = None
            try:
                self._write_pairs(pending.items())
            finally:
                pending.release()

    def _write_pairs(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        if self._pending is not None:
            self._pending.write(writes)
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._write(batch)

    # ---- state -------------------------------------------------------------------------------

    @property
    def flushed_offset(self) -> int:
        """Every change of the changelog below this offset is in RocksDB."""
        return self._flushed_offset

    @property
    def row_count(self) -> int | None:
        """Rows in RocksDB (None with a WAL changelog image, where it is not tracked)."""
        return self._row_count

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        """A RocksDB write failed: the tablet must be rebuilt (reopened from snapshot + changelog)."""
        return self._failure is not None

    def state(self) -> TabletState:
        return TabletState(self._flushed_offset, self._row_count)

    def mark_failed(self, error: BaseException) -> None:
        """The tablet cannot go on (its database could not be created): rebuild it."""
        self._failure = error

    def _check_usable(self) -> None:
        if self._closed:
            raise KvStorageError(f"the kv tablet in {self.directory} is closed")
        if self._failure is not None:
            raise KvStorageError(
                f"the kv tablet in {self.directory} failed and must be rebuilt: {self._failure}"
            )

    # ---- the write path ----------------------------------------------------------------------

    def _merger(self, target_columns: Sequence[int] | None) -> RowMerger:
        key = tuple(target_columns) if target_columns else ()
        merger = self._mergers.get(key)
        if merger is None:
            merger = self._mergers[key] = create_row_merger(self.table_info, target_columns)
        return merger

    def prepare_put(self, kv_batch: Buffer, target_columns: Sequence[int] | None = None) -> PreparedPut:
        """Merge a KvRecordBatch against the current rows; changes nothing (see the module doc).

        Raises CorruptRecordError (malformed batch, bad CRC), SchemaNotExistError (unknown schema
        id), InvalidTargetColumnError, DeletionDisabledError, InvalidTableError (unsupported merge
        engine) and KvStorageError (RocksDB read failure).
        """
        self._check_usable()
        batch = KvRecordBatch.parse(kv_batch)
        if not batch.crc_is_valid():
            raise CorruptRecordError(f"kv record batch fails its CRC check (stored {batch.crc})")
        records = batch.records
        if batch.schema_id != self._schema_id:
            if batch.schema_id not in self.schemas or self._upgrader is None:
                raise SchemaNotExistError(
                    f"kv record batch has schema id {batch.schema_id}, but table "
                    f"'{self.table_info.table_path}' has schema id {self._schema_id}"
                )
            # a writer still on an older schema: its rows take the added columns as nulls
            old_prefix = _SCHEMA_ID.pack(batch.schema_id)
            upgrade = self._upgrader.upgrade
            records = [(k, None if v is None else upgrade(old_prefix + v)[2:]) for k, v in records]
        merger = self._merger(target_columns)
        auto_increment = self.auto_increment
        if auto_increment is not None:
            auto_increment.check_targets(target_columns)
        behavior = merger.delete_behavior
        self._key_check.check_null_keys([v for _, v in records if v is not None])
        allow_delete = behavior is DeleteBehavior.ALLOW
        if behavior is DeleteBehavior.DISABLE and any(v is None for _, v in records):
            raise DeletionDisabledError(
                "Delete operations are disabled for this table. The table.delete.behavior is set to "
                f"'disable' (table '{self.table_info.table_path}')."
            )
        # With a WAL image, a full-row upsert on the default engine does not need the old row: the
        # result is always the new row and its changelog is a lone +U (as Fluss).
        blind_upsert = self._wal_image and isinstance(merger, DefaultRowMerger) and auto_increment is None
        state = self._old_values(records, allow_delete, blind_upsert)

        wal = self._wal_image
        prefix = self._schema_prefix
        rows: list[bytes] = []  # stored values of the changelog rows
        types = bytearray()
        writes: list[tuple[bytes, bytes | None, int, int]] = []
        add_row = rows.append
        add_type = types.append
        add_write = writes.append
        merge = merger.merge
        for key, row in records:
            if row is None:
                if not allow_delete:
                    continue  # IGNORE
                old = state[key]
                if old is None:
                    continue  # nothing to delete
                new = merger.delete(old)
                if new is None:
                    add_row(old)
                    add_type(_DELETE)
                    add_write((key, None, len(types) - 1, -1))
                    state[key] = None
                    continue
            else:
                value = prefix + row
                if blind_upsert:
                    add_row(value)
                    add_type(_UPDATE_AFTER)
                    add_write((key, value, len(types) - 1, 0))
                    state[key] = value
                    continue
                old = state[key]
                if old is None:
                    new = merge(None, value)
                    if auto_increment is not None:
                        new = auto_increment.fill(new)
                    add_row(new)
                    add_type(_INSERT)
                    add_write((key, new, len(types) - 1, 1))
                    state[key] = new
                    continue
                new = merge(old, value)
                if new is old:
                    continue  # the merge engine kept the stored row
            if not wal:
                add_row(old)
                add_type(_UPDATE_BEFORE)
            add_row(new)
            add_type(_UPDATE_AFTER)
            add_write((key, new, len(types) - 1, 0))
            state[key] = new

        changelog = self._build_changelog(rows, types, batch.writer_id, batch.batch_sequence, writes)
        return PreparedPut(changelog, bytes(types), writes, self.log.log_end_offset, len(records))

    def _old_values(
        self, records: list[tuple[bytes, bytes | None]], allow_delete: bool, blind_upsert: bool
    ) -> dict[bytes, bytes | None]:
        """The stored value (or None) of each key whose old row the merge will read."""
        state: dict[bytes, bytes | None] = {}
        known: set[bytes] = set()
        from_db: list[bytes] = []
        lookup = self.buffer.lookup
        for key, row in records:
            if key in known:
                continue
            if row is None:
                if not allow_delete:
                    continue  # an ignored delete neither reads nor writes
            elif blind_upsert:
                known.add(key)  # written without reading; later records of the key see that write
                continue
            known.add(key)
            entry = lookup(key)
            if entry is not None:
                state[key] = entry.value
            else:
                from_db.append(key)
        if from_db:
            state.update(zip(from_db, self._get_many(from_db, "reading old rows from"), strict=True))
        if self._upgrader is not None:  # rows written before an AlterTable
            upgrade = self._upgrader.upgrade
            state = {k: None if v is None else upgrade(v) for k, v in state.items()}
        return state

    def _build_changelog(
        self,
        rows: list[bytes],
        types: bytearray,
        writer_id: int,
        batch_sequence: int,
        writes: list[tuple[bytes, bytes | None, int, int]],
    ) -> bytes | None:
        if not types:
            if writer_id == NO_WRITER_ID:
                return None
            # keeps the idempotent writer's sequence moving (see the module doc)
            records = self._empty_records
        else:
            try:
                records = self._decoder.to_arrow(rows, self._arrow_schema, skip=2)
            except Exception as e:
                raise CorruptRecordError(
                    f"kv records of '{self.table_info.table_path}' are not rows of its schema: {e}"
                ) from None
            stored = [(key, index) for key, value, index, _ in writes if value is not None]
            if stored:
                rows_stored = records.take(pa.array([i for _, i in stored], pa.int32()))
                self._key_check.check(rows_stored, [k for k, _ in stored])
        return build_arrow_log_batch(
            records,
            schema_id=self._schema_id,
            change_types=types,
            writer_id=writer_id,
            batch_sequence=batch_sequence,
            compression=self._compression,
            zstd_level=self._zstd_level,
        )

    def stage(self, prepared: PreparedPut, appended: AppendResult) -> None:
        """Put the writes of an appended changelog into the pre-write buffer at their log offsets."""
        if appended.duplicate or prepared.changelog is None:
            return  # a retried batch: its writes were staged the first time
        base = appended.first_offset
        if base != prepared.base_offset:
            # Something appended between prepare and append: the merge read stale rows.
            raise KvStorageError(
                f"changelog landed at offset {base}, but was merged against log end offset "
                f"{prepared.base_offset}; PutKv calls of a bucket must be serialized"
            )
        put = self.buffer.put
        for key, value, index, delta in prepared.writes:
            put(key, value, base + index, delta)

    def apply(self, prepared: PreparedPut, appended: AppendResult) -> None:
        """Stage and flush at once, for a changelog committed as soon as it is appended (a sole
        replica). With nothing buffered the writes go straight to RocksDB in one WriteBatch."""
        if appended.duplicate or prepared.changelog is None or len(self.buffer):
            self.stage(prepared, appended)
            self.flush(self.log.log_end_offset)
            return
        self._check_usable()
        if appended.first_offset != prepared.base_offset:
            self.stage(prepared, appended)  # raises: the merge read stale rows
        if self._pending is not None:
            self._pending.write((key, value) for key, value, _, _ in prepared.writes)
            delta = sum(w[3] for w in prepared.writes)
        else:
            batch = WriteBatch(raw_mode=True)
            delta = 0
            for key, value, _, row_delta in prepared.writes:
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
                delta += row_delta
            self._write(batch)
        if self._row_count is not None:
            self._row_count += delta
        self._flushed_offset = max(self._flushed_offset, appended.last_offset + 1)

    def put_as_leader(
        self, kv_batch: Buffer, target_columns: Sequence[int] | None = None, *, commit: bool = False
    ) -> AppendResult:
        """prepare_put, append the changelog to the log, and stage the writes; the caller then
        commits (advances the high watermark) and calls `flush`. With `commit` the changelog counts as
        committed once appended and the writes reach RocksDB right away (`apply`)."""
        prepared = self.prepare_put(kv_batch, target_columns)
        if prepared.changelog is None:
            leo = self.log.log_end_offset
            return AppendResult(leo, leo - 1, -1, 0)
        appended = self.log.append_as_leader(prepared.changelog)
        if commit:
            self.apply(prepared, appended)
        else:
            self.stage(prepared, appended)
        return appended

    def _write(self, batch: WriteBatch) -> None:
        try:
            self._rdict().write(batch)
        except Exception as e:
            # Whatever was to be written is gone from memory: only a rebuild restores the state.
            self._failure = e
            raise KvStorageError(f"writing to the kv store in {self.directory} failed: {e}") from e

    def flush(self, end_offset: int) -> int:
        """Write the buffered writes below `end_offset` (a committed offset) to RocksDB in one
        WriteBatch; returns the new flushed offset."""
        self._check_usable()
        entries = self.buffer.take_until(end_offset)
        if entries and self._pending is not None:
            self._pending.write((e.key, e.value) for e in entries)
            if self._row_count is not None:
                self._row_count += sum(e.row_delta for e in entries)
        elif entries:
            batch = WriteBatch(raw_mode=True)
            delta = 0
            for e in entries:
                if e.value is None:
                    batch.delete(e.key)
                else:
                    batch.put(e.key, e.value)
                delta += e.row_delta
            self._write(batch)
            if self._row_count is not None:
                self._row_count += delta
        if end_offset > self._flushed_offset:
            self._flushed_offset = end_offset
        return self._flushed_offset

    def truncate_from(self, offset: int) -> None:
        """The log was truncated to `offset`: forget buffered writes at or after it. A truncation below
        the flushed offset leaves RocksDB ahead of the log, so the tablet is marked failed."""
        self.buffer.truncate_from(offset)
        if offset < self._flushed_offset:
            self._failure = KvStorageError(
                f"log truncated to {offset}, below the kv flushed offset {self._flushed_offset}"
            )

    # ---- recovery hooks ----------------------------------------------------------------------

    def write_direct(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write (key, value or None to delete) pairs straight to RocksDB in one WriteBatch (replay of
        committed changelog; no buffer, no changelog)."""
        self._write_pairs(writes)

    def set_recovered_state(self, flushed_offset: int, row_count: int | None) -> None:
        self._flushed_offset = flushed_offset
        self._row_count = None if self._wal_image else row_count

    # ---- reads (committed rows only) ---------------------------------------------------------

    def memory_usage(self) -> int:
        """RocksDB memtables plus table readers (block-cache memory is shared and not counted), or
        the rows held while the database is pending."""
        if self._closed:
            return 0
        if self._pending is not None:
            return self._pending.nbytes
        return sum(
            self._rdict().property_int_value(name) or 0
            for name in ("rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem")
        )

    def rocksdb_property(self, name: str) -> int | None:
        """An integer property of the tablet's RocksDB, e.g. `rocksdb.block-cache-capacity` (None
        while the database is pending)."""
        self._check_usable()
        return None if self._db is None else self._db.property_int_value(name)

    def memtable_bytes(self) -> int:
        """Bytes of this tablet's RocksDB memtables (charged to the shared write-buffer budget)."""
        if self._closed or self._db is None:
            return 0
        return self._db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The stored value of each key (schema id + row), None when absent."""
        self._check_usable()
        return self._upgrade(self._get_many(keys, "reading from"))

    def _get_many(self, keys: Sequence[bytes], what: str) -> list[bytes | None]:
        # One get per key: rocksdict's list get costs more per key (measured: ~1 us against 0.17 us
        # for an absent key with the memtable bloom filter, 0.96 against 0.86 us for a present one).
        get = self._pending.get if self._pending is not None else self._rdict().get
        try:
            return [get(key) for key in keys]
        except Exception as e:
            raise KvStorageError(f"{what} the kv store failed: {e}") from e

    def prefix_lookup(self, prefixes: Sequence[bytes]) -> list[list[bytes]]:
        """For each prefix (an encoded bucket key), the stored values of the keys starting with it."""
        self._check_usable()
        out: list[list[bytes]] = []
        try:
            for prefix in prefixes:
                options = ReadOptions()
                upper = _prefix_upper_bound(prefix)
                if upper is not None:
                    options.set_iterate_upper_bound(upper)
                values: list[bytes] = []
                for key, value in self._bytes_items(from_key=prefix, read_opt=options, upper=upper):
                    if upper is None and not key.startswith(prefix):
                        break
                    values.append(value)
                out.append(values)
        except Exception as e:
            raise KvStorageError(f"prefix lookup in the kv store failed: {e}") from e
        if self._upgrader is not None:
            out = [self._upgrade(values) for values in out]
        return out

    def limit_scan(self, limit: int) -> list[bytes]:
        """The first `limit` stored values in key order."""
        self._check_usable()
        if limit <= 0:
            return []
        try:
            if self._pending is not None:
                values = [v for _, v in itertools.islice(self._pending.items(), limit)]
            else:
                values = list(itertools.islice(self._rdict().values(), limit))
        except Exception as e:
            raise KvStorageError(f"scanning the kv store failed: {e}") from e
        return self._upgrade(values)

    def all_items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, stored value) in key order, read at once. With its database the tablet may be
        read so on an executor thread (the flush guard makes a close wait for it); a pending tablet
        only on its owner thread, where `attach_db` moves its rows away."""
        with self._flush_guard:
            self._check_usable()
            return list(self._bytes_items())

    def open_scan(self) -> KvScan:
        """A consistent view of every committed row for ScanKv. On the owner thread: RocksDB's
        content and `flushed_offset` change together between awaits, so the snapshot covers exactly
        the changelog below `flushed_offset`."""
        self._check_usable()
        snapshot: object | None = None
        if self._pending is not None:
            # small by construction (the pending budget): a copy is the snapshot
            values: Iterator[bytes] = iter([v for _, v in self._pending.items()])
        else:
            snap = self._rdict().snapshot()
            snapshot = snap
            values = cast(Iterator[bytes], iter(snap.values()))
        scan = KvScan(self._flushed_offset, values, snapshot, self._upgrader)
        self._scans.add(scan)
        return scan

    def read_scan(self, scan: KvScan, max_bytes: int, limit: int | None) -> tuple[list[bytes], bool]:
        """The next values of `scan` (at least one, then up to `max_bytes` of them, at most `limit`),
        and whether more remain. Blocking: meant for an executor thread, one call per scan at a time."""
        out: list[bytes] = []
        with self._flush_guard:
            self._check_usable()
            iterator = scan._iterator
            if scan.released or iterator is None:
                raise KvStorageError(f"the scan of the kv tablet in {self.directory} was closed")
            size = 0
            try:
                while limit is None or len(out) < limit:
                    if out and size >= max_bytes:
                        break
                    value = next(iterator, None)
                    if value is None:
                        scan.release()
                        self._scans.discard(scan)
                        break
                    out.append(value)
                    size += 4 + len(value)  # the value record's length prefix and bytes
                else:
                    scan.release()  # the limit is reached: nothing more to read
                    self._scans.discard(scan)
            except KvStorageError:
                raise
            except Exception as e:
                raise KvStorageError(f"scanning the kv store failed: {e}") from e
        if scan.upgrader is not None:
            out = [scan.upgrader.upgrade(v) for v in out]
        return out, not scan.released

    def close_scan(self, scan: KvScan) -> None:
        """Drop a scan (ended, closed by the client or expired). The caller makes sure no
        `read_scan` of it is running."""
        scan.release()
        self._scans.discard(scan)

    def items(self) -> Iterable[tuple[bytes, bytes]]:
        """Every (key, stored value) in key order (tests, tools)."""
        self._check_usable()
        return self._bytes_items()

    def _bytes_items(
        self, from_key: bytes | None = None, read_opt: ReadOptions | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        if self._pending is not None:
            return self._pending.items(from_key, upper)
        # rocksdict types keys as any of its key types; this database holds bytes keys and values only
        return cast(Iterator[tuple[bytes, bytes]], self._rdict().items(from_key=from_key, read_opt=read_opt))

    def _rdict(self) -> Rdict:
        db = self._db
        if db is None:
            raise KvStorageError(f"the kv tablet in {self.directory} has no database yet")
        return db

    # ---- snapshots and lifecycle -------------------------------------------------------------

    def flush_memtable(self) -> None:
        """Write RocksDB's memtable to SST files: the slow part of `create_checkpoint` (~0.1-0.2 s for
        tens of MB), done first so the checkpoint has only what was written since to flush. Blocking;
        meant for an executor thread while the event loop keeps writing (RocksDB takes concurrent
        writes, and the flush changes no content). `close` waits for it."""
        with self._flush_guard:
            self._check_usable()
            if self._db is None:
                return  # nothing on disk yet; the pending rows count against the pending budget
            try:
                self._db.flush()
            except Exception as e:
                raise KvStorageError(f"flushing the memtable in {self.directory} failed: {e}") from e

    def create_checkpoint(self, target: Path) -> TabletState:
        """A RocksDB checkpoint (hard links; flushes the memtable) of what is flushed, in `target`,
        which must not exist and must be on the same file system. Returns what it covers."""
        self._check_usable()
        state = self.state()
        try:
            Checkpoint(self._rdict()).create_checkpoint(str(target))
        except Exception as e:
            raise KvStorageError(f"creating a kv checkpoint in {target} failed: {e}") from e
        return state

    def close(self) -> None:
        if self._closed:
            return
        with self._flush_guard:  # a memtable flush on another thread finishes first (rare: a snapshot's)
            self._closed = True
            self.buffer.clear()
            for scan in self._scans:
                scan.release()
            self._scans.clear()
            if self._pending is not None:
                self._pending.release()
                self._pending = None
            if self._db is not None:
                self._db.close()

    def __repr__(self) -> str:
        return (
            f"KvTablet({self.directory}, flushed_offset={self._flushed_offset}, buffered={len(self.buffer)})"
        )
