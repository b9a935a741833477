"""Last-resort elections ask the replicas for their logs. The controller under test is real; only the
tablet servers are stand-ins: they answer DescribeReplicas with a log end, or never (stuck).

- The wait happens outside the controller lock: an AdjustIsr of another bucket is answered at once.
- When the new leader's log ends below the lake's tiered offset, the bucket is recorded as "lake
  ahead of log" and the table's tiering is held, so that the records Fluss writes again at those
  offsets are neither skipped nor mixed into the lake.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext, RpcServer
from strom.server.coordinator import controller as controller_module
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.lake_service import LakeService, LakeSnapshotRecord
from strom.server.coordinator.lake_tiering import LakeTieringManager
from strom.server.coordinator.membership import Membership
from strom.server.store.base import BucketAssignment
from strom.server.store.ordered import OrderedStore
from strom.server.store.sqlite import SqliteMetadataStore

TABLE = 7
OTHER = 8


async def _answering(log_end: int, epoch: int) -> RpcServer:
    """A tablet server that reports bucket 0 of TABLE with this log."""

    async def describe(request: internal.DescribeReplicasRequest, ctx: RequestContext) -> object:
        response = internal.DescribeReplicasResponse(server_id=0)
        for b in request.on_disk:
            response.replicas.add(
                table_id=b.table_id,
                bucket_id=b.bucket_id,
                leader=False,
                log_start_offset=0,
                log_end_offset=log_end,
                high_watermark=0,
                latest_leader_epoch=epoch,
            )
        return response

    server = RpcServer(
        name="stand-in tablet server",
        host="127.0.0.1",
        port=0,
        handlers={ApiKey.DESCRIBE_REPLICAS: describe},
        server_type=ServerType.TABLET_SERVER,
    )
    await server.start()
    return server


async def _silent() -> RpcServer:
    """A tablet server that is connected to but never answers DescribeReplicas (stuck on its disk)."""

    async def describe(request: internal.DescribeReplicasRequest, ctx: RequestContext) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = RpcServer(
        name="stuck tablet server",
        host="127.0.0.1",
        port=0,
        handlers={ApiKey.DESCRIBE_REPLICAS: describe},
        server_type=ServerType.TABLET_SERVER,
    )
    await server.start()
    return server


async def _setup(
    tmp_path: Path, answering: dict[int, int]
) -> tuple[Controller, LakeService, list[RpcServer]]:
    sqlite = SqliteMetadataStore(tmp_path / "metadata.db")
    # every replica restarted after an unclean shutdown: no ISR, no ELR, no leader
    sqlite.put_buckets(
        [
            BucketAssignment(TABLE, None, 0, (1, 2), None, 3, (), 5),
            BucketAssignment(OTHER, None, 0, (2, 1), 2, 4, (2,), 9),
        ]
    )
    store = OrderedStore(sqlite)
    membership = Membership(session_timeout=60)
    servers: list[RpcServer] = []
    for server_id in (1, 2):
        if server_id in answering:
            server = await _answering(answering[server_id], epoch=3)
        else:
            server = await _silent()
        servers.append(server)
        membership.register(server_id, "127.0.0.1", server.port, None)
    node = pb.PbServerNode(node_id=0, host="127.0.0.1", port=9123)
    controller = Controller(store, membership, ConnectionPool(connect_timeout=0.5), 0, node)
    tiering = LakeTieringManager()
    lake = LakeService(store, controller, tiering, tmp_path / "lake-offsets")
    controller.on_truncating_election = lake.check_truncation
    return controller, lake, servers


async def _close(controller: Controller, servers: list[RpcServer]) -> None:
    await controller.close()
    await controller.pool.close()
    for server in servers:
        await server.close()


async def _leader_of(controller: Controller, table_id: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = controller.store.list_buckets(table_id)[0].leader
        if leader is not None:
            return leader
        await asyncio.sleep(0.02)
    return None


def test_a_replica_that_never_answers_does_not_stall_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller_module, "DESCRIBE_LOGS_TIMEOUT", 1.0, raising=False)

    async def main() -> None:
        controller, _, servers = await _setup(tmp_path, answering={2: 40})
        try:
            election = asyncio.create_task(controller.elect_waiting(TABLE))
            await asyncio.sleep(0.2)  # the election now waits for server 1's report
            request = pb.AdjustIsrRequest(serverId=2)
            entry = request.tables_req.add(table_id=OTHER)
            entry.buckets_req.add(
                bucket_id=0, leader_epoch=4, new_isr=[2, 1], coordinator_epoch=0, bucket_epoch=9
            )
            started = time.monotonic()
            response = await asyncio.wait_for(controller.adjust_isr(request, None), 10)
            waited = time.monotonic() - started
            assert not response.tables_resp[0].buckets_resp[0].error_code
            assert waited < 0.5, f"AdjustIsr waited {waited:.2f} s behind the last-resort election"
            # server 1 is passed over after the timeout; server 2, which reported its log, leads
            assert await _leader_of(controller, TABLE, timeout=5) == 2
            assert controller.unclean_elections == 1
            election.cancel()
        finally:
            await _close(controller, servers)

    asyncio.run(main())


def test_a_leader_whose_log_ends_below_the_lake_holds_tiering(tmp_path: Path) -> None:
    async def main() -> None:
        controller, lake, servers = await _setup(tmp_path, answering={1: 30, 2: 40})
        try:
            path = TablePath("db", "t")
            lake.tiering.add_existing_table(TABLE, path, 60.0, time.time() - 3600)
            lake.tiering.add_existing_table(OTHER, TablePath("db", "other"), 60.0, time.time() - 3600)
            await lake._record(LakeSnapshotRecord(TABLE, 11, int(time.time() * 1000), {(None, 0): (50, -1)}))
            await lake._record(LakeSnapshotRecord(OTHER, 12, int(time.time() * 1000), {(None, 0): (20, -1)}))
            await asyncio.sleep(0.01)  # both are due at once
            await controller.elect_waiting(TABLE)
            assert controller.store.list_buckets(TABLE)[0].leader == 2  # the longest log
            (ahead,) = lake.lake_ahead()
            assert (ahead.table_id, ahead.bucket, ahead.lake_offset, ahead.log_end) == (TABLE, 0, 50, 40)
            assert ahead.leader == 2 and lake.lake_ahead_detected == 1
            # both tables are due; only the other one is handed to a tiering job, now and later
            assignment = lake.tiering.request_table()
            assert assignment is not None and assignment.table_id == OTHER
            assert lake.tiering.request_table() is None
            assert TABLE in lake.tiering.pending
            # a restarted coordinator finds it too (the record is in the metadata store)
            again = LakeService(controller.store, controller, LakeTieringManager(), tmp_path / "x")
            assert again.lake_ahead(TABLE) == [ahead]
        finally:
            await _close(controller, servers)

    asyncio.run(main())


def test_status_shows_the_lake_ahead_of_the_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from strom.client.cluster_status import build_cluster_status
    from strom.commands.status import print_status

    cluster = internal.DescribeClusterResponse(coordinator_epoch=1)
    cluster.tables.add(
        table_id=TABLE, database="db", name="t", primary_key=False, lake_enabled=True, bucket_count=1
    )
    cluster.buckets.add(table_id=TABLE, bucket_id=0, replicas=[1, 2], leader=2, leader_epoch=4, isr=[2])
    lake = cluster.lakes.add(table_id=TABLE, snapshot_id=11, committed_time=1)
    lake.offsets.add(bucket_id=0, offset=50, lake_ahead_log_end=40)
    cluster.tiering.add(table_id=TABLE, state="held", tiering_epoch=3)
    status = build_cluster_status(cluster, [], {}, None, now_ms=2)
    (offset,) = status.tables[0].lake.offsets  # type: ignore[union-attr]
    assert (offset.offset, offset.lake_ahead_log_end) == (50, 40)
    monkeypatch.setenv("COLUMNS", "250")  # one line per row
    print_status(status)
    out = capsys.readouterr().out
    assert "lake ahead of log (log end 40)" in out and "held" in out
