"""Reading the KV snapshot of a primary-key table bucket: its rows as of a changelog offset.

    reader = SnapshotReader(table)
    snapshot = await reader.open(bucket)               # the latest snapshot, or None when none exists
    if snapshot is not None:
        async with snapshot:
            snapshot.log_offset                        # the changelog continues from here
            async for batch in snapshot.batches():     # pyarrow RecordBatches of the table's schema
                ...

The coordinator names the snapshot of a bucket (GetLatestKvSnapshots) and its files
(GetKvSnapshotMetadata: remote path and local file name of every file of a RocksDB checkpoint). The
files are downloaded through fsspec (any URL the cluster's ``remote.data.dir`` uses: a local
directory, s3://...) into a temporary directory (``client.scanner.io.tmpdir``), several at a time
(``client.remote-file.download-thread-num``), and the checkpoint is opened read-only with rocksdict.
Values (schema id + CompactedRow) are read in key order, a chunk at a time, and decoded column-wise
into Arrow. Every row is an insert (+I): a snapshot holds no deletes. Closing removes the directory.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import pyarrow as pa

from strom.client.closing import Closing
from strom.client.lookup.value_decoder import ValueDecoder
from strom.client.scanner.scan_records import ScanBatch
from strom.common.errors import FlussError, KvSnapshotNotExistError, KvStorageError
from strom.common.file_io import load_file_io
from strom.common.table_bucket import TableBucket
from strom.record.change_type import ChangeType
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from rocksdict import Rdict

    from strom.client.table import Table

__all__ = ["BucketSnapshot", "SnapshotFile", "SnapshotInfo", "SnapshotReader", "snapshot_scan_batch"]

log = logging.getLogger(__name__)

# Rows decoded per Arrow batch.
DEFAULT_BATCH_ROWS = 8192
_INSERT = bytes((int(ChangeType.INSERT),))


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    remote_path: str
    local_name: str


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A KV snapshot of one bucket: everything below `log_offset` of its changelog, in `files`."""

    bucket: TableBucket
    snapshot_id: int
    log_offset: int
    files: tuple[SnapshotFile, ...]


def snapshot_scan_batch(bucket: TableBucket, batch: pa.RecordBatch) -> ScanBatch:
    """Snapshot rows as a ScanBatch: all inserts, without offsets or timestamp (both -1)."""
    return ScanBatch(bucket, batch, -1, -1, _INSERT * batch.num_rows)


class SnapshotReader:
    """Finds, downloads and reads KV snapshots of the buckets of one primary-key table."""

    def __init__(self, table: Table, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        if not table.has_primary_key:
            raise FlussError(f"Table '{table.path}' has no primary key, so it has no KV snapshots.")
        self.table = table
        self.batch_rows = batch_rows
        self.decoder = ValueDecoder(table)
        config = table.connection.config
        self._tmpdir = config.scanner_io_tmpdir or None
        self._download_threads = max(1, config.remote_file_download_thread_num)

    # ------------------------------------------------------------------ finding snapshots

    async def _partition_name(self, partition_id: int | None) -> str | None:
        if partition_id is None:
            return None
        metadata = self.table.connection.metadata
        name = metadata.partition_name(partition_id)
        if name is None:
            await metadata.refresh_partitions(self.table.path, [partition_id])
            name = metadata.partition_name(partition_id)
        if name is None:
            raise FlussError(f"Partition id {partition_id} of table '{self.table.path}' is unknown.")
        return name

    async def latest(self, partition_id: int | None = None) -> dict[int, tuple[int, int]]:
        """The latest snapshot of every bucket that has one: bucket -> (snapshot id, log offset)."""
        admin = self.table.connection.get_admin()
        name = await self._partition_name(partition_id)
        found = await admin.get_latest_kv_snapshots(self.table.path, partition_name=name)
        return {b: (found.snapshot_ids[b], found.log_offsets.get(b, 0)) for b in sorted(found.snapshot_ids)}

    async def info(self, bucket: TableBucket, snapshot_id: int | None = None) -> SnapshotInfo | None:
        """The snapshot `snapshot_id` of a bucket (its latest when None), or None when it has none."""
        if snapshot_id is None:
            latest = (await self.latest(bucket.partition_id)).get(bucket.bucket)
            if latest is None:
                return None
            snapshot_id = latest[0]
        request = pb.GetKvSnapshotMetadataRequest(
            table_id=self.table.table_id, bucket_id=bucket.bucket, snapshot_id=snapshot_id
        )
        if bucket.partition_id is not None:
            request.partition_id = bucket.partition_id
        connection = self.table.connection
        node = await connection.metadata.coordinator_node()
        timeout = connection.config.request_timeout.total_seconds()
        response: pb.GetKvSnapshotMetadataResponse = await connection.pool.request(
            node.host, node.port, ApiKey.GET_KV_SNAPSHOT_METADATA, request, timeout=timeout
        )
        files = tuple(SnapshotFile(f.remote_path, f.local_file_name) for f in response.snapshot_files)
        return SnapshotInfo(bucket, snapshot_id, response.log_offset, files)

    # ------------------------------------------------------------------ opening

    async def open(self, bucket: TableBucket, snapshot_id: int | None = None) -> BucketSnapshot | None:
        """Download and open a bucket's snapshot (its latest when `snapshot_id` is None); None when the
        bucket has no snapshot. Raises KvSnapshotNotExistError when a named snapshot is gone."""
        info = await self.info(bucket, snapshot_id)
        if info is None:
            return None
        if self._tmpdir is not None:
            os.makedirs(self._tmpdir, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix="strom-kv-snapshot-", dir=self._tmpdir))
        work = asyncio.get_running_loop().run_in_executor(None, self._download_and_open, info, directory)
        try:
            db = await asyncio.shield(work)
        except asyncio.CancelledError:
            # The download goes on in its thread: clean up after it once it ends.
            work.add_done_callback(lambda w: _discard(w, directory))
            raise
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return BucketSnapshot(info, directory, db, self.decoder, self.batch_rows)

    def _download_and_open(self, info: SnapshotInfo, directory: Path) -> Rdict:
        from rocksdict import AccessType, Options, Rdict

        def fetch(f: SnapshotFile) -> None:
            location = load_file_io(f.remote_path)
            location.fs.get_file(location.path, str(directory / f.local_name))

        try:
            with ThreadPoolExecutor(self._download_threads, thread_name_prefix="strom-kv-download") as pool:
                list(pool.map(fetch, info.files))
        except (OSError, ValueError) as e:
            raise KvSnapshotNotExistError(
                f"Cannot download KV snapshot {info.snapshot_id} of {info.bucket} of table "
                f"'{self.table.path}' (it may have been replaced by a newer one): {e}"
            ) from e
        try:
            return Rdict(str(directory), options=Options(raw_mode=True), access_type=AccessType.read_only())
        except Exception as e:  # rocksdict raises plain Exceptions
            raise KvStorageError(
                f"Cannot open KV snapshot {info.snapshot_id} of {info.bucket} of table "
                f"'{self.table.path}': {e}"
            ) from e


def _discard(work: asyncio.Future[Rdict], directory: Path) -> None:
    if not work.cancelled() and work.exception() is None:
        work.result().close()
    shutil.rmtree(directory, ignore_errors=True)


class BucketSnapshot(Closing):
    """An opened snapshot of one bucket; close it (or use ``async with``) to delete its local copy."""

    def __init__(
        self, info: SnapshotInfo, directory: Path, db: Rdict, decoder: ValueDecoder, batch_rows: int
    ) -> None:
        self.info = info
        self.directory = directory
        self._db: Rdict | None = db
        self._decoder = decoder
        self._batch_rows = batch_rows

    @property
    def bucket(self) -> TableBucket:
        return self.info.bucket

    @property
    def snapshot_id(self) -> int:
        return self.info.snapshot_id

    @property
    def log_offset(self) -> int:
        """The changelog offset the snapshot covers: changes at and after it are not in it."""
        return self.info.log_offset

    def _chunks(self) -> Iterator[list[bytes]]:
        if self._db is None:
            raise FlussError("The snapshot is closed.")
        values = self._db.values()
        while True:
            chunk = list(itertools.islice(values, self._batch_rows))
            if not chunk:
                return
            yield chunk

    def iter_values(self) -> Iterator[list[bytes]]:
        """The stored values (schema id + row), a chunk at a time, in key order (blocking)."""
        return self._chunks()

    async def batches(self) -> AsyncIterator[pa.RecordBatch]:
        """The rows as RecordBatches of the table's Arrow schema; the reading runs off the event loop."""
        chunks = self._chunks()
        while True:
            chunk = await asyncio.to_thread(next, chunks, None)
            if chunk is None:
                return
            await self._decoder.ensure_schemas(chunk)
            yield await asyncio.to_thread(self._decoder.to_arrow, chunk)

    async def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches([b async for b in self.batches()], schema=self._decoder.arrow_schema)

    async def scan_batches(self) -> AsyncIterator[ScanBatch]:
        """The rows as ScanBatches of inserts (offset and timestamp -1), like a log scanner's."""
        async for batch in self.batches():
            yield snapshot_scan_batch(self.bucket, batch)

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception as e:  # rocksdict raises plain Exceptions
                log.warning("closing KV snapshot %s failed: %s", self.info.snapshot_id, e)
        shutil.rmtree(self.directory, ignore_errors=True)

    async def __aenter__(self) -> BucketSnapshot:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BucketSnapshot({self.info.bucket}, id {self.snapshot_id}, log offset {self.log_offset})"
