"""AdjustIsr may not bring a server that is gone back into an ISR: the leader may have seen it caught
up just before it stopped (the fault campaign's rolling restarts showed the race), and an ISR holding
a dead server holds every acks=all write until it lags out again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.common.errors import IneligibleReplicaError
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.controller import Controller
from strom.server.coordinator.membership import Membership
from strom.server.store.base import BucketAssignment
from strom.server.store.ordered import OrderedStore
from strom.server.store.sqlite import SqliteMetadataStore


def controller_with(tmp_path: Path, alive: list[int], isr: tuple[int, ...]) -> Controller:
    tmp_path.mkdir(parents=True, exist_ok=True)
    sqlite = SqliteMetadataStore(tmp_path / "metadata.db")
    sqlite.put_buckets([BucketAssignment(7, None, 0, (0, 1, 2), 0, 3, isr, 5)])
    store = OrderedStore(sqlite)
    membership = Membership(session_timeout=60)
    for server_id in alive:
        membership.register(server_id, "127.0.0.1", 1, None)  # nothing listens: no push is made
    node = pb.PbServerNode(node_id=0, host="127.0.0.1", port=9123)
    return Controller(store, membership, ConnectionPool(connect_timeout=0.2), 0, node)


def propose(controller: Controller, new_isr: list[int]) -> pb.PbAdjustIsrRespForBucket:
    request = pb.AdjustIsrRequest(serverId=0)
    table = request.tables_req.add(table_id=7)
    table.buckets_req.add(bucket_id=0, leader_epoch=3, new_isr=new_isr, coordinator_epoch=0, bucket_epoch=5)
    response = asyncio.run(controller.adjust_isr(request, None))
    return response.tables_resp[0].buckets_resp[0]


def test_an_isr_expansion_with_a_dead_server_is_refused(tmp_path: Path) -> None:
    controller = controller_with(tmp_path, alive=[0, 1], isr=(0,))
    result = propose(controller, [0, 1, 2])
    assert result.error_code == IneligibleReplicaError.code
    assert "[2]" in result.error_message
    assert controller.store.store.list_buckets(7)[0].isr == (0,)
    result = propose(controller, [0, 1])  # the live one alone is welcome
    assert not result.error_code and list(result.isr) == [0, 1]


def test_a_shrink_or_a_dead_member_already_in_the_isr_is_not_refused(tmp_path: Path) -> None:
    # server 2 died while in the ISR: the leader may still add server 1, or drop 2
    controller = controller_with(tmp_path, alive=[0, 1], isr=(0, 2))
    assert not propose(controller, [0, 2, 1]).error_code
    controller = controller_with(tmp_path / "again", alive=[0, 1], isr=(0, 2))
    assert not propose(controller, [0]).error_code
