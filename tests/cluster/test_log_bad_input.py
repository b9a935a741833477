"""Bad produce and fetch requests get Fluss error codes and change nothing; TTL retention runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from harness import Cluster
from raw_table import Table, batch

from strom.common.errors import InvalidRequiredAcksError
from strom.common.schema import Column, Schema
from strom.common.types import BIGINT, STRING
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb


def test_bad_batches_are_refused_and_change_nothing(shared_cluster: Cluster) -> None:
    async def main() -> None:
        async with Table(shared_cluster, f"bad_{time.monotonic_ns()}") as table:
            assert (await table.produce(batch(0, 10))).base_offset == 0
            assert await table.offsets() == (0, 10)

            corrupt = bytearray(batch(10, 5))
            corrupt[-3] ^= 0xFF  # flip a byte inside the CRC-covered Arrow body
            result = await table.produce(bytes(corrupt))
            assert result.error_code == 14 and "CRC" in result.error_message.upper()

            result = await table.produce(batch(10, 5, schema_id=7))
            assert result.error_code == 9 and "schema id 7" in result.error_message

            truncated = batch(10, 5)[:-20]
            result = await table.produce(truncated)
            assert result.error_code == 14

            with pytest.raises(InvalidRequiredAcksError):
                await table.produce(batch(10, 5), acks=2)

            assert await table.offsets() == (0, 10)  # nothing of the above landed

            bad_projection = await table.fetch(0, projection=[5])
            assert bad_projection.error_code == 34
            out_of_range = await table.fetch(11)
            assert out_of_range.error_code == 19
            good = await table.fetch(0, projection=[1])
            assert good.error_code == 0 and good.high_watermark == 10 and len(good.records) > 0

    asyncio.run(main())


def test_ttl_retention_deletes_old_segments(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(
        tablet_servers=1,
        config={
            "log.segment.file-size": "2kb",
            "log.retention.check-interval": "200ms",
        },
    )

    async def main() -> None:
        async with Table(cluster, "short_lived", {"table.log.ttl": "1s"}) as table:
            for start in range(0, 200, 20):
                result = await table.produce(batch(start, 20))
                assert result.error_code == 0
            start_offset, end_offset = await table.offsets()
            assert (start_offset, end_offset) == (0, 200)
            deadline = time.monotonic() + 15
            while (await table.offsets())[0] == 0:
                assert time.monotonic() < deadline, "retention never advanced the log start"
                await asyncio.sleep(0.2)
            start_offset, end_offset = await table.offsets()
            assert 0 < start_offset <= 200 and end_offset == 200
            assert (await table.fetch(0)).error_code == 19  # below the new log start

    asyncio.run(main())


def test_segment_truncated_mid_batch_is_repaired_at_start_up(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1)

    async def write() -> None:
        async with Table(cluster, "torn") as table:
            for start in range(0, 100, 10):
                assert (await table.produce(batch(start, 10))).error_code == 0
            assert await table.offsets() == (0, 100)

    asyncio.run(write())
    cluster.kill_tablet_server(0)  # a crash: no clean-shutdown marker, so start-up checks the tail
    segment = next((cluster.tablet_servers[0].data_dir / "fluss").rglob("*.log"))
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 25])  # cut into the last batch
    cluster.start_tablet_server(0)
    cluster.wait_for_tablet_servers({0})

    async def check() -> None:
        conn = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
        request = pb.MetadataRequest()
        request.table_path.add(database_name="fluss", table_name="torn")
        metadata = await conn.request(ApiKey.GET_METADATA, request)
        conn.close()
        table_id = metadata.table_metadata[0].table_id
        server = cluster.tablet_servers[0]
        leader = await RpcConnection.connect(server.host, server.port)
        offsets = pb.ListOffsetsRequest(follower_server_id=-1, offset_type=1, table_id=table_id)
        offsets.bucket_id.append(0)
        for _ in range(50):
            answer = (await leader.request(ApiKey.LIST_OFFSETS, offsets)).buckets_resp[0]
            if answer.error_code == 0:
                break
            await asyncio.sleep(0.1)
        # the torn batch (offsets 90..99) is gone, the nine whole ones before it are intact
        assert answer.offset == 90
        produce = pb.ProduceLogRequest(acks=-1, table_id=table_id, timeout_ms=30000)
        produce.buckets_req.add(bucket_id=0, records=batch(90, 10))
        result = (await leader.request(ApiKey.PRODUCE_LOG, produce)).buckets_resp[0]
        assert result.error_code == 0 and result.base_offset == 90  # appends continue at the right offset
        leader.close()

    asyncio.run(check())


def test_appends_to_a_primary_key_table_are_refused(shared_cluster: Cluster) -> None:
    pk_schema = Schema([Column("id", BIGINT()), Column("name", STRING())], primary_key=["id"])

    async def main() -> None:
        async with Table(shared_cluster, f"pk_{time.monotonic_ns()}", schema=pk_schema) as table:
            result = await table.produce(batch(0, 10))
            assert result.error_code == 15 and "primary key" in result.error_message
            assert await table.offsets() == (0, 0)

    asyncio.run(main())


def test_malformed_filters_are_refused_never_hide_rows(shared_cluster: Cluster) -> None:
    """A filter the server cannot read exactly gets INVALID_SCAN_REQUEST; it never skips batches."""

    def literal(**fields: Any) -> Any:
        return pb.PbLiteralValue(**fields)

    def leaf(function: int, field_id: int, *literals: Any) -> Any:
        message = pb.PbPredicate(type=0)
        message.leaf.function = function
        message.leaf.field_id = field_id
        message.leaf.literals.extend(literals)
        return message

    bigint = literal(literal_type=4, is_null=False, bigint_value=3)
    bad_filters = {
        "empty": pb.PbPredicate(),
        "leaf without its leaf": pb.PbPredicate(type=0),
        "unknown operator": leaf(77, 0, bigint),
        "unknown predicate type": pb.PbPredicate(type=5),
        "unknown column id": leaf(0, 42, bigint),
        "EQUAL without a literal": leaf(0, 0),
        "a STRING literal for a BIGINT column": leaf(
            0, 0, literal(literal_type=8, is_null=False, string_value="3")
        ),
        "a non-null literal without its value": leaf(0, 0, literal(literal_type=4, is_null=False)),
        "a literal without a type": leaf(0, 0, literal(is_null=False, bigint_value=3)),
        "STARTS_WITH on a BIGINT column": leaf(8, 0, bigint),
        "an empty OR": pb.PbPredicate(type=1, compound=pb.PbCompoundPredicate(function=1)),
    }

    async def main() -> None:
        async with Table(shared_cluster, f"bad_filter_{time.monotonic_ns()}") as table:
            assert (await table.produce(batch(0, 10))).error_code == 0
            for name, bad in bad_filters.items():
                result = await table.fetch(0, filter_predicate=bad)
                assert (result.error_code, result.records) == (68, b""), name
                assert "filter predicate" in result.error_message, name
            # a well-formed filter still works: id = 3 keeps the one batch holding it
            good = await table.fetch(0, filter_predicate=leaf(0, 0, bigint))
            assert good.error_code == 0 and good.high_watermark == 10 and len(good.records) > 0

    asyncio.run(main())
