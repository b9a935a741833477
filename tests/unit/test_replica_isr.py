"""A leader's ISR under reordered coordinator messages: an AdjustIsr answer that arrives after a newer
NotifyLeaderAndIsr (seen in a rebalance: the coordinator accepted an ISR expansion, then removed a
replica) must not bring the removed replica back into the ISR, where acks=all writes would wait for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.errors import NotLeaderOrFollowerError, RequestTimeoutError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.replica_manager import Replica, ReplicaManager

BUCKET = TableBucket(3, None, 0)
LEADER = 0


def lead(
    manager: ReplicaManager, replicas: tuple[int, ...], isr: tuple[int, ...], bucket_epoch: int
) -> Replica:
    return manager.become_leader_or_follower(
        BUCKET,
        database="db",
        table="t",
        partition_name=None,
        table_info=make_info(Schema([Column("v", BIGINT())])),
        leader=LEADER,
        leader_epoch=1,
        replicas=replicas,
        isr=isr,
        bucket_epoch=bucket_epoch,
    )


def test_an_isr_answer_overtaken_by_a_reassignment_is_not_applied(tmp_path: Path) -> None:
    manager = ReplicaManager(LEADER, tmp_path, lambda info: LOG_CONFIG)
    try:
        replica = lead(manager, replicas=(0, 1, 2), isr=(0, 1), bucket_epoch=4)
        # the coordinator accepted ISR [0, 1, 2] at bucket epoch 5, then moved the bucket to [0, 1]
        # (bucket epoch 6); the reassignment reaches the leader first
        lead(manager, replicas=(0, 1), isr=(0, 1), bucket_epoch=6)
        assert not replica.apply_isr_change((0, 1, 2), leader_epoch=1, bucket_epoch=5)
        assert replica.isr == (0, 1) and replica.bucket_epoch == 6

        # acks=all waits only for the replicas that are left
        replica.log_tablet().append_as_leader(make_batch(records=3))
        replica.record_follower_fetch(1, 3)
        assert replica.log_tablet().high_watermark == 3
    finally:
        manager.close()


def test_a_newer_isr_from_the_same_leader_term_is_applied(tmp_path: Path) -> None:
    manager = ReplicaManager(LEADER, tmp_path, lambda info: LOG_CONFIG)
    try:
        replica = lead(manager, replicas=(0, 1, 2), isr=(0, 1, 2), bucket_epoch=4)
        assert replica.apply_isr_change((0, 1), leader_epoch=1, bucket_epoch=5)
        assert replica.isr == (0, 1) and replica.bucket_epoch == 5
        # an answer from an earlier leader term is stale even with a higher bucket epoch
        assert not replica.apply_isr_change((0,), leader_epoch=0, bucket_epoch=9)
        assert replica.isr == (0, 1)
    finally:
        manager.close()


def test_acks_all_writes_waiting_on_a_leader_that_becomes_a_follower_fail_at_once(tmp_path: Path) -> None:
    """Not after the request timeout: the writer learns of the new leader and retries there."""

    async def scenario() -> None:
        manager = ReplicaManager(LEADER, tmp_path, lambda info: LOG_CONFIG)
        try:
            replica = lead(manager, replicas=(0, 1), isr=(0, 1), bucket_epoch=1)
            replica.log_tablet().append_as_leader(make_batch(records=3))
            timed_out = await replica.replication_error(3, 0.05, "the append to")
            assert (
                isinstance(timed_out, RequestTimeoutError) and "in-sync replicas [0, 1]" in timed_out.message
            )
            waiting = asyncio.ensure_future(replica.replication_error(3, 30, "the append to"))
            await asyncio.sleep(0.01)
            assert not waiting.done()
            manager.become_leader_or_follower(
                BUCKET,
                database="db",
                table="t",
                partition_name=None,
                table_info=replica.table_info,
                leader=1,
                leader_epoch=2,
                replicas=(0, 1),
                isr=(0, 1),
                bucket_epoch=2,
            )
            error = await asyncio.wait_for(waiting, 1)
            assert isinstance(error, NotLeaderOrFollowerError) and "follower of server 1" in error.message
        finally:
            manager.close()

    asyncio.run(scenario())
