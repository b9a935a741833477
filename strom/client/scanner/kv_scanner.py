"""``table.new_scan().create_kv_scanner(bucket)``: the current rows of one primary-key bucket, read
with ScanKv (Fluss 1.0) from a consistent snapshot on the bucket's leader, a page at a time.

`log_offset` (known after the first page) is the changelog offset the snapshot covers: a log scanner
started there sees every change made after the rows returned, and none of those rows again. A scan
is tied to the leader that opened it; if leadership moves mid-scan the next page raises
NOT_LEADER_OR_FOLLOWER and the caller starts again (opening retries after a metadata refresh).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pyarrow as pa

from strom.client.backoff import REQUEST_BACKOFF
from strom.client.lookup.value_decoder import ValueDecoder
from strom.common.errors import FlussError, LeaderNotAvailableError, NonPrimaryKeyTableError, error_for_code
from strom.common.table_bucket import TableBucket
from strom.record.value_batch import parse_value_batch
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["DEFAULT_SCAN_BATCH_BYTES", "KvScanner"]

# Fluss's client default for a page (client.scanner.kv.fetch.max-bytes is its name there)
DEFAULT_SCAN_BATCH_BYTES = 4 << 20


class KvScanner:
    def __init__(
        self,
        table: Table,
        bucket: int,
        partition_id: int | None = None,
        *,
        batch_size_bytes: int = DEFAULT_SCAN_BATCH_BYTES,
        limit: int | None = None,
    ) -> None:
        if not table.has_primary_key:
            raise NonPrimaryKeyTableError(f"table '{table.path}' has no primary key: ScanKv reads PK tables")
        if not 0 <= bucket < table.bucket_count:
            raise ValueError(
                f"bucket {bucket} is not one of the {table.bucket_count} buckets of '{table.path}'"
            )
        if batch_size_bytes <= 0:
            raise ValueError("batch_size_bytes must be positive")
        self.table = table
        self.bucket = TableBucket(table.table_id, partition_id, bucket)
        self.batch_size_bytes = batch_size_bytes
        self.limit = limit
        self.decoder = ValueDecoder(table)
        self.log_offset: int | None = None
        self._scanner_id: bytes | None = None
        self._seq = -1
        self._leader: tuple[str, int] | None = None
        self._done = False

    async def __aenter__(self) -> KvScanner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self._pages()

    async def _pages(self) -> AsyncIterator[pa.RecordBatch]:
        while True:
            batch = await self.next_batch()
            if batch is None:
                return
            yield batch

    async def to_arrow(self) -> pa.Table:
        """Every remaining row, as one table."""
        batches = [b async for b in self]
        return pa.Table.from_batches(batches, schema=self.decoder.arrow_schema)

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next page of rows (None once the scan is complete)."""
        if self._done:
            return None
        if self._scanner_id is None:
            response = await self._open()
        else:
            assert self._leader is not None
            self._seq += 1
            request = pb.ScanKvRequest(
                scanner_id=self._scanner_id, call_seq_id=self._seq, batch_size_bytes=self.batch_size_bytes
            )
            response = _checked(await self._send(self._leader, request))
        if response.HasField("scanner_id"):
            self._scanner_id = response.scanner_id
        if not response.has_more_results:
            self._done = True
        values = parse_value_batch(response.records) if response.HasField("records") else []
        await self.decoder.ensure_schemas(values)
        return self.decoder.to_arrow(values)

    async def _open(self) -> pb.ScanKvResponse:
        connection = self.table.connection
        metadata = connection.metadata
        loop = asyncio.get_running_loop()
        deadline = loop.time() + connection.config.request_timeout.total_seconds()
        attempt = 0
        while True:
            leader = metadata.leader_for(self.bucket)
            error: FlussError
            if leader is not None:
                req = pb.PbScanReqForBucket(table_id=self.bucket.table_id, bucket_id=self.bucket.bucket)
                if self.bucket.partition_id is not None:
                    req.partition_id = self.bucket.partition_id
                if self.limit is not None:
                    req.limit = self.limit
                request = pb.ScanKvRequest(
                    bucket_scan_req=req, call_seq_id=0, batch_size_bytes=self.batch_size_bytes
                )
                try:
                    response = _checked(await self._send((leader.host, leader.port), request))
                except FlussError as e:
                    if not e.retriable:
                        raise
                    error = e
                else:
                    self._leader = (leader.host, leader.port)
                    self._seq = 0
                    self.log_offset = response.log_offset if response.HasField("log_offset") else None
                    return response
            else:
                error = LeaderNotAvailableError(
                    f"No leader for bucket {self.bucket.bucket} of table '{self.table.path}'."
                )
            if loop.time() + REQUEST_BACKOFF.delay(attempt) >= deadline:
                raise error
            await REQUEST_BACKOFF.sleep(attempt)
            attempt += 1
            await metadata.refresh_leaders(self.table.path, self.bucket.partition_id)

    async def _send(self, address: tuple[str, int], request: pb.ScanKvRequest) -> pb.ScanKvResponse:
        connection = self.table.connection
        timeout = connection.config.request_timeout.total_seconds()
        result: pb.ScanKvResponse = await connection.pool.request(
            address[0], address[1], ApiKey.SCAN_KV, request, timeout=timeout
        )
        return result

    async def close(self) -> None:
        """Release the server's scanner before the end of the scan (nothing to do after it)."""
        if self._done or self._scanner_id is None or self._leader is None:
            self._done = True
            return
        self._done = True
        request = pb.ScanKvRequest(scanner_id=self._scanner_id, close_scanner=True)
        await self._send(self._leader, request)


def _checked(response: pb.ScanKvResponse) -> pb.ScanKvResponse:
    if response.HasField("error_code") and response.error_code != 0:
        raise error_for_code(response.error_code, response.error_message or None)
    return response
