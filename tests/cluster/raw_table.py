"""Raw RPC access to a table for tests that forge requests: create it, find its bucket leaders, and
send produce, fetch, offset and PutKv requests as bytes, the way an attacker (or a buggy client) would."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
from harness import Cluster

from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import BIGINT, STRING
from strom.record.arrow_batch import build_arrow_log_batch
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb

SCHEMA = Schema([Column("id", BIGINT()), Column("name", STRING())])


def batch(start: int, count: int, schema_id: int = 1) -> bytes:
    records = pa.record_batch(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "name": [f"n{i}" for i in range(start, start + count)],
        }
    )
    return build_arrow_log_batch(records, schema_id=schema_id)


class Table:
    """Raw RPC access to a one-bucket table: its id and a connection to the bucket's leader."""

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        properties: dict[str, str] | None = None,
        schema: Schema = SCHEMA,
        buckets: int = 1,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.properties = properties or {}
        self.schema = schema
        self.buckets = buckets

    async def __aenter__(self) -> Table:
        host, port = self.cluster.coordinator.host, self.cluster.coordinator.port
        self.coordinator = await RpcConnection.connect(host, port)
        descriptor = TableDescriptor(self.schema, bucket_count=self.buckets, properties=self.properties)
        request = pb.CreateTableRequest(table_json=descriptor.to_json_bytes(), ignore_if_exists=False)
        request.table_path.database_name = "fluss"
        request.table_path.table_name = self.name
        await self.coordinator.request(ApiKey.CREATE_TABLE, request)
        metadata = pb.MetadataRequest()
        metadata.table_path.add(database_name="fluss", table_name=self.name)
        for _ in range(100):
            response = await self.coordinator.request(ApiKey.GET_METADATA, metadata)
            buckets = response.table_metadata[0].bucket_metadata
            if all(b.HasField("leader_id") for b in buckets):
                break
            await asyncio.sleep(0.1)
        self.table_id = response.table_metadata[0].table_id
        servers = {s.node_id: s for s in response.tablet_servers}
        self.leaders = {}
        for b in buckets:
            node = servers[b.leader_id]
            self.leaders[b.bucket_id] = await RpcConnection.connect(node.host, node.port)
        self.leader = self.leaders[0]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.coordinator.close()
        for connection in self.leaders.values():
            connection.close()

    async def produce(self, records: bytes, acks: int = -1, bucket: int = 0) -> Any:
        request = pb.ProduceLogRequest(acks=acks, table_id=self.table_id, timeout_ms=30000)
        request.buckets_req.add(bucket_id=bucket, records=records)
        return await self._send(bucket, ApiKey.PRODUCE_LOG, request)

    async def put_kv(self, records: bytes, bucket: int = 0, target_columns: list[int] | None = None) -> Any:
        request = pb.PutKvRequest(acks=-1, table_id=self.table_id, timeout_ms=30000)
        request.target_columns.extend(target_columns or [])
        request.buckets_req.add(bucket_id=bucket, records=records)
        return await self._send(bucket, ApiKey.PUT_KV, request)

    async def _send(self, bucket: int, key: ApiKey, request: Any) -> Any:
        for _ in range(50):  # the leader may not have opened the replica yet
            response = await self.leaders[bucket].request(key, request)
            result = response.buckets_resp[0]
            if result.error_code not in (12, 21):
                return result
            await asyncio.sleep(0.1)
        return result

    async def offsets(self) -> tuple[int, int]:
        out = []
        for kind in (0, 1):
            request = pb.ListOffsetsRequest(follower_server_id=-1, offset_type=kind, table_id=self.table_id)
            request.bucket_id.append(0)
            out.append((await self.leader.request(ApiKey.LIST_OFFSETS, request)).buckets_resp[0].offset)
        return out[0], out[1]

    async def fetch(
        self, offset: int, projection: list[int] | None = None, filter_predicate: Any = None
    ) -> Any:
        """One fetch of bucket 0; `filter_predicate` (a `PbPredicate`, possibly malformed) is sent as is."""
        request = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1 << 20, max_wait_ms=0)
        table = request.tables_req.add(
            table_id=self.table_id, projection_pushdown_enabled=projection is not None
        )
        table.projected_fields.extend(projection or [])
        if filter_predicate is not None:
            table.filter_predicate.CopyFrom(filter_predicate)
        table.buckets_req.add(bucket_id=0, fetch_offset=offset, max_fetch_bytes=1 << 20)
        # partial: a malformed predicate may lack required fields, which a real client would not send
        body = await self.leader.request_raw(ApiKey.FETCH_LOG, request.SerializePartialToString())
        return pb.FetchLogResponse.FromString(body).tables_resp[0].buckets_resp[0]
