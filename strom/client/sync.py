"""A synchronous facade over the asyncio client, for code that cannot await (Spark executors).

    with SyncConnection({"bootstrap.servers": "127.0.0.1:9123"}) as conn:
        conn.append_arrow("fluss.clicks", arrow_table)
        for part in conn.read_bucket_range("fluss.clicks", bucket=0, partition_id=None, start=0, end=1000):
            part.batch, part.offsets(), part.change_type_array(), part.timestamp
        conn.upsert_arrow("fluss.users", users, change_type_column="_change_type")   # PK tables
        rows = conn.read_bucket_state("fluss.users", bucket=0, partition_id=None, end_offset=5000)

A `SyncConnection` runs a private event loop in a daemon thread and owns one `Connection` on it; every
method submits a coroutine to that loop and blocks until it is done. It may be used from several
threads at once. Close it (or use ``with``) to flush writers and stop the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from strom.client.admin import TablePathLike, as_table_path
from strom.client.closing import Closing
from strom.client.config import ClientConfig
from strom.client.connection import Connection
from strom.client.offset_spec import OffsetSpec
from strom.client.scanner.bucket_state import read_bucket_state
from strom.client.scanner.log_scanner import LogScanner
from strom.client.scanner.scan_records import ScanBatch
from strom.client.scanner.snapshot_reader import BucketSnapshot, SnapshotReader
from strom.client.table import Table
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath

__all__ = ["SnapshotBatches", "SyncConnection"]

T = TypeVar("T")


class SyncConnection(Closing):
    def __init__(self, config: ClientConfig | Mapping[str, object] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="strom-sync-client", daemon=True)
        self._thread.start()
        self._tables: dict[TablePath, Table] = {}
        self._closed = False
        try:
            self._connection: Connection = self._call(Connection.create(config))
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            work.close()
            raise RuntimeError("The SyncConnection is closed.")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    @property
    def connection(self) -> Connection:
        """The asyncio connection underneath (use it only through `run`)."""
        return self._connection

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run any coroutine of this connection's client on its loop and return the result."""
        return self._call(work, timeout)

    # ------------------------------------------------------------------ tables

    def get_table(self, table_path: TablePathLike, refresh: bool = False) -> Table:
        path = as_table_path(table_path)
        table = self._tables.get(path)
        if table is None or refresh:
            table = self._tables[path] = self._call(self._connection.get_table(path))
        return table

    def get_table_info(self, table_path: TablePathLike) -> TableInfo:
        return self.get_table(table_path).info

    def list_offsets(
        self,
        table_path: TablePathLike,
        buckets: Sequence[int],
        spec: OffsetSpec | None = None,
        partition_name: str | None = None,
    ) -> dict[int, int]:
        """Offsets of buckets (latest, i.e. the high watermark, unless `spec` says otherwise)."""
        admin = self._connection.get_admin()
        return self._call(
            admin.list_offsets(
                table_path, buckets, spec or OffsetSpec.latest(), partition_name=partition_name
            )
        )

    # ------------------------------------------------------------------ reading

    def read_bucket_range(
        self,
        table_path: TablePathLike,
        bucket: int,
        partition_id: int | None,
        start: int,
        end: int,
        projection: Sequence[str] | Sequence[int] | None = None,
        *,
        poll_timeout_ms: int = 1000,
    ) -> Iterator[ScanBatch]:
        """The rows of one bucket with offsets in ``[start, end)``, as `ScanBatch`es in offset order.

        Each carries an Arrow RecordBatch (projected columns in the order given), the offset of its
        first row (``offsets()`` gives all), the commit timestamp and the change types of its rows.
        Blocks while the range is not yet readable (e.g. `end` above the high watermark).
        """
        if end <= start:
            return
        table = self.get_table(table_path)
        scanner = self._call(self._open_scanner(table, bucket, partition_id, start, end, projection))
        try:
            while not scanner.finished:
                yield from self._call(scanner.poll_batches(poll_timeout_ms))
        finally:
            if not self._closed:
                self._call(scanner.close())

    @staticmethod
    async def _open_scanner(
        table: Table,
        bucket: int,
        partition_id: int | None,
        start: int,
        end: int,
        projection: Sequence[str] | Sequence[int] | None,
    ) -> LogScanner:
        scan = table.new_scan()
        if projection is not None:
            names: list[str | int] = list(projection)
            if all(isinstance(p, str) for p in names):
                scan = scan.project_by_name([str(p) for p in names])
            else:
                scan = scan.project([int(p) for p in names])
        scanner = scan.create_log_scanner()
        if partition_id is None:
            scanner.subscribe(bucket, start, end)
        else:
            scanner.subscribe_partition(partition_id, bucket, start, end)
        return scanner

    # ------------------------------------------------------------------ primary-key tables

    def read_bucket_snapshot(
        self,
        table_path: TablePathLike,
        bucket: int,
        partition_id: int | None,
        snapshot_id: int | None = None,
        projection: Sequence[str] | None = None,
    ) -> tuple[int | None, SnapshotBatches]:
        """A bucket's KV snapshot (the latest unless `snapshot_id` names one): its log offset and its
        rows as RecordBatches (all inserts), or ``(None, empty)`` when the bucket has no snapshot.

        The changelog from that offset on (``read_bucket_range``) must be merged on top by primary
        key to get later states; `read_bucket_state` does both. Iterate the batches to the end, or
        close them, to delete the downloaded snapshot.
        """
        table = self.get_table(table_path)
        reader = SnapshotReader(table)
        snapshot = self._call(reader.open(TableBucket(table.table_id, partition_id, bucket), snapshot_id))
        if snapshot is None:
            return None, SnapshotBatches(self, None, projection)
        return snapshot.log_offset, SnapshotBatches(self, snapshot, projection)

    def read_bucket_state(
        self,
        table_path: TablePathLike,
        bucket: int,
        partition_id: int | None,
        end_offset: int | None = None,
        projection: Sequence[str] | None = None,
        snapshot_id: int | None = None,
    ) -> pa.Table:
        """The rows of a primary-key table bucket as of changelog offset `end_offset` (exclusive; the
        high watermark when None): its KV snapshot with the changelog up to `end_offset` merged on top
        by key (last change wins, deleted keys gone)."""
        table = self.get_table(table_path)
        return self._call(
            read_bucket_state(
                table, bucket, partition_id, end_offset, projection=projection, snapshot_id=snapshot_id
            )
        )

    def upsert_arrow(
        self,
        table_path: TablePathLike,
        data: pa.Table | pa.RecordBatch,
        *,
        change_type_column: str | None = None,
        target_columns: Sequence[str] | None = None,
    ) -> None:
        """Upsert Arrow rows into a primary-key table (a changelog with `change_type_column`: -D rows
        delete, -U rows are skipped; only `target_columns` when given) and return once acknowledged."""
        table = self.get_table(table_path)
        self._call(self._upsert(table, data, change_type_column, target_columns))

    def delete_arrow(self, table_path: TablePathLike, keys: pa.Table | pa.RecordBatch) -> None:
        """Delete the rows with these primary keys and return once acknowledged."""
        self._call(self._delete(self.get_table(table_path), keys))

    def lookup(self, table_path: TablePathLike, keys: Sequence[Any]) -> list[dict[str, Any] | None]:
        """The rows of these primary keys (dicts or tuples in key order), None where there is none."""
        table = self.get_table(table_path)
        return self._call(self._lookup(table, keys))

    @staticmethod
    async def _upsert(
        table: Table,
        data: pa.Table | pa.RecordBatch,
        change_type_column: str | None,
        target_columns: Sequence[str] | None,
    ) -> None:
        upsert = table.new_upsert()
        if target_columns is not None:
            upsert = upsert.partial_update_by_name(list(target_columns))
        writer = upsert.create_writer()
        batches = [data] if isinstance(data, pa.RecordBatch) else data.to_batches()
        for batch in batches:
            if batch.num_rows:
                writer.write_arrow_batch(batch, change_type_column=change_type_column)
                await writer.wait_for_capacity()
        await writer.flush()

    @staticmethod
    async def _delete(table: Table, keys: pa.Table | pa.RecordBatch) -> None:
        writer = table.new_upsert().create_writer()
        writer.delete_arrow(keys)
        await writer.flush()

    @staticmethod
    async def _lookup(table: Table, keys: Sequence[Any]) -> list[dict[str, Any] | None]:
        return await table.new_lookup().create_lookuper().lookup_many(keys)

    # ------------------------------------------------------------------ writing

    def append_arrow(self, table_path: TablePathLike, data: pa.Table | pa.RecordBatch) -> None:
        """Append Arrow data to a log table and return once all of it is acknowledged."""
        self._call(self._append(self.get_table(table_path), data))

    @staticmethod
    async def _append(table: Table, data: pa.Table | pa.RecordBatch) -> None:
        writer = table.new_append().create_writer()
        batches = [data] if isinstance(data, pa.RecordBatch) else data.to_batches()
        for batch in batches:
            if batch.num_rows:
                writer.write_arrow_batch(batch)
                await writer.wait_for_capacity()  # stream big inputs within the buffer memory
        await writer.flush()

    # ------------------------------------------------------------------ lifecycle

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._call(self._connection.close())
        finally:
            self._closed = True
            self._stop_loop()

    def __repr__(self) -> str:
        return f"SyncConnection({self._connection!r})"


class SnapshotBatches(Closing):
    """The rows of a downloaded KV snapshot, batch by batch; the local copy goes when they are
    exhausted or `close` is called."""

    def __init__(
        self, sync: SyncConnection, snapshot: BucketSnapshot | None, projection: Sequence[str] | None
    ) -> None:
        self._sync = sync
        self._snapshot = snapshot
        self._projection = None if projection is None else list(projection)
        self._rows = None if snapshot is None else snapshot.batches().__aiter__()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        if self._rows is None:
            raise StopIteration
        try:
            batch = self._sync.run(_next_or_none(self._rows))
        except BaseException:
            self.close()
            raise
        if batch is None:
            self.close()
            raise StopIteration
        return batch if self._projection is None else batch.select(self._projection)

    def close(self) -> None:
        snapshot, self._snapshot, self._rows = self._snapshot, None, None
        if snapshot is not None:
            snapshot.close()

    def __del__(self) -> None:
        self.close()


async def _next_or_none(rows: AsyncIterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    try:
        return await rows.__anext__()
    except StopAsyncIteration:
        return None
