"""The coordinator's tiering protocol over real RPC: freshness scheduling, epochs, fencing of silent or
stale jobs, lake snapshot commits and GetLakeSnapshot (also through pyfluss)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fluss
import pytest
from harness import Cluster

from strom.common.errors import FencedTieringEpochError
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import BIGINT, STRING
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal


def lake_config(base: Path) -> dict[str, str]:
    return {
        "datalake.format": "iceberg",
        "datalake.iceberg.type": "sql",
        "datalake.iceberg.uri": f"sqlite:///{base}/lake-catalog.db",
        "datalake.iceberg.warehouse": f"file://{base}/warehouse",
        "lake.tiering.job-timeout": "1500ms",
    }


async def heartbeat(
    conn: RpcConnection,
    *,
    request: bool = False,
    tiering: Sequence[tuple[int, int]] = (),
    finished: Sequence[tuple[int, int]] = (),
    failed: Sequence[tuple[int, int]] = (),
    job: tuple[str, str] | None = None,
) -> Any:
    message = pb.LakeTieringHeartbeatRequest(request_table=request)
    if job is not None:  # Strom's extension fields: the job's name and Spark application id
        message.tiering_job_name, message.tiering_job_application_id = job
    for target, entries in (
        (message.tiering_tables, tiering),
        (message.finished_tables, finished),
        (message.failed_tables, failed),
    ):
        for table_id, epoch in entries:
            target.add(table_id=table_id, coordinator_epoch=0, tiering_epoch=epoch)
    return await conn.request(ApiKey.LAKE_TIERING_HEARTBEAT, message)


async def wait_for_table(conn: RpcConnection, timeout: float = 10, job: tuple[str, str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = await heartbeat(conn, request=True, job=job)
        if response.HasField("tiering_table"):
            return response.tiering_table
        await asyncio.sleep(0.1)
    raise AssertionError("no table became due for tiering")


async def commit(
    conn: RpcConnection, table_id: int, epoch: int, snapshot_id: int, offsets: dict[int, int]
) -> Any:
    message = pb.CommitLakeTableSnapshotRequest()
    info = message.tables_req.add(table_id=table_id, snapshot_id=snapshot_id, tiering_epoch=epoch)
    for bucket, offset in offsets.items():
        info.buckets_req.add(bucket_id=bucket, log_end_offset=offset)
    return (await conn.request(ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT, message)).table_resp[0]


def lake_snapshot_records(cluster: Cluster, table_id: int) -> int:
    """How many lake snapshots the coordinator's SQLite store holds for the table."""
    path = cluster.coordinator.data_dir / "metadata.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        prefix = f"lake-snapshot/{table_id:020d}/"
        return db.execute("SELECT COUNT(*) FROM documents WHERE key LIKE ?", (prefix + "%",)).fetchone()[0]


async def tiering_status(conn: RpcConnection, table_id: int) -> Any:
    described = await conn.request(ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest())
    return next(t for t in described.tiering if t.table_id == table_id)


def test_tiering_rounds_epochs_and_fencing(cluster_factory: Any, tmp_path: Path) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1, config=lake_config(tmp_path))

    async def main() -> int:
        conn = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
        schema = Schema([Column("id", BIGINT()), Column("v", STRING())])
        descriptor = TableDescriptor(
            schema,
            bucket_count=2,
            properties={"table.datalake.enabled": "true", "table.datalake.freshness": "1s"},
        )
        create = pb.CreateTableRequest(table_json=descriptor.to_json_bytes(), ignore_if_exists=False)
        create.table_path.database_name = "fluss"
        create.table_path.table_name = "tiered"
        await conn.request(ApiKey.CREATE_TABLE, create)
        # not due before its freshness interval has passed (asked at once: the checks below take time)
        assert not (await heartbeat(conn, request=True)).HasField("tiering_table")
        # the coordinator created the Iceberg table with the Fluss table
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(
            **{
                k.removeprefix("datalake.iceberg."): v
                for k, v in lake_config(tmp_path).items()
                if k.startswith("datalake.iceberg.")
            },
        )
        lake_columns = [f.name for f in catalog.load_table("fluss.tiered").schema().fields]
        assert lake_columns == ["id", "v", "__bucket", "__offset", "__timestamp"]

        first = await wait_for_table(conn)
        assert first.table_path.table_name == "tiered" and first.tiering_epoch == 1
        table_id = first.table_id

        ok = await heartbeat(conn, tiering=[(table_id, 1)])
        assert not ok.tiering_table_resp[0].HasField("error")
        # a Fluss-shaped heartbeat names no job: the coordinator knows its connection's address
        assert conn.transport is not None
        host, port = conn.transport.get_extra_info("sockname")[:2]
        address = f"{host}:{port}"
        held = await tiering_status(conn, table_id)
        assert held.state == "tiering" and held.tiering_epoch == 1
        assert (held.job.name, held.job.application_id, held.job.address) == ("", "", address)
        assert held.HasField("last_heartbeat_ms") and held.heartbeat_age_ms < 5000
        stale = await heartbeat(conn, tiering=[(table_id, 0)])
        assert stale.tiering_table_resp[0].error.error_code == FencedTieringEpochError.code

        assert (await commit(conn, table_id, 1, 1001, {0: 10, 1: 7})).error_code == 0
        # a job that lost the answer sends the same commit again: accepted, and recorded once
        assert (await commit(conn, table_id, 1, 1001, {0: 10, 1: 7})).error_code == 0
        assert lake_snapshot_records(cluster, table_id) == 1
        finished = await heartbeat(conn, finished=[(table_id, 1)])
        assert not finished.finished_table_resp[0].HasField("error")

        # the next round comes one freshness later, under a new epoch, to a job that says who it is
        job = ("nightly", "app-20261125081500-0007")
        second = await wait_for_table(conn, job=job)
        assert second.tiering_epoch == 2
        held = await tiering_status(conn, table_id)
        assert (held.job.name, held.job.application_id, held.job.address) == (*job, address)
        described = await conn.request(ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest())
        assert [(j.name, j.address) for j in described.tiering_jobs] == [("", address), ("nightly", address)]
        # this job goes silent: the coordinator fences it and hands the table out again
        third = await wait_for_table(conn, timeout=10)
        assert third.tiering_epoch == 3
        fenced = await commit(conn, table_id, 2, 1002, {0: 20, 1: 9})
        assert fenced.error_code == FencedTieringEpochError.code
        backwards = await commit(conn, table_id, 3, 1003, {0: 5, 1: 9})
        assert backwards.error_code != 0 and "back from offset 10" in backwards.error_message
        assert (await commit(conn, table_id, 3, 1004, {0: 20})).error_code == 0

        get = pb.GetLakeSnapshotRequest()
        get.table_path.database_name = "fluss"
        get.table_path.table_name = "tiered"
        snapshot = await conn.request(ApiKey.GET_LAKE_SNAPSHOT, get)
        assert snapshot.snapshotId == 1004
        assert {b.bucket_id: b.log_offset for b in snapshot.bucket_snapshots} == {0: 20, 1: 7}
        conn.close()
        return table_id

    table_id = asyncio.run(main())

    cluster.restart_coordinator(kill=True)
    cluster.wait_for_tablet_servers()

    async def official_client() -> None:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": cluster.bootstrap})
        )
        snapshot = await connection.get_admin().get_latest_lake_snapshot(fluss.TablePath("fluss", "tiered"))
        assert snapshot.snapshot_id == 1004
        offsets = {b.bucket_id: o for b, o in snapshot.table_buckets_offset.items()}
        assert offsets == {0: 20, 1: 7}
        assert all(b.table_id == table_id for b in snapshot.get_table_buckets())
        with pytest.raises(fluss.FlussError) as none:
            await connection.get_admin().get_latest_lake_snapshot(fluss.TablePath("fluss", "missing"))
        assert none.value.error_code == fluss.ErrorCode.TABLE_NOT_EXIST
        await connection.close()

    asyncio.run(official_client())
