"""remote.log.task-max-upload-segments: one remote-log task run uploads at most that many segments of
a bucket, oldest first, so a backlog drains over several runs instead of in one long burst."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.errors import InvalidConfigError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.remote_log import RemoteLog, RemoteLogManager
from strom.server.tablet.replica_manager import Replica, ReplicaManager

BUCKET = TableBucket(3, None, 0)


def test_one_task_run_uploads_at_most_the_configured_segments(tmp_path: Path) -> None:
    manager = ReplicaManager(0, tmp_path / "data", lambda info: LOG_CONFIG)
    replica = manager.become_leader_or_follower(
        BUCKET,
        database="db",
        table="t",
        partition_name=None,
        table_info=make_info(Schema([Column("v", BIGINT())])),
        leader=0,
        leader_epoch=1,
        replicas=(0,),
        isr=(0,),
        bucket_epoch=0,
    )
    commits: list[int] = []

    async def commit(replica: Replica, remote: RemoteLog, manifest: str) -> None:
        commits.append(len(remote.segments))

    try:
        tablet = replica.log_tablet()
        for _ in range(7):
            tablet.append_as_leader(make_batch(records=5))
            tablet.roll()
        assert len(tablet.closed_segments()) == 7
        replica.maybe_advance_high_watermark()  # the sole in-sync replica: everything is committed
        assert tablet.high_watermark == tablet.log_end_offset
        remote = RemoteLogManager(manager, str(tmp_path / "remote"), commit, max_upload_segments=3)

        async def runs() -> list[int]:
            return [await remote.tier(replica) for _ in range(4)]

        assert asyncio.run(runs()) == [3, 3, 1, 0]
        assert commits == [3, 6, 7]
        assert len(list((tmp_path / "remote").rglob("*.log"))) == 7
        with pytest.raises(InvalidConfigError, match="task-max-upload-segments"):
            RemoteLogManager(manager, str(tmp_path / "remote"), commit, max_upload_segments=0)
    finally:
        manager.stop_replica(BUCKET, delete=False)
