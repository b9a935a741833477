"""Auto-partitioning against a real metadata store: pre-creation and retention by time unit."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path

from strom.common.config import Configuration
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import BIGINT, STRING
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.auto_partition import AutoPartitionManager
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.membership import Membership
from strom.server.coordinator.metadata_service import MetadataService
from strom.server.store.ordered import OrderedStore
from strom.server.store.sqlite import SqliteMetadataStore


async def make_service(tmp_path: Path) -> MetadataService:
    store = OrderedStore(SqliteMetadataStore(tmp_path / "metadata.db"))
    membership = Membership(session_timeout=60)
    membership.register(0, "127.0.0.1", 1, None)  # placement only: nothing listens there
    node = pb.PbServerNode(node_id=0, host="127.0.0.1", port=9123)
    controller = Controller(store, membership, ConnectionPool(connect_timeout=0.2), 0, node)
    service = MetadataService(store, Configuration(), membership, controller, node)
    await service.ensure_default_database()
    return service


def create_request(unit: str, precreate: int, retention: int) -> pb.CreateTableRequest:
    schema = Schema([Column("id", BIGINT()), Column("dt", STRING())])
    descriptor = TableDescriptor(
        schema,
        partition_keys=["dt"],
        bucket_count=1,
        properties={
            "table.auto-partition.enabled": "true",
            "table.auto-partition.time-unit": unit,
            "table.auto-partition.num-precreate": str(precreate),
            "table.auto-partition.num-retention": str(retention),
            "table.auto-partition.time-zone": "UTC",
        },
    )
    request = pb.CreateTableRequest(
        table_json=json.dumps(descriptor.to_json()).encode(), ignore_if_exists=False
    )
    request.table_path.database_name = "fluss"
    request.table_path.table_name = "events"
    return request


def partition_names(service: MetadataService) -> list[str]:
    table = service.store.get_table("fluss", "events")
    assert table is not None
    return sorted(p.name for p in service.store.list_partitions(table.table_id))


def test_precreates_days_and_expires_old_ones(tmp_path: Path) -> None:
    async def main() -> None:
        service = await make_service(tmp_path)
        manager = AutoPartitionManager(service)
        await service.create_table(create_request("DAY", 3, 2), None)
        table = service.store.get_table("fluss", "events")
        assert table is not None
        await manager.check_table(table, datetime(2024, 3, 1, 10, 0))
        assert partition_names(service) == ["20240301", "20240302", "20240303"]
        # five days later: 0305 is now "today"; retention 2 keeps 0304 and 0303, drops older
        await manager.check_table(table, datetime(2024, 3, 5, 0, 30))
        assert partition_names(service) == ["20240303", "20240305", "20240306", "20240307"]

    asyncio.run(main())


def test_hourly_partitions(tmp_path: Path) -> None:
    async def main() -> None:
        service = await make_service(tmp_path)
        await service.create_table(create_request("HOUR", 2, -1), None)
        table = service.store.get_table("fluss", "events")
        assert table is not None
        await AutoPartitionManager(service).check_table(table, datetime(2024, 12, 31, 23, 15))
        assert partition_names(service) == ["2024123123", "2025010100"]

    asyncio.run(main())
