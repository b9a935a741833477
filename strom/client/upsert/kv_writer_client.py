"""The KV writing machinery of a connection: the append writer's accumulator, sender and idempotence
rules, with KvRecordBatches in place of log batches and PutKv in place of ProduceLog.

Reused as they are: per-bucket queues, readiness (batch size, ``client.writer.batch-timeout``, flush),
draining one batch per bucket per leader, memory accounting, InitWriter, writer ids and batch
sequences, retries with backoff and metadata refreshes. What differs is small and lives here:

* `KvAccumulator.append` queues encoded records into `KvWriteBatch`es, starting a new batch when the
  target columns change (partial updates never share a batch with full-row writes);
* `KvSender._send` turns the drained batches of one leader and table into PutKv requests, one per
  distinct set of target columns (Fluss's rule: a PutKv carries one ``target_columns``), and reads
  ``log_end_offset`` from each bucket's answer.

One `KvWriterClient` serves every upsert writer of a connection; it has its own writer id.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING

from strom.client.upsert.kv_write_batch import KvBatchFormat, KvWriteBatch
from strom.client.writer.accumulator import AppendOutcome, RecordAccumulator
from strom.client.writer.errors import WriterClosedError
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.sender import Sender
from strom.client.writer.write_batch import WriteBatch
from strom.common.errors import (
    FlussError,
    LeaderNotAvailableError,
    NetworkError,
    UnknownServerError,
    error_for_code,
)
from strom.common.table_path import PhysicalTablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["KvAccumulator", "KvSender", "KvWriterClient", "kv_writer_client_for"]

log = logging.getLogger(__name__)

_CLIENTS: weakref.WeakKeyDictionary[Connection, KvWriterClient] = weakref.WeakKeyDictionary()


def kv_writer_client_for(connection: Connection) -> KvWriterClient:
    """The connection's KV writer machinery, started on first use and closed with the connection."""
    client = _CLIENTS.get(connection)
    if client is None or client.closed:
        client = KvWriterClient(connection)
        _CLIENTS[connection] = client
        connection.add_close_hook(client.close)
    return client


class KvAccumulator(RecordAccumulator):
    def append_records(
        self,
        path: PhysicalTablePath,
        bucket_id: int,
        fmt: KvBatchFormat,
        records: bytes,
        count: int,
        target_columns: tuple[int, ...] | None,
    ) -> AppendOutcome:
        """Queue `count` encoded records (concatenated) for a bucket, in the bucket's open batch if it
        has room and the same target columns, else in a new one."""
        if self.closed:
            raise WriterClosedError("Cannot write: the writer is closed.")
        size = len(records)
        queue = self._queue(path, bucket_id)
        last = queue[-1] if queue else None
        new_batch = False
        if not isinstance(last, KvWriteBatch) or not last.accepts(size, target_columns):
            if last is not None:
                last.close()
                self.wakeup.set()
            last = KvWriteBatch(
                next(self._ids), path, bucket_id, fmt, self.batch_size, self.now(), target_columns
            )
            queue.append(last)
            self._incomplete[last.batch_id] = last
            new_batch = True
        last.add_records(records, count)
        self._reserve(size)
        if new_batch or last.is_full:
            self.wakeup.set()
        return AppendOutcome(last, new_batch)


class KvSender(Sender):
    async def _send(
        self, node_id: int, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]
    ) -> None:
        groups: dict[tuple[int, ...] | None, list[tuple[WriteBatch, bytes | bytearray]]] = {}
        for batch, payload in built:
            assert isinstance(batch, KvWriteBatch)
            groups.setdefault(batch.target_columns, []).append((batch, payload))
        await asyncio.gather(
            *(self._put_kv(node_id, table_id, columns, group) for columns, group in groups.items())
        )

    async def _put_kv(
        self,
        node_id: int,
        table_id: int,
        target_columns: tuple[int, ...] | None,
        built: list[tuple[WriteBatch, bytes | bytearray]],
    ) -> None:
        request = pb.PutKvRequest(
            acks=self.acks, table_id=table_id, timeout_ms=int(self.request_timeout * 1000)
        )
        if target_columns is not None:
            request.target_columns.extend(target_columns)
        for batch, payload in built:
            assert batch.table_bucket is not None
            entry = request.buckets_req.add(bucket_id=batch.bucket_id, records=bytes(payload))
            if batch.table_bucket.partition_id is not None:
                entry.partition_id = batch.table_bucket.partition_id
            batch.attempts += 1
        batches = [b for b, _ in built]
        node = self.metadata.tablet_server(node_id)
        if node is None:
            self._handle_errors(
                batches, LeaderNotAvailableError(f"Tablet server {node_id} is no longer known.")
            )
            return
        try:
            response: pb.PutKvResponse = await self.pool.request(
                node.host, node.port, ApiKey.PUT_KV, request, timeout=self.request_timeout + 5
            )
        except FlussError as e:
            if isinstance(e, NetworkError):
                self.metadata.invalidate(server_id=node_id)
            self._handle_errors(batches, e)
            return
        except OSError as e:
            self.metadata.invalidate(server_id=node_id)
            self._handle_errors(batches, NetworkError(f"PutKv to {node} failed: {e}"))
            return
        by_bucket = {(b.table_bucket.partition_id, b.bucket_id): b for b in batches if b.table_bucket}
        stale: set[PhysicalTablePath] = set()
        for answer in response.buckets_resp:
            key = (answer.partition_id if answer.HasField("partition_id") else None, answer.bucket_id)
            batch = by_bucket.pop(key, None)
            if batch is None:
                continue
            if answer.HasField("error_code") and answer.error_code != 0:
                error = error_for_code(answer.error_code, answer.error_message or None)
                if self._handle_error(batch, error):
                    stale.add(batch.path)
            else:
                self._complete(batch, answer.log_end_offset if answer.HasField("log_end_offset") else -1)
        for batch in by_bucket.values():
            if self._handle_error(batch, UnknownServerError(f"No answer for bucket {batch.table_bucket}.")):
                stale.add(batch.path)
        self._refresh_soon(stale)


class KvWriterClient:
    def __init__(self, connection: Connection) -> None:
        config = connection.config
        self.config = config
        self.idempotence = IdempotenceManager(
            config.writer_enable_idempotence, config.writer_max_inflight_requests_per_bucket
        )
        self.accumulator = KvAccumulator(config, self.idempotence)
        self.sender = KvSender(
            connection.metadata, connection.pool, config, self.accumulator, self.idempotence
        )
        self.sender.start()
        self.closed = False

    def append(
        self,
        path: PhysicalTablePath,
        fmt: KvBatchFormat,
        bucket: int,
        records: bytes,
        count: int,
        target_columns: tuple[int, ...] | None,
    ) -> WriteBatch:
        """Queue encoded records for one bucket; returns the batch they went into."""
        if self.closed:
            raise WriterClosedError("Cannot write: the connection's KV writer is closed.")
        outcome = self.accumulator.append_records(path, bucket, fmt, records, count, target_columns)
        assert outcome.batch is not None
        return outcome.batch

    async def flush(self) -> None:
        """Send everything queued now and wait until it is acknowledged or failed."""
        batches = self.accumulator.incomplete()
        if not batches:
            return
        self.accumulator.begin_flush()
        try:
            await asyncio.gather(*(asyncio.shield(b.future) for b in batches), return_exceptions=True)
        finally:
            self.accumulator.end_flush()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.accumulator.close()
        timeout = self.config.request_timeout.total_seconds()
        try:
            await asyncio.wait_for(self.flush(), timeout)
            await asyncio.wait_for(self.sender.stop(), timeout)
        except TimeoutError:
            log.warning("KV writer did not drain within %.1fs of closing; failing what is left", timeout)
            await self.sender.abort()
            error = WriterClosedError("The connection closed before the write was acknowledged.")
            self.accumulator.fail_all_queued(error)
            for batch in self.accumulator.incomplete():
                self.accumulator.finished(batch)
                batch.fail(error)
