"""Fluss 1.0's ScanKv (1061), GetClusterHealth (1062) and AlterDatabase (1060) on a real cluster.

ScanKv must read one consistent snapshot page by page: rows written or deleted after the scan opened
are not in it, and `log_offset` is where the changelog goes on from. Scanners are refused out of
order, expire after kv.scanner.ttl, and refuse what Fluss refuses."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow as pa
import pytest
from harness import Cluster

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.admin import AlterConfig
from strom.client.offset_spec import OffsetSpec
from strom.common import errors
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import DatabaseDescriptor
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb


def test_scan_kv_cluster_health_and_alter_database(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={"kv.scanner.ttl": "3s", "kv.scanner.expiration-interval": "100ms"}
    )
    path, log_path = TablePath("fluss", "scanned"), TablePath("fluss", "scanned_log")
    schema = pa.schema([("k", pa.int32()), ("v", pa.string())])

    async def body(conn: Connection) -> None:
        admin = conn.get_admin()
        await admin.create_table(
            path, TableDescriptor(Schema.from_arrow_schema(schema, primary_key=["k"]), bucket_count=1)
        )
        await admin.create_table(log_path, TableDescriptor(Schema.from_arrow_schema(schema), bucket_count=1))
        table = await conn.get_table(path)
        async with table.new_upsert().create_writer() as upserts:
            for k in range(300):
                upserts.upsert({"k": k, "v": f"old-{k:04d}-" + "x" * 80})
        end = (await admin.list_offsets(path, [0], OffsetSpec.latest()))[0]
        bucket = TableBucket(table.table_id, None, 0)
        leader = conn.metadata.leader_for(bucket)
        assert leader is not None
        server = await conn.pool.get(leader.host, leader.port)
        assert {ApiKey.SCAN_KV, ApiKey.GET_CLUSTER_HEALTH} <= set(server.api_versions)

        # a consistent snapshot, in pages: writes after the first page are not seen
        scanner = table.new_scan().create_kv_scanner(0, batch_size_bytes=4000)
        pages = [await scanner.next_batch()]
        assert scanner.log_offset == end
        async with table.new_upsert().create_writer() as upserts:
            for k in range(10):
                upserts.delete({"k": k})
            for k in range(10, 20):
                upserts.upsert({"k": k, "v": "new"})
            for k in range(1000, 1100):
                upserts.upsert({"k": k, "v": "new"})
        pages += [page async for page in scanner]
        assert len(pages) > 5  # 4000-byte pages of ~90-byte rows
        rows = pa.Table.from_batches([p for p in pages if p is not None]).to_pylist()
        assert sorted(r["k"] for r in rows) == list(range(300))
        assert all(r["v"].startswith(f"old-{r['k']:04d}-") for r in rows)
        # a new scan sees the new state; limit stops it early
        now = await table.new_scan().create_kv_scanner(0).to_arrow()
        assert sorted(now.column("k").to_pylist()) == list(range(10, 300)) + list(range(1000, 1100))
        assert (await table.new_scan().create_kv_scanner(0, limit=7).to_arrow()).num_rows == 7

        async def scan(**fields: Any) -> pb.ScanKvResponse:
            return await server.request(ApiKey.SCAN_KV, pb.ScanKvRequest(**fields))

        def open_req(table_id: int = table.table_id) -> pb.PbScanReqForBucket:
            return pb.PbScanReqForBucket(table_id=table_id, bucket_id=0)

        first = await scan(bucket_scan_req=open_req(), call_seq_id=0, batch_size_bytes=1)
        assert first.error_code == 0 and first.has_more_results and first.HasField("scanner_id")
        sid = first.scanner_id
        # one row per page at least, and in sequence: a repeated or skipped call_seq_id is refused
        for seq, code in ((2, 68), (0, 68), (1, 0), (1, 68)):
            answer = await scan(scanner_id=sid, call_seq_id=seq, batch_size_bytes=1)
            assert answer.error_code == code, (seq, answer)
        for fields, code in (
            (dict(scanner_id=b"nope", call_seq_id=1, batch_size_bytes=10), 67),
            (dict(bucket_scan_req=open_req(), scanner_id=sid, call_seq_id=0, batch_size_bytes=10), 68),
            (dict(bucket_scan_req=open_req(), call_seq_id=0), 68),  # no batch size
            (dict(bucket_scan_req=open_req(), call_seq_id=0, batch_size_bytes=0), 68),
            (dict(bucket_scan_req=open_req(), batch_size_bytes=10), 68),  # no call_seq_id
            (
                dict(
                    bucket_scan_req=open_req((await conn.get_table(log_path)).table_id),
                    call_seq_id=0,
                    batch_size_bytes=10,
                ),
                errors.NonPrimaryKeyTableError.code,
            ),
        ):
            assert (await scan(**fields)).error_code == code, fields
        # closed by the client: gone; idle past kv.scanner.ttl: expired
        assert (await scan(scanner_id=sid, close_scanner=True)).error_code == 0
        assert (await scan(scanner_id=sid, call_seq_id=2, batch_size_bytes=1)).error_code == 67
        # (a scanner left idle now is checked at the end, past the 3 s TTL)
        idle = (await scan(bucket_scan_req=open_req(), call_seq_id=0, batch_size_bytes=1)).scanner_id
        idle_since = time.monotonic()

        # cluster health, from the coordinator and passed on by a tablet server
        health = await admin.get_cluster_health()
        assert health.status == "GREEN" and health.num_leader_replicas == 2 == health.active_leader_replicas
        assert health.num_replicas == health.in_sync_replicas == 2
        via_tablet = await server.request(ApiKey.GET_CLUSTER_HEALTH, pb.GetClusterHealthRequest())
        assert via_tablet.num_leader_replicas == 2 and via_tablet.status == 0

        # AlterDatabase: properties set and reset, comment set and removed
        await admin.create_database("altered", DatabaseDescriptor("first", {"a": "1", "b": "2"}))
        await admin.alter_database(
            "altered", [AlterConfig("a", "10"), AlterConfig("b", None)], comment="second"
        )
        info = await admin.get_database_info("altered")
        assert info.descriptor == DatabaseDescriptor("second", {"a": "10"})
        assert info.modified_time >= info.created_time
        await admin.alter_database("altered", comment="")
        assert (await admin.get_database_info("altered")).descriptor == DatabaseDescriptor(None, {"a": "10"})
        with pytest.raises(errors.DatabaseNotExistError):
            await admin.alter_database("missing", [AlterConfig("a", "1")])
        await admin.alter_database("missing", [AlterConfig("a", "1")], ignore_if_not_exists=True)
        bad = pb.AlterDatabaseRequest(database_name="altered", ignore_if_not_exists=False)
        bad.config_changes.add(config_key="a", config_value="x", op_type=2)
        with pytest.raises(errors.InvalidConfigError, match="op type 2"):
            await admin._call(ApiKey.ALTER_DATABASE, bad, read_only=False)

        await asyncio.sleep(max(0.0, 3.5 - (time.monotonic() - idle_since)))
        expired = await scan(scanner_id=idle, call_seq_id=1, batch_size_bytes=1)
        assert expired.error_code == errors.ScannerExpiredError.code, expired

    async def main() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            await asyncio.wait_for(body(conn), 90)

    asyncio.run(main())
