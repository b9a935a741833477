"""Deleting a replica (its table was dropped, or it moved away): its directory goes at once, its files
later (`purge_trash`, which the tablet server runs in an executor), and a replica created again in its
place starts empty."""

from __future__ import annotations

from pathlib import Path

from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.replica_manager import TRASH_DIR, Replica, ReplicaManager

BUCKET = TableBucket(3, None, 0)
OTHER = TableBucket(4, None, 0)


def lead(manager: ReplicaManager, bucket: TableBucket, leader_epoch: int = 1) -> Replica:
    return manager.become_leader_or_follower(
        bucket,
        database="db",
        table="t",
        partition_name=None,
        table_info=make_info(Schema([Column("v", BIGINT())])),
        leader=0,
        leader_epoch=leader_epoch,
        replicas=(0,),
        isr=(0,),
        bucket_epoch=0,
    )


def test_a_deleted_replica_leaves_at_once_and_its_files_with_the_purge(tmp_path: Path) -> None:
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    try:
        replica = lead(manager, BUCKET)
        for _ in range(20):
            replica.log_tablet().append_as_leader(make_batch(records=5))
            replica.log_tablet().roll()
        kept = lead(manager, OTHER)
        kept.log_tablet().append_as_leader(make_batch(records=3))
        directory = replica.directory
        assert len(list((directory / "log").iterdir())) > 40

        assert manager.stop_replica(BUCKET, delete=True) is replica
        assert not directory.exists() and not directory.parent.exists()  # the table's directory too
        trash = tmp_path / TRASH_DIR
        assert len(list(trash.iterdir())) == 1  # waiting for the purge, out of every replica's way

        # created again in its place (the bucket moved back): an empty log, not the old files
        again = lead(manager, BUCKET, leader_epoch=2)
        assert again.directory == directory
        assert again.log_tablet().log_end_offset == 0

        manager.purge_trash()
        assert list(trash.iterdir()) == []
        # the other replica is untouched
        assert kept.log_tablet().log_end_offset == 3
    finally:
        manager.close()


def test_the_purge_removes_what_a_crash_left_in_the_trash(tmp_path: Path) -> None:
    left = tmp_path / TRASH_DIR / "0123abcd" / "log"
    left.mkdir(parents=True)
    (left / "00000000000000000000.log").write_bytes(b"x" * 100)
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    manager.purge_trash()
    assert list((tmp_path / TRASH_DIR).iterdir()) == []
