"""Committed offsets of consumer groups, kept in an internal topic so they survive their coordinator.

As Kafka does with `__consumer_offsets`: the table `strom-consumer-offsets` in `kafka.database` (the
topic schema, `OFFSETS_BUCKETS` buckets, replicated like any table) holds one record per commit, key
`group NUL topic NUL partition`, value the offset and metadata as JSON. A group belongs to bucket
`crc32(group) % OFFSETS_BUCKETS`, and the leader of that bucket is the group's coordinator, so a new
leader (after a failover) has every acknowledged commit in its log. A coordinator reads a group's
commits from the bucket the first time it serves the group in its current leader epoch (the part of
the bucket tiered to remote storage included), and writes each commit with acks=all before it answers.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from strom.common.errors import error_for_code
from strom.record.arrow_batch import build_arrow_log_batch, decode_arrow_batch
from strom.record.log_batch import iter_batches
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.server.tablet.log_service import LogService, earliest_offset
from strom.server.tablet.remote_log import read_remote_batches
from strom.server.tablet.replica_manager import Replica

OFFSETS_TOPIC = "strom-consumer-offsets"
OFFSETS_BUCKETS = 4
_COMMIT_TIMEOUT_MS = 10_000
_READ_BYTES = 8 << 20

Offsets = dict[tuple[str, int], tuple[int, str | None]]


def offsets_bucket(group_id: str) -> int:
    return zlib.crc32(group_id.encode()) % OFFSETS_BUCKETS


def _key(group_id: str, topic: str, partition: int) -> bytes:
    return f"{group_id}\0{topic}\0{partition}".encode()


@dataclass
class OffsetsStore:
    log_service: LogService
    # the context a LogService call needs (the Kafka session's)
    context: Callable[[], RequestContext]

    async def write(self, replica: Replica, group_id: str, offsets: Offsets) -> None:
        """Append one record per partition and wait for the ISR; raises FlussError when not stored."""
        now = int(time.time() * 1000)
        keys = [_key(group_id, topic, partition) for topic, partition in offsets]
        values = [json.dumps({"offset": o, "metadata": m}).encode() for o, m in offsets.values()]
        schema = replica.arrow_schema()
        records = pa.RecordBatch.from_arrays(
            [
                pa.array(keys, schema.field(0).type),
                pa.array(values, schema.field(1).type),
                pa.array([[] for _ in keys], schema.field(2).type),
                pa.array([now] * len(keys), pa.int64()).cast(schema.field(3).type),
            ],
            schema=schema,
        )
        request = pb.ProduceLogRequest(
            acks=-1, table_id=replica.bucket.table_id, timeout_ms=_COMMIT_TIMEOUT_MS
        )
        request.buckets_req.add(
            bucket_id=replica.bucket.bucket,
            records=build_arrow_log_batch(records, schema_id=replica.table_info.schema_id),
        )
        answer = await self.log_service.produce_log(request, self.context())
        result = answer.buckets_resp[0]
        if result.HasField("error_code") and result.error_code:
            raise error_for_code(result.error_code, result.error_message)

    async def read(self, replica: Replica, group_id: str) -> Offsets:
        """The group's latest commits, read from the bucket's log up to its high watermark."""
        prefix = f"{group_id}\0".encode()
        found: Offsets = {}
        offset = earliest_offset(replica)
        schema = replica.arrow_schema()
        while offset < replica.log_tablet().high_watermark:
            request = pb.FetchLogRequest(
                follower_server_id=-1, max_bytes=_READ_BYTES, max_wait_ms=0, min_bytes=0
            )
            table = request.tables_req.add(
                table_id=replica.bucket.table_id, projection_pushdown_enabled=False
            )
            table.buckets_req.add(
                bucket_id=replica.bucket.bucket, fetch_offset=offset, max_fetch_bytes=_READ_BYTES
            )
            encoded = await self.log_service.fetch_log(request, self.context())
            answer = pb.FetchLogResponse.FromString(b"".join(bytes(c) for c in encoded.chunks))
            bucket = answer.tables_resp[0].buckets_resp[0]
            if bucket.HasField("error_code") and bucket.error_code:
                raise error_for_code(bucket.error_code, bucket.error_message)
            data = bucket.records
            if bucket.HasField("remote_log_fetch_info") and replica.remote is not None:
                # below the local log start: the commits there were tiered to remote storage, and a
                # group whose last commit is old would lose it if they were skipped
                data = await asyncio.get_running_loop().run_in_executor(
                    None, read_remote_batches, replica.remote, offset, _READ_BYTES
                )
            if not data:
                break  # nothing more to read
            for pos, header in iter_batches(data):
                if header.record_count == 0:
                    offset = max(offset, header.base_offset + header.last_offset_delta + 1)
                    continue
                batch, _ = decode_arrow_batch(data, pos, header, schema)
                for i, (key, value) in enumerate(
                    zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
                ):
                    if header.base_offset + i < offset or key is None or not key.startswith(prefix):
                        continue
                    _, topic, partition = key.decode().split("\0")
                    entry = json.loads(value)
                    found[(topic, int(partition))] = (int(entry["offset"]), entry.get("metadata"))
                offset = max(offset, header.base_offset + header.last_offset_delta + 1)
        return found
