"""A synchronous facade over the asyncio client, for code that cannot await (Spark executors).

    with SyncConnection({"bootstrap.servers": "127.0.0.1:9123"}) as conn:
        conn.append_arrow("fluss.clicks", arrow_table)
        for part in conn.read_bucket_range("fluss.clicks", bucket=0, partition_id=None, start=0, end=1000):
            part.batch, part.offsets(), part.change_type_array(), part.timestamp

A `SyncConnection` runs a private event loop in a daemon thread and owns one `Connection` on it; every
method submits a coroutine to that loop and blocks until it is done. It may be used from several
threads at once. Close it (or use ``with``) to flush writers and stop the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import pyarrow as pa

from strom.client.admin import TablePathLike, as_table_path
from strom.client.config import ClientConfig
from strom.client.connection import Connection
from strom.client.offset_spec import OffsetSpec
from strom.client.scanner.log_scanner import LogScanner
from strom.client.scanner.scan_records import ScanBatch
from strom.client.table import Table
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath

__all__ = ["SyncConnection"]

T = TypeVar("T")


class SyncConnection:
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
            names = list(projection)
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

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncConnection({self._connection!r})"
