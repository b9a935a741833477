"""The KV writing machinery of a connection: the append writer's accumulator, sender and idempotence
rules, with KvRecordBatches in place of log batches and PutKv in place of ProduceLog.

Reused as they are: per-bucket queues, readiness (batch size, ``client.writer.batch-timeout``, flush),
draining one batch per bucket per leader, memory accounting, InitWriter, writer ids and batch
sequences, retries with backoff and metadata refreshes. What differs is small and lives here:

* `KvAccumulator.append_records` queues encoded records into `KvWriteBatch`es, starting a new batch when the
  target columns change (partial updates never share a batch with full-row writes);
* `KvSender.send_batches` turns the drained batches of one leader and table into PutKv requests, one per
  distinct set of target columns (Fluss's rule: a PutKv carries one ``target_columns``), and reads
  ``log_end_offset`` from each bucket's answer.

One `KvWriterClient` serves every upsert writer of a connection; it has its own writer id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.protobuf.message import Message

from strom.client.upsert.kv_write_batch import KvBatchFormat, KvWriteBatch
from strom.client.writer.accumulator import AppendOutcome, RecordAccumulator
from strom.client.writer.errors import WriterClosedError
from strom.client.writer.sender import Sender, add_bucket_requests
from strom.client.writer.write_batch import WriteBatch
from strom.client.writer.writer_machinery import WriterMachinery
from strom.common.table_path import PhysicalTablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

__all__ = ["KvAccumulator", "KvSender", "KvWriterClient"]

class KvAccumulator(RecordAccumulator):
    def append_records(
        self,
        path: PhysicalTablePath,
        bucket_id: int,
        fmt: KvBatchFormat,
        records: bytes | memoryview,
        count: int,
        target_columns: tuple[int, ...] | None,
    ) -> AppendOutcome:
        """Queue `count` encoded records (concatenated) for a bucket, in the bucket's open batch if it
        has room and the same target columns, else in a new one."""
        if self.closed:
            raise WriterClosedError("Cannot write: the writer is closed.")
        size = len(records)

        def add(batch: WriteBatch) -> None:
            assert isinstance(batch, KvWriteBatch)
            batch.add_records(records, count)

        return self.append_to_bucket(
            path,
            bucket_id,
            size,
            # Partial updates never share a batch with full-row writes or other target columns.
            # ... nor rows of writers on different schemas (before and after an AlterTable).
            fits=lambda batch: (
                isinstance(batch, KvWriteBatch)
                and batch.format.schema_id == fmt.schema_id
                and batch.format.bucket_count == fmt.bucket_count
                and batch.accepts(size, target_columns)
            ),
            new_batch=lambda batch_id: KvWriteBatch(
                batch_id, path, bucket_id, fmt, self.batch_size, self.now(), target_columns
            ),
            add=add,
        )


class KvSender(Sender):
    api_key = ApiKey.PUT_KV
    api_name = "PutKv"

    async def send_batches(
        self, node_id: int, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]
    ) -> None:
        # A PutKv carries one set of target columns: one request per distinct set.
        groups: dict[tuple[int, ...] | None, list[tuple[WriteBatch, bytes | bytearray]]] = {}
        for batch, payload in built:
            assert isinstance(batch, KvWriteBatch)
            groups.setdefault(batch.target_columns, []).append((batch, payload))
        await asyncio.gather(
            *(
                self.send_request(node_id, self.build_request(table_id, group), group)
                for group in groups.values()
            )
        )

    def build_request(self, table_id: int, built: list[tuple[WriteBatch, bytes | bytearray]]) -> Message:
        first = built[0][0]
        assert isinstance(first, KvWriteBatch)  # every batch of `built` has its target columns
        request = pb.PutKvRequest(
            acks=self.acks, table_id=table_id, timeout_ms=int(self.request_timeout * 1000)
        )
        if first.target_columns is not None:
            request.target_columns.extend(first.target_columns)
        add_bucket_requests(request, built)
        return request

    def answer_offset(self, answer: Any) -> int:
        return answer.log_end_offset if answer.HasField("log_end_offset") else -1


class KvWriterClient(WriterMachinery):
    accumulator_type = KvAccumulator
    sender_type = KvSender
    description = "KV writer"
    accumulator: KvAccumulator

    def append(
        self,
        path: PhysicalTablePath,
        fmt: KvBatchFormat,
        bucket: int,
        records: bytes | memoryview,
        count: int,
        target_columns: tuple[int, ...] | None,
    ) -> WriteBatch:
        """Queue encoded records for one bucket; returns the batch they went into."""
        if self.closed:
            raise WriterClosedError("Cannot write: the connection's KV writer is closed.")
        outcome = self.accumulator.append_records(path, bucket, fmt, records, count, target_columns)
        assert outcome.batch is not None
        return outcome.batch
