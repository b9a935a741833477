"""A small in-process Fluss server for client unit tests: one asyncio RpcServer on a loopback port
(port 0, from the OS) speaking our RPC framing, acting as the coordinator and as tablet server 1.

It serves one log table in memory: Metadata, InitWriter, ProduceLog (stores the client's batch
bytes, patches the base offset, checks idempotent batch sequences as
strom/server/tablet/log/writer_state.py does on a leader) and FetchLog (from an offset). A test
scripts faults through `produce_errors` (error codes answered to the next ProduceLog entries of a
bucket), `fetch_errors`, `produce_gate` (cleared: ProduceLog requests wait) and `leader` (None: no
leader known). It is a fake *server*: the client components under test run unchanged against it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strom.common.errors import CorruptMessageError, OutOfOrderSequenceError
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.table_path import TablePath
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.log_batch import iter_batches, patch_offset_and_timestamp
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext, RpcServer

TABLE = TablePath("fluss", "events")
TABLE_ID = 11
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
NODE_ID = 1


@dataclass
class StoredBatch:
    base_offset: int
    data: bytes
    writer_id: int
    sequence: int


@dataclass
class FakeFluss:
    buckets: int = 2
    server: RpcServer | None = None
    log: dict[int, list[StoredBatch]] = field(default_factory=lambda: defaultdict(list))
    # bucket -> error codes for its next ProduceLog entries (one popped per request)
    produce_errors: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    fetch_errors: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    leader: int | None = NODE_ID
    # errors raised by the next Metadata requests (answered as error frames)
    metadata_errors: list[Exception] = field(default_factory=list)
    # Metadata requests wait while this is clear
    metadata_gate: asyncio.Event = field(default_factory=asyncio.Event)
    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # ProduceLog requests block while this is clear (to hold batches in flight)
    produce_gate: asyncio.Event = field(default_factory=asyncio.Event)
    _next_writer: int = 100
    _last_sequence: dict[tuple[int, int], int] = field(default_factory=dict)

    async def start(self) -> FakeFluss:
        self.produce_gate.set()
        self.metadata_gate.set()
        handlers: dict[ApiKey, Any] = {
            ApiKey.GET_METADATA: self._metadata,
            ApiKey.INIT_WRITER: self._init_writer,
            ApiKey.PRODUCE_LOG: self._produce,
            ApiKey.FETCH_LOG: self._fetch,
        }
        self.server = RpcServer(
            name="fake fluss",
            host="127.0.0.1",
            port=0,
            handlers=handlers,
            server_type=ServerType.TABLET_SERVER,
        )
        await self.server.start()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    def ids(self, bucket: int) -> list[int]:
        """The `id` column of every stored row of a bucket, in log order."""
        out: list[int] = []
        for stored in self.log[bucket]:
            for pos, header in iter_batches(stored.data):
                records, _ = decode_arrow_batch(stored.data, pos, header, SCHEMA)
                out.extend(records.column("id").to_pylist())
        return out

    # ------------------------------------------------------------------ handlers

    def _node(self, node: pb.PbServerNode) -> None:
        assert self.server is not None
        node.node_id = NODE_ID
        node.host = "127.0.0.1"
        node.port = self.server.port

    async def _metadata(self, request: pb.MetadataRequest, ctx: RequestContext) -> pb.MetadataResponse:
        self.requests["metadata"] += 1
        await self.metadata_gate.wait()
        if self.metadata_errors:
            raise self.metadata_errors.pop(0)
        response = pb.MetadataResponse()
        self._node(response.coordinator_server)
        self._node(response.tablet_servers.add())
        for path in request.table_path:
            if (path.database_name, path.table_name) != (TABLE.database_name, TABLE.table_name):
                continue
            descriptor = TableDescriptor(Schema.from_arrow_schema(SCHEMA), bucket_count=self.buckets)
            meta = response.table_metadata.add(
                table_id=TABLE_ID,
                schema_id=1,
                table_json=descriptor.to_json_bytes(),
                created_time=0,
                modified_time=0,
            )
            meta.table_path.database_name = TABLE.database_name
            meta.table_path.table_name = TABLE.table_name
            for b in range(self.buckets):
                entry = meta.bucket_metadata.add(bucket_id=b)
                entry.replica_id.append(NODE_ID)
                if self.leader is not None:
                    entry.leader_id = self.leader
        return response

    async def _init_writer(self, request: pb.InitWriterRequest, ctx: RequestContext) -> pb.InitWriterResponse:
        self.requests["init_writer"] += 1
        self._next_writer += 1
        return pb.InitWriterResponse(writer_id=self._next_writer)

    async def _produce(self, request: pb.ProduceLogRequest, ctx: RequestContext) -> pb.ProduceLogResponse:
        self.requests["produce"] += 1
        await self.produce_gate.wait()
        # The server parses ProduceLog without its records (they are read as views of the body);
        # this fake simply parses the whole body again.
        request = pb.ProduceLogRequest.FromString(bytes(ctx.body))
        response = pb.ProduceLogResponse()
        for entry in request.buckets_req:
            answer = response.buckets_resp.add(bucket_id=entry.bucket_id)
            scripted = self.produce_errors[entry.bucket_id]
            if scripted:
                answer.error_code = scripted.pop(0)
                answer.error_message = "scripted by the test"
                continue
            code, base = self._append(entry.bucket_id, bytes(entry.records))
            if code:
                answer.error_code = code
                answer.error_message = "sequence check"
            else:
                answer.base_offset = base
        return response

    def _append(self, bucket: int, records: bytes) -> tuple[int, int]:
        """Append like a leader: check each writer's batch sequence, assign offsets."""
        log = self.log[bucket]
        batches = list(iter_batches(records))
        if not batches:
            return CorruptMessageError.code, -1
        first = batches[0][1]
        key = (first.writer_id, bucket)
        if first.writer_id >= 0:
            last = self._last_sequence.get(key)
            if last is None and first.batch_sequence != 0:
                return OutOfOrderSequenceError.code, -1  # as a leader: a new writer starts at 0
            if last is not None and first.batch_sequence <= last:
                for stored in log:  # a duplicate: answered with the offset it got the first time
                    if stored.writer_id == first.writer_id and stored.sequence == first.batch_sequence:
                        return 0, stored.base_offset
            if last is not None and first.batch_sequence != last + 1:
                return OutOfOrderSequenceError.code, -1
            self._last_sequence[key] = first.batch_sequence
        base = log[-1].base_offset + _count(log[-1].data) if log else 0
        data = bytearray(records)
        offset = base
        for pos, header in batches:
            patch_offset_and_timestamp(data, pos, offset, 0)
            offset += header.record_count
        log.append(StoredBatch(base, bytes(data), first.writer_id, first.batch_sequence))
        return 0, base

    async def _fetch(self, request: pb.FetchLogRequest, ctx: RequestContext) -> pb.FetchLogResponse:
        self.requests["fetch"] += 1
        response = pb.FetchLogResponse()
        for table in request.tables_req:
            table_answer = response.tables_resp.add(table_id=table.table_id)
            for entry in table.buckets_req:
                answer = table_answer.buckets_resp.add(bucket_id=entry.bucket_id)
                scripted = self.fetch_errors[entry.bucket_id]
                if scripted:
                    answer.error_code = scripted.pop(0)
                    answer.error_message = "scripted by the test"
                    continue
                log = self.log[entry.bucket_id]
                end = log[-1].base_offset + _count(log[-1].data) if log else 0
                answer.high_watermark = end
                answer.log_start_offset = 0
                data = b"".join(s.data for s in log if s.base_offset + _count(s.data) > entry.fetch_offset)
                if data:
                    answer.records = data
        return response


def _count(data: bytes) -> int:
    return sum(header.record_count for _, header in iter_batches(data))
