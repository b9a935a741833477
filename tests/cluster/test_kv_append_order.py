"""The PutKvs of one connection reach the log in the order they were sent, as in Fluss (one request
thread per connection), even when the first waits for a KV tablet to open: an idempotent writer's
next batch of a bucket must not overtake the one before it, or it is refused as out of order."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

from harness import Cluster
from raw_table import Table

from strom.common.bucketing import fluss_bucket
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.common.types import BIGINT, STRING
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.kv_batch import build_kv_batch
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.tablet.kv.recovery import table_key_encoder

SCHEMA = Schema([Column("id", BIGINT()), Column("name", STRING())], primary_key=["id"])
BUCKETS = 6  # more than the shared cluster's servers: two buckets share a leader
WRITER_ID = 4242


def test_a_pipelined_put_kv_does_not_overtake_one_waiting_for_a_kv_tablet(shared_cluster: Cluster) -> None:
    """Request 1 carries bucket A (its KV tablet not open yet) then sequence 0 of bucket B; request 2,
    sent right behind it on the same connection, sequence 1 of B. Before the fix request 2 appended
    while request 1 waited for A's tablet, and was refused: OUT_OF_ORDER_SEQUENCE for sequence 1."""
    name = f"kv_order_{uuid.uuid4().hex[:8]}"
    info = TableInfo(TablePath("fluss", name), 0, 1, TableDescriptor(SCHEMA, bucket_count=BUCKETS), 0, 0)
    key_encoder = table_key_encoder(info)
    encode_row = CompactedRowEncoder(SCHEMA.row_type).encode

    def ids_of(bucket: int, count: int) -> list[int]:
        """Ids whose rows belong to `bucket`."""
        found = (i for i in range(10_000) if fluss_bucket(key_encoder.encode_key((i, "")), BUCKETS) == bucket)
        return [next(found) for _ in range(count)]

    def batch(ids: list[int], sequence: int = -1) -> bytes:
        rows = [(i, f"v{i}") for i in ids]
        records = [(key_encoder.encode_key(row), encode_row(row)) for row in rows]
        writer_id = WRITER_ID if sequence >= 0 else -1
        return build_kv_batch(records, schema_id=1, writer_id=writer_id, batch_sequence=sequence)

    def put(table_id: int, *entries: tuple[int, bytes]) -> pb.PutKvRequest:
        request = pb.PutKvRequest(acks=-1, table_id=table_id, timeout_ms=30000)
        for bucket, records in entries:
            request.buckets_req.add(bucket_id=bucket, records=records)
        return request

    async def body() -> tuple[list[pb.PbPutKvRespForBucket], list[pb.PbPutKvRespForBucket]]:
        async with Table(shared_cluster, name, schema=SCHEMA, buckets=BUCKETS) as table:
            by_leader: dict[object, list[int]] = defaultdict(list)
            for bucket, connection in table.leaders.items():
                by_leader[connection.address].append(bucket)
            a, b = next(buckets for buckets in by_leader.values() if len(buckets) >= 2)[:2]
            # B's tablet opens now (a write without a writer id); A's stays closed until request 1
            in_a, in_b = ids_of(a, 1), ids_of(b, 3)
            warm = await table.put_kv(batch(in_b[:1]), bucket=b)
            assert warm.error_code == 0, warm
            connection = table.leaders[a]
            first = asyncio.create_task(
                connection.request(
                    ApiKey.PUT_KV, put(table.table_id, (a, batch(in_a)), (b, batch(in_b[1:2], 0)))
                )
            )
            await asyncio.sleep(0)  # request 1 is on the wire before request 2
            second = asyncio.create_task(
                connection.request(ApiKey.PUT_KV, put(table.table_id, (b, batch(in_b[2:], 1))))
            )
            one, two = await asyncio.gather(first, second)
            return list(one.buckets_resp), list(two.buckets_resp)

    one, two = asyncio.run(body())
    assert [(r.error_code, r.error_message) for r in one + two] == [(0, "")] * 3
    # B's changelog: the warm-up row at offset 0, then sequence 0, then sequence 1, once each
    assert (one[1].log_end_offset, two[0].log_end_offset) == (2, 3)
