"""Embedded metadata store on one SQLite file (WAL, synchronous=FULL: a committed change survives a
killed coordinator).

Writes take one connection, inside a transaction; reads from any other thread take a second one. In
WAL mode a reader never waits for a writer, so the coordinator's event loop reads the last committed
state while the store thread (`ordered.py`) waits for a commit's fsync.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from strom.server.store.base import (
    BucketAssignment,
    DatabaseRecord,
    MetadataStore,
    PartitionRecord,
    TableRecord,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sequences (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS databases (
    name TEXT PRIMARY KEY, database_json BLOB NOT NULL, created_time INTEGER, modified_time INTEGER);
CREATE TABLE IF NOT EXISTS tables (
    table_id INTEGER PRIMARY KEY, database TEXT NOT NULL, name TEXT NOT NULL, schema_id INTEGER NOT NULL,
    table_json BLOB NOT NULL, created_time INTEGER, modified_time INTEGER, UNIQUE (database, name));
CREATE TABLE IF NOT EXISTS schemas (
    table_id INTEGER NOT NULL, schema_id INTEGER NOT NULL, schema_json BLOB NOT NULL,
    PRIMARY KEY (table_id, schema_id));
CREATE TABLE IF NOT EXISTS partitions (
    partition_id INTEGER PRIMARY KEY, table_id INTEGER NOT NULL, name TEXT NOT NULL, created_time INTEGER,
    UNIQUE (table_id, name));
CREATE TABLE IF NOT EXISTS buckets (
    table_id INTEGER NOT NULL, partition_id INTEGER NOT NULL, bucket_id INTEGER NOT NULL,
    replicas TEXT NOT NULL, leader INTEGER, leader_epoch INTEGER NOT NULL, isr TEXT NOT NULL,
    bucket_epoch INTEGER NOT NULL, elr TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (table_id, partition_id, bucket_id));
CREATE TABLE IF NOT EXISTS documents (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""

_NO_PARTITION = -1  # SQLite primary keys treat NULLs as distinct, so store "no partition" as -1


class SqliteMetadataStore(MetadataStore):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(buckets)")}
        if "elr" not in columns:  # a store written before eligible leader replicas
            self._db.execute("ALTER TABLE buckets ADD COLUMN elr TEXT NOT NULL DEFAULT '[]'")
        self._lock = threading.RLock()
        self._depth = 0
        self._writer: int | None = None  # the thread inside a transaction
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._db.execute("BEGIN IMMEDIATE")
                self._writer = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._writer = None
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                try:
                    self._db.execute("COMMIT")
                finally:
                    self._writer = None

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self.transaction():
            return self._db.execute(sql, args)

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self._writer == threading.get_ident():  # inside this thread's transaction: see its writes
            return self._db.execute(sql, args).fetchall()
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    def next_id(self, kind: str) -> int:
        with self.transaction():
            row = self._db.execute("SELECT value FROM sequences WHERE name = ?", (kind,)).fetchone()
            value = 0 if row is None else row[0]
            self._db.execute(
                "INSERT OR REPLACE INTO sequences (name, value) VALUES (?, ?)", (kind, value + 1)
            )
            return value

    def bump_coordinator_epoch(self) -> int:
        # epochs start at 1: a request without one reads as Fluss's initial epoch 0, always stale
        return self.next_id("coordinator_epoch") + 1

    # databases

    def create_database(self, record: DatabaseRecord) -> None:
        self._execute(
            "INSERT INTO databases VALUES (?, ?, ?, ?)",
            (record.name, record.database_json, record.created_time, record.modified_time),
        )

    def get_database(self, name: str) -> DatabaseRecord | None:
        rows = self._query("SELECT * FROM databases WHERE name = ?", (name,))
        return DatabaseRecord(*rows[0]) if rows else None

    def list_databases(self) -> list[DatabaseRecord]:
        return [DatabaseRecord(*row) for row in self._query("SELECT * FROM databases ORDER BY name")]

    def update_database(self, record: DatabaseRecord) -> None:
        self._execute(
            "UPDATE databases SET database_json = ?, modified_time = ? WHERE name = ?",
            (record.database_json, record.modified_time, record.name),
        )

    def drop_database(self, name: str) -> None:
        self._execute("DELETE FROM databases WHERE name = ?", (name,))

    # tables

    def create_table(self, record: TableRecord, schema_json: bytes) -> None:
        with self.transaction():
            self._db.execute(
                "INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.table_id,
                    record.database,
                    record.name,
                    record.schema_id,
                    record.table_json,
                    record.created_time,
                    record.modified_time,
                ),
            )
            self.add_schema(record.table_id, record.schema_id, schema_json)

    def get_table(self, database: str, name: str) -> TableRecord | None:
        rows = self._query("SELECT * FROM tables WHERE database = ? AND name = ?", (database, name))
        return TableRecord(*rows[0]) if rows else None

    def get_table_by_id(self, table_id: int) -> TableRecord | None:
        rows = self._query("SELECT * FROM tables WHERE table_id = ?", (table_id,))
        return TableRecord(*rows[0]) if rows else None

    def list_tables(self, database: str | None = None) -> list[TableRecord]:
        if database is None:
            rows = self._query("SELECT * FROM tables ORDER BY table_id")
        else:
            rows = self._query("SELECT * FROM tables WHERE database = ? ORDER BY name", (database,))
        return [TableRecord(*row) for row in rows]

    def update_table(self, record: TableRecord) -> None:
        self._execute(
            "UPDATE tables SET schema_id = ?, table_json = ?, modified_time = ? WHERE table_id = ?",
            (record.schema_id, record.table_json, record.modified_time, record.table_id),
        )

    def drop_table(self, table_id: int) -> None:
        with self.transaction():
            for table in ("tables", "schemas", "partitions", "buckets"):
                self._db.execute(f"DELETE FROM {table} WHERE table_id = ?", (table_id,))

    def add_schema(self, table_id: int, schema_id: int, schema_json: bytes) -> None:
        self._execute("INSERT INTO schemas VALUES (?, ?, ?)", (table_id, schema_id, schema_json))

    def get_schema(self, table_id: int, schema_id: int) -> bytes | None:
        rows = self._query(
            "SELECT schema_json FROM schemas WHERE table_id = ? AND schema_id = ?", (table_id, schema_id)
        )
        return rows[0][0] if rows else None

    # partitions

    def create_partition(self, record: PartitionRecord) -> None:
        self._execute(
            "INSERT INTO partitions VALUES (?, ?, ?, ?)",
            (record.partition_id, record.table_id, record.name, record.created_time),
        )

    def get_partition(self, table_id: int, name: str) -> PartitionRecord | None:
        rows = self._query("SELECT * FROM partitions WHERE table_id = ? AND name = ?", (table_id, name))
        return PartitionRecord(*rows[0]) if rows else None

    def get_partition_by_id(self, partition_id: int) -> PartitionRecord | None:
        rows = self._query("SELECT * FROM partitions WHERE partition_id = ?", (partition_id,))
        return PartitionRecord(*rows[0]) if rows else None

    def list_partitions(self, table_id: int) -> list[PartitionRecord]:
        rows = self._query("SELECT * FROM partitions WHERE table_id = ? ORDER BY partition_id", (table_id,))
        return [PartitionRecord(*row) for row in rows]

    def drop_partition(self, partition_id: int) -> None:
        with self.transaction():
            self._db.execute("DELETE FROM partitions WHERE partition_id = ?", (partition_id,))
            self._db.execute("DELETE FROM buckets WHERE partition_id = ?", (partition_id,))

    # buckets

    def put_buckets(self, assignments: list[BucketAssignment]) -> None:
        with self.transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO buckets VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        a.table_id,
                        _NO_PARTITION if a.partition_id is None else a.partition_id,
                        a.bucket_id,
                        json.dumps(a.replicas),
                        a.leader,
                        a.leader_epoch,
                        json.dumps(a.isr),
                        a.bucket_epoch,
                        json.dumps(a.elr),
                    )
                    for a in assignments
                ],
            )

    def list_buckets(self, table_id: int | None = None) -> list[BucketAssignment]:
        if table_id is None:
            rows = self._query("SELECT * FROM buckets")
        else:
            rows = self._query("SELECT * FROM buckets WHERE table_id = ?", (table_id,))
        return [
            BucketAssignment(
                table_id=row[0],
                partition_id=None if row[1] == _NO_PARTITION else row[1],
                bucket_id=row[2],
                replicas=tuple(json.loads(row[3])),
                leader=row[4],
                leader_epoch=row[5],
                isr=tuple(json.loads(row[6])),
                bucket_epoch=row[7],
                elr=tuple(json.loads(row[8])),
            )
            for row in rows
        ]

    # documents

    def put_document(self, key: str, value: bytes) -> None:
        self._execute("INSERT OR REPLACE INTO documents VALUES (?, ?)", (key, value))

    def get_document(self, key: str) -> bytes | None:
        rows = self._query("SELECT value FROM documents WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def list_documents(self, prefix: str) -> list[tuple[str, bytes]]:
        rows = self._query(
            "SELECT key, value FROM documents WHERE substr(key, 1, ?) = ? ORDER BY key", (len(prefix), prefix)
        )
        return [(row[0], row[1]) for row in rows]

    def delete_documents(self, prefix: str) -> None:
        self._execute("DELETE FROM documents WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()
