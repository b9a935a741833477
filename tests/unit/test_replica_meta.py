"""A replica's identity file (replica.json) survives a power cut, and an unreadable one is rewritten
instead of being kept broken because it exists."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from faults.lazyfs import LazyMount, requires_fuse
from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.replica_manager import Replica, ReplicaManager

BUCKET = TableBucket(7, None, 2)
EXPECTED = {
    "table_id": 7,
    "partition_id": None,
    "bucket": 2,
    "database": "db",
    "table": "t",
    "partition_name": None,
}


LEADERSHIP: dict[str, Any] = {
    "database": "db",
    "table": "t",
    "partition_name": None,
    "table_info": make_info(Schema([Column("v", BIGINT())])),
    "leader": 0,
    "leader_epoch": 1,
    "replicas": (0,),
    "isr": (0,),
    "bucket_epoch": 0,
}


def lead(manager: ReplicaManager) -> Replica:
    return manager.become_leader_or_follower(BUCKET, **LEADERSHIP)


@requires_fuse()
def test_replica_json_survives_a_power_cut(tmp_path: Path) -> None:
    with LazyMount(tmp_path / "backing", tmp_path / "mnt") as mount:
        manager = ReplicaManager(0, mount.mountpoint, lambda info: LOG_CONFIG)
        # the tablet server's path: the replica's files are made in an executor
        replica = asyncio.run(manager.take_leadership(BUCKET, **LEADERSHIP))
        meta = replica.directory / "replica.json"
        manager.close()  # nothing may hold the mount open across the cut
        mount.power_cut()
        # an unsynced write comes back as a zero-length file once its creation was committed
        assert json.loads(meta.read_bytes()) == EXPECTED


@pytest.mark.parametrize("left", [b"", b'{"table_id": 7, "bu', b"\xff\xfe", b"[]"])
def test_an_unreadable_replica_json_is_rewritten(tmp_path: Path, left: bytes) -> None:
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    meta = lead(manager).directory / "replica.json"
    manager.close()
    meta.write_bytes(left)  # what a crash (or an older, unsynced version) left behind

    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    try:
        lead(manager)
    finally:
        manager.close()
    assert json.loads(meta.read_bytes()) == EXPECTED
    assert not meta.with_name("replica.json.tmp").exists()


def test_a_log_on_disk_is_found_by_ids_and_reports_its_epoch(tmp_path: Path) -> None:
    """DescribeReplicas' `on_disk` (the coordinator's last-resort election): a bucket's log that no
    replica holds open yet, found from the ids alone, even when a power cut emptied replica.json."""
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    lead(manager).log_tablet().append_as_leader(make_batch(records=5))
    manager.close()
    again = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)  # a restarted server
    tablet = asyncio.run(again.log_on_disk(BUCKET))
    assert tablet is not None
    assert (tablet.leader_epochs.latest_epoch, tablet.log_end_offset) == (1, 5)
    assert asyncio.run(again.log_on_disk(TableBucket(7, None, 3))) is None
    assert asyncio.run(again.log_on_disk(TableBucket(17, None, 2))) is None
    meta = tmp_path / "db" / "t-7" / "bucket-2" / "replica.json"
    meta.write_bytes(b"")
    assert asyncio.run(again.log_on_disk(BUCKET)) is not None
    meta.write_text(json.dumps({**EXPECTED, "table_id": 8}))  # not this bucket's
    assert asyncio.run(again.log_on_disk(BUCKET)) is None
    assert again.replicas == {}  # looking opened no replica
