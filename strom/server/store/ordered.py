"""The coordinator's handle on its metadata store: reads on the caller's thread, writes on one thread.

A write to the store is a network round trip (a ZooKeeper transaction) or an fsync (SQLite with
synchronous=FULL), and the coordinator's event loop must not wait for either. `OrderedStore` runs
every write, and every group of writes that must apply together (`atomically`), on a single thread of
its own, one after the other in the order they were submitted: writes are never reordered, and each
commit still carries the ZooKeeper store's check of the coordinator epoch, so a fenced coordinator's
writes fail as before. The caller awaits the outcome.

Reads stay synchronous. Neither store makes a read wait for a write in flight: the ZooKeeper store
answers from its in-memory mirror of ZooKeeper, which is authoritative because only the active
coordinator writes and the mirror only shows committed writes; SQLite reads go through a second
connection that WAL mode never blocks. A read therefore sees every write whose `await` has returned.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from strom.server.store.base import (
    BucketAssignment,
    DatabaseRecord,
    MetadataStore,
    PartitionRecord,
    TableRecord,
)

T = TypeVar("T")
log = logging.getLogger(__name__)


class OrderedStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="metadata-store")

    # ---- writes: one thread, in submission order

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the store thread, after every write submitted before it."""
        future = self._thread.submit(fn, *args)
        try:
            return await asyncio.wrap_future(future)
        except BaseException:
            if not future.done():  # the caller was cancelled: the write still happens, in order
                future.add_done_callback(_consume)
            raise

    async def atomically(self, changes: Callable[[MetadataStore], T]) -> T:
        """`changes(store)` in one transaction on the store thread: all of its writes or none. It
        runs on another thread, so it only calls the store; anything else happens after the await."""

        def transaction() -> T:
            with self.store.transaction():
                return changes(self.store)

        return await self.run(transaction)

    async def next_id(self, kind: str) -> int:
        return await self.run(self.store.next_id, kind)

    async def bump_coordinator_epoch(self) -> int:
        return await self.run(self.store.bump_coordinator_epoch)

    async def create_database(self, record: DatabaseRecord) -> None:
        await self.run(self.store.create_database, record)

    async def drop_database(self, name: str) -> None:
        await self.run(self.store.drop_database, name)

    async def create_table(self, record: TableRecord, schema_json: bytes) -> None:
        await self.run(self.store.create_table, record, schema_json)

    async def update_database(self, record: DatabaseRecord) -> None:
        await self.run(self.store.update_database, record)

    async def update_table(self, record: TableRecord) -> None:
        await self.run(self.store.update_table, record)

    async def drop_table(self, table_id: int) -> None:
        await self.run(self.store.drop_table, table_id)

    async def add_schema(self, table_id: int, schema_id: int, schema_json: bytes) -> None:
        await self.run(self.store.add_schema, table_id, schema_id, schema_json)

    async def create_partition(self, record: PartitionRecord) -> None:
        await self.run(self.store.create_partition, record)

    async def drop_partition(self, partition_id: int) -> None:
        await self.run(self.store.drop_partition, partition_id)

    async def put_buckets(self, assignments: list[BucketAssignment]) -> None:
        await self.run(self.store.put_buckets, assignments)

    async def put_document(self, key: str, value: bytes) -> None:
        await self.run(self.store.put_document, key, value)

    async def delete_documents(self, prefix: str) -> None:
        await self.run(self.store.delete_documents, prefix)

    async def close(self) -> None:
        """Waits for the writes already submitted, then closes the store."""
        await self.run(self.store.close)
        self._thread.shutdown(wait=False)

    # ---- reads: synchronous, never waiting for a write in flight

    def get_database(self, name: str) -> DatabaseRecord | None:
        return self.store.get_database(name)

    def list_databases(self) -> list[DatabaseRecord]:
        return self.store.list_databases()

    def get_table(self, database: str, name: str) -> TableRecord | None:
        return self.store.get_table(database, name)

    def get_table_by_id(self, table_id: int) -> TableRecord | None:
        return self.store.get_table_by_id(table_id)

    def list_tables(self, database: str | None = None) -> list[TableRecord]:
        return self.store.list_tables(database)

    def get_schema(self, table_id: int, schema_id: int) -> bytes | None:
        return self.store.get_schema(table_id, schema_id)

    def get_partition(self, table_id: int, name: str) -> PartitionRecord | None:
        return self.store.get_partition(table_id, name)

    def get_partition_by_id(self, partition_id: int) -> PartitionRecord | None:
        return self.store.get_partition_by_id(partition_id)

    def list_partitions(self, table_id: int) -> list[PartitionRecord]:
        return self.store.list_partitions(table_id)

    def list_buckets(self, table_id: int | None = None) -> list[BucketAssignment]:
        return self.store.list_buckets(table_id)

    def get_document(self, key: str) -> bytes | None:
        return self.store.get_document(key)

    def list_documents(self, prefix: str) -> list[tuple[str, bytes]]:
        return self.store.list_documents(prefix)


def _consume(future: concurrent.futures.Future[Any]) -> None:
    """The outcome of a write whose caller was cancelled while it waited: nobody else will see it."""
    error = None if future.cancelled() else future.exception()
    if error is not None:
        log.warning("a metadata write whose caller went away failed: %s", error)
