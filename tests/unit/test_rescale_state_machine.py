"""The online rescale's state machine (coordinator/rescale.py) against a real metadata store, with the
tablet servers' RescaleBucket played by a small in-memory stand-in: a run that fails half-way leaves a
stored task that a new coordinator finishes, every key ending in the bucket it hashes to. Also what
AlterTable accepts as a rescale and what it refuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from strom.common.alter_table import ALTER_CONFIG_DELETE, ALTER_CONFIG_SET
from strom.common.bucketing import bucket_function_for
from strom.common.config import Configuration
from strom.common.errors import InvalidAlterTableError, InvalidTableError
from strom.common.rescale import FROM_PROPERTY, SEALED_PROPERTY
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import INT, STRING
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import KvRecordBatch, build_kv_batch
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.membership import Membership
from strom.server.coordinator.metadata_service import MetadataService
from strom.server.coordinator.rescale import (
    DELETE,
    EXPORT,
    IMPORT,
    RescaleManager,
    RescaleState,
    RescaleTask,
    check_rescalable,
)
from strom.server.coordinator.table_alteration import alter
from strom.server.store.ordered import OrderedStore
from strom.server.store.sqlite import SqliteMetadataStore

KEYS = CompactedKeyEncoder([INT()])
SCHEMA = Schema([Column("id", INT()), Column("name", STRING())], primary_key=["id"])


class Tablets:
    """Stands in for the tablet servers: each bucket's rows, and RescaleBucket's three actions."""

    def __init__(self, rows: dict[int, dict[bytes, bytes]], bucket_of: Any) -> None:
        self.rows = rows
        self.bucket_of = bucket_of
        self.fail_on_delete = False

    async def request(self, host: str, port: int, key: ApiKey, request: Any, timeout: float = 0) -> Any:
        if key is not ApiKey.RESCALE_BUCKET:
            return None  # UpdateMetadata, NotifyLeaderAndIsr: nothing to do here
        bucket = self.rows.setdefault(request.bucket_id, {})
        response = internal.RescaleBucketResponse(log_end_offset=len(bucket))
        if request.action == EXPORT:
            count = request.bucket_count
            leaving = [(k, v) for k, v in bucket.items() if self.bucket_of(k, count) != request.bucket_id]
            if leaving:
                response.records = build_kv_batch(leaving, schema_id=1)
        elif request.action == IMPORT:
            bucket.update((k, v) for k, v in KvRecordBatch.parse(request.records).records if v is not None)
        elif request.action == DELETE:
            if self.fail_on_delete:
                raise InvalidTableError("the coordinator dies here (as far as this run is concerned)")
            for k, _ in KvRecordBatch.parse(request.records).records:
                bucket.pop(k, None)
        return response

    async def close(self) -> None:
        pass


async def coordinator(
    path: Path, tablets: Tablets, config: Configuration
) -> tuple[MetadataService, RescaleManager]:
    """One coordinator's services over the metadata store in `path` (a new one per call: a restart)."""
    store = OrderedStore(SqliteMetadataStore(path / "metadata.db"))
    membership = Membership(session_timeout=60)
    membership.register(0, "127.0.0.1", 1, None)
    node = pb.PbServerNode(node_id=0, host="127.0.0.1", port=9123)
    controller = Controller(store, membership, ConnectionPool(connect_timeout=0.2), 0, node)
    controller.pool = tablets  # type: ignore[assignment]
    service = MetadataService(store, config, membership, controller, node)
    manager = RescaleManager(store, membership, controller, service.tables_metadata, 4096)
    service.rescale = manager
    await service.ensure_default_database()
    return service, manager


def alter_request(*changes: tuple[str, str | None]) -> pb.AlterTableRequest:
    request = pb.AlterTableRequest(ignore_if_not_exists=False)
    request.table_path.database_name = "fluss"
    request.table_path.table_name = "t"
    for key, value in changes:
        change = request.config_changes.add(
            config_key=key, op_type=ALTER_CONFIG_SET if value is not None else ALTER_CONFIG_DELETE
        )
        if value is not None:
            change.config_value = value
    return request


@pytest.mark.parametrize("lake", [None, "paimon"])
def test_a_failed_rescale_is_finished_by_the_next_coordinator(tmp_path: Path, lake: str | None) -> None:
    """With a cluster lake format every table carries `table.datalake.format`, and its clients hash
    keys the lake's way even while the table is not lake-enabled: the rescale must too."""
    config = Configuration({"datalake.format": lake} if lake else {})
    bucket_of = bucket_function_for(lake)
    rows = {b: {} for b in range(2)}  # type: dict[int, dict[bytes, bytes]]
    for i in range(300):
        key = KEYS.encode([i])
        rows[bucket_of(key, 2)][key] = f"row{i}".encode()
    tablets = Tablets(rows, bucket_of)

    async def main() -> None:
        service, manager = await coordinator(tmp_path, tablets, config)
        create = pb.CreateTableRequest(
            table_json=json.dumps(TableDescriptor(SCHEMA, bucket_count=2).to_json()).encode()
        )
        create.table_path.database_name, create.table_path.table_name = "fluss", "t"
        await service.create_table(create, None)
        tablets.fail_on_delete = True  # rows copied to their new buckets, not yet deleted
        with pytest.raises(InvalidTableError):
            await service.alter_table(alter_request(("bucket.num", "6")), None)
        record = service.store.get_table("fluss", "t")
        assert record is not None
        sealed = TableDescriptor.from_json_bytes(record.table_json)
        assert sealed.bucket_count == 6 and sealed.custom_properties[SEALED_PROPERTY] == "true"
        [task] = manager.unfinished()
        assert task.state is RescaleState.SEALED and (task.from_count, task.to_count) == (2, 6)
        assert len(service.store.list_buckets(record.table_id)) == 6

        # a new coordinator over the same store finds the task and finishes it
        tablets.fail_on_delete = False
        service, manager = await coordinator(tmp_path, tablets, config)
        with pytest.raises(InvalidAlterTableError, match="being rescaled already"):
            await service.alter_table(alter_request(("bucket.num", "8")), None)
        done = await manager.finish(record.table_id)
        assert done.state is RescaleState.DONE and manager.unfinished() == []
        moving = sum(
            1 for i in range(300) if bucket_of(KEYS.encode([i]), 6) != bucket_of(KEYS.encode([i]), 2)
        )
        assert done.moved_rows == moving and set(done.cuts) == {"-/0", "-/1"}
        record = service.store.get_table("fluss", "t")
        assert record is not None
        opened = TableDescriptor.from_json_bytes(record.table_json)
        assert SEALED_PROPERTY not in opened.custom_properties
        assert opened.custom_properties[FROM_PROPERTY] == "2"

    asyncio.run(main())
    placed = {k: b for b, bucket in tablets.rows.items() for k in bucket}
    assert len(placed) == 300 and sum(len(b) for b in tablets.rows.values()) == 300  # none twice
    assert all(bucket_of(k, 6) == b for k, b in placed.items())


def test_task_states_and_record() -> None:
    task = RescaleTask(7, 2, 6, cuts={"-/0": 10})
    assert [task.advance(), task.advance(), task.advance()] == [
        RescaleState.MOVED,
        RescaleState.DONE,
        RescaleState.DONE,
    ]
    assert RescaleTask.from_bytes(task.to_bytes()) == task
    assert task.key == "rescale/7/task"


def test_what_a_rescale_refuses() -> None:
    pk = TableDescriptor(SCHEMA, bucket_count=4)
    check_rescalable("t", pk, 8, 4096)
    with pytest.raises(InvalidAlterTableError, match="from 4 to 2"):
        check_rescalable("t", pk, 2, 4096)
    with pytest.raises(InvalidAlterTableError, match=r"max\.bucket\.num"):
        check_rescalable("t", pk, 5000, 4096)
    merge = TableDescriptor(SCHEMA, bucket_count=4, properties={"table.merge-engine": "first_row"})
    with pytest.raises(InvalidAlterTableError, match="default merge engine"):
        check_rescalable("t", merge, 8, 4096)
    two = Schema([Column("a", INT()), Column("b", INT())], primary_key=["a", "b"])
    with pytest.raises(InvalidAlterTableError, match="bucket key"):
        check_rescalable("t", TableDescriptor(two, bucket_keys=["a"], bucket_count=4), 8, 4096)


@pytest.mark.parametrize("lake", ["iceberg", "paimon", "lance", None])
def test_lake_enabled_tables_rescale_unless_the_lake_layout_has_the_count(lake: str | None) -> None:
    props = {"table.datalake.enabled": "true"} | ({"table.datalake.format": lake} if lake else {})
    log = Schema([Column("a", INT()), Column("b", INT())])
    # log rows never move, and these lake tables have no bucket count in their layout
    check_rescalable("t", TableDescriptor(log, bucket_count=4, properties=props), 8, 4096)
    keyed_log = TableDescriptor(log, bucket_keys=["a"], bucket_count=4, properties=props)
    if lake in ("iceberg", "paimon"):  # bucket(n) partitioning, Paimon's fixed `bucket`
        with pytest.raises(InvalidAlterTableError, match=f"(?i)lake-enabled.*{lake}"):
            check_rescalable("t", keyed_log, 8, 4096)
    else:
        check_rescalable("t", keyed_log, 8, 4096)
    # primary-key tables: every format refuses, each with its reason
    with pytest.raises(InvalidAlterTableError, match="lake-enabled table 't'"):
        check_rescalable("t", TableDescriptor(SCHEMA, bucket_count=4, properties=props), 8, 4096)
    # not lake-enabled: the format alone (a cluster's default) refuses nothing
    paimon_default = TableDescriptor(SCHEMA, bucket_count=4, properties={"table.datalake.format": "paimon"})
    check_rescalable("t", paimon_default, 8, 4096)


def test_alter_table_asks_for_a_rescale_alone() -> None:
    descriptor = TableDescriptor(SCHEMA, bucket_count=2)
    assert alter("t", descriptor, alter_request(("bucket.num", "6"))).rescale_to == 6
    assert alter("t", descriptor, alter_request(("bucket.num", "2"))).rescale_to is None
    with pytest.raises(InvalidAlterTableError, match="alter it alone"):
        alter("t", descriptor, alter_request(("bucket.num", "6"), ("table.log.ttl", "1d")))
    with pytest.raises(InvalidAlterTableError, match="not reset"):
        alter("t", descriptor, alter_request(("bucket.num", None)))
    with pytest.raises(InvalidAlterTableError, match="positive integer"):
        alter("t", descriptor, alter_request(("bucket.num", "six")))
    with pytest.raises(InvalidAlterTableError, match=r"'bucket\.key'"):
        alter("t", descriptor, alter_request(("bucket.key", "name")))
    with pytest.raises(InvalidAlterTableError, match="kept by bucket rescales"):
        alter("t", descriptor, alter_request(("strom.rescale.sealed", "false")))
