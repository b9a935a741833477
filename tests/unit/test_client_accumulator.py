"""RecordAccumulator through its interface (no network): readiness (batch timeout, full batches,
flush), draining one batch per bucket per request with a rotating start so no bucket starves,
the in-flight limit per bucket, a retried batch going back ahead of later ones in sequence order,
and buffer memory counted in pages and given back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pyarrow as pa

from strom.client.cluster import Cluster
from strom.client.config import ClientConfig
from strom.client.writer.accumulator import RecordAccumulator
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.write_batch import BatchFormat
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.rpc.gen import fluss_api_pb2 as pb

TABLE = TablePath("db", "t")
PATH = PhysicalTablePath(TABLE)
TABLE_ID = 7
ARROW = pa.schema([("id", pa.int64())])
FORMAT = BatchFormat(TABLE, TABLE_ID, 1, ARROW, "NONE", 0)
LEADER = 1


def _cluster(buckets: int) -> Cluster:
    response = pb.MetadataResponse()
    response.tablet_servers.add(node_id=LEADER, host="127.0.0.1", port=1)
    descriptor = TableDescriptor(Schema.from_arrow_schema(ARROW), bucket_count=buckets)
    meta = response.table_metadata.add(
        table_id=TABLE_ID, schema_id=1, table_json=descriptor.to_json_bytes(), created_time=0, modified_time=0
    )
    meta.table_path.database_name, meta.table_path.table_name = TABLE.database_name, TABLE.table_name
    for b in range(buckets):
        meta.bucket_metadata.add(bucket_id=b, leader_id=LEADER).replica_id.append(LEADER)
    return Cluster().with_metadata(response)


def _rows(n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(n), pa.int64())})


def run(
    body: Callable[[RecordAccumulator, IdempotenceManager], None],
    options: dict[str, str],
    idempotent: bool = False,
) -> None:
    async def main() -> None:
        config = ClientConfig.from_dict(options)
        idempotence = IdempotenceManager(idempotent, config.writer_max_inflight_requests_per_bucket)
        if idempotent:
            idempotence.set_writer_id(42)
        body(RecordAccumulator(config, idempotence), idempotence)

    asyncio.run(main())


def test_a_bucket_is_ready_after_the_batch_timeout_when_full_or_when_flushing() -> None:
    def body(acc: RecordAccumulator, _idem: IdempotenceManager) -> None:
        cluster = _cluster(1)
        acc.append(PATH, 0, FORMAT, _rows(1))
        check = acc.ready(cluster)
        assert not check.nodes and check.next_delay is not None and 9 < check.next_delay <= 10
        acc.begin_flush()
        assert acc.ready(cluster).nodes == {LEADER}
        acc.end_flush()
        acc.append(PATH, 0, FORMAT, _rows(200))  # past the batch size: the batch closes
        acc.append(PATH, 0, FORMAT, _rows(1))
        assert acc.ready(cluster).nodes == {LEADER}

    run(body, {"client.writer.batch-timeout": "10s", "client.writer.batch-size": "1kb"})


def test_draining_rotates_over_buckets_so_none_starves() -> None:
    def body(acc: RecordAccumulator, _idem: IdempotenceManager) -> None:
        cluster = _cluster(3)
        for bucket in range(3):
            for _round in range(3):
                acc.append(PATH, bucket, FORMAT, _rows(100))  # 800 bytes: one batch each
        order = []
        for _ in range(3):
            # a request has room for one batch only: the start bucket moves on every drain
            drained = acc.drain(cluster, {LEADER}, max_request_size=1)[LEADER]
            assert len(drained) == 1
            order.append(drained[0].bucket_id)
            acc.finished(drained[0])
        assert sorted(order) == [0, 1, 2]
        # with room for all, one batch per bucket per request, oldest first
        drained = acc.drain(cluster, {LEADER}, max_request_size=1 << 20)[LEADER]
        assert sorted(b.bucket_id for b in drained) == [0, 1, 2]

    run(body, {"client.writer.batch-size": "1kb", "client.writer.batch-timeout": "0ms"})


def test_the_in_flight_limit_per_bucket_holds_batches_back() -> None:
    def body(acc: RecordAccumulator, _idem: IdempotenceManager) -> None:
        cluster = _cluster(1)
        for _ in range(4):
            acc.append(PATH, 0, FORMAT, _rows(100))
        sent = [acc.drain(cluster, {LEADER}, 1 << 20).get(LEADER, []) for _ in range(4)]
        assert [len(s) for s in sent] == [1, 1, 0, 0]  # two in flight, the rest wait
        acc.finished(sent[0][0])
        assert len(acc.drain(cluster, {LEADER}, 1 << 20)[LEADER]) == 1

    run(
        body,
        {
            "client.writer.batch-size": "1kb",
            "client.writer.batch-timeout": "0ms",
            "client.writer.enable-idempotence": "false",
            "client.writer.max-inflight-requests-per-bucket": "2",
        },
    )


def test_a_retried_batch_goes_back_ahead_of_later_ones_in_sequence_order() -> None:
    def body(acc: RecordAccumulator, idem: IdempotenceManager) -> None:
        cluster = _cluster(1)
        for _ in range(4):
            acc.append(PATH, 0, FORMAT, _rows(100))
        first, second = (acc.drain(cluster, {LEADER}, 1 << 20)[LEADER][0] for _ in range(2))
        assert (first.batch_sequence, second.batch_sequence) == (0, 1)
        # both fail with a retriable error; each goes back ahead of the batches never sent, and
        # the later one behind the earlier one (not simply at the head of the queue)
        acc.reenqueue(first)
        acc.reenqueue(second)
        first.retry_at = second.retry_at = 0.0  # no backoff, for the test
        again = acc.drain(cluster, {LEADER}, 1 << 20)[LEADER]
        assert [b.batch_sequence for b in again] == [0]  # only the oldest unacknowledged goes first
        idem.completed(again[0].table_bucket, again[0].batch_id, again[0].writer_id)  # type: ignore[arg-type]
        acc.finished(again[0])
        rest = acc.drain(cluster, {LEADER}, 1 << 20)[LEADER]
        assert [b.batch_sequence for b in rest] == [1]

    run(body, {"client.writer.batch-size": "1kb", "client.writer.batch-timeout": "0ms"}, idempotent=True)


def test_memory_is_counted_in_pages_and_given_back() -> None:
    def body(acc: RecordAccumulator, _idem: IdempotenceManager) -> None:
        cluster = _cluster(2)
        acc.append(PATH, 0, FORMAT, _rows(1))
        acc.append(PATH, 1, FORMAT, _rows(1))
        assert acc.buffered_bytes == 2 * (4 << 10)  # a page per batch, however small
        acc.append(PATH, 0, FORMAT, _rows(1100))  # 8.8 kB more in bucket 0's batch: 3 pages
        assert acc.buffered_bytes == (3 + 1) * (4 << 10)
        drained = acc.drain(cluster, {LEADER}, 1 << 20)[LEADER]
        for batch in drained:
            acc.finished(batch)
        assert acc.buffered_bytes == 0

    run(
        body,
        {
            "client.writer.buffer.page-size": "4kb",
            "client.writer.batch-size": "64kb",
            "client.writer.batch-timeout": "0ms",
        },
    )
