"""Many replicas' files open and close together: their fsyncs run side by side (one after another,
2,048 new buckets waited ~40 s on the disk), in the order that keeps a crash honest, and every log is
as durable and as clean as when each synced its own files."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from kv_table_maker import LOG_CONFIG, make_info
from log_batch_maker import make_batch

from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import BIGINT
from strom.server.tablet.log.leader_epoch import LeaderEpochCache
from strom.server.tablet.log.log_tablet import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_FILE,
    RECOVERY_POINT_FILE,
    LogTablet,
)
from strom.server.tablet.replica_manager import ReplicaManager

BUCKETS = 48


class SlowFsync:
    """os.fsync taking 10 ms (a busy disk), counting how many run at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lock = threading.Lock()
        self.running = self.most = self.calls = 0
        real = os.fsync

        def fsync(fd: int) -> None:
            with self.lock:
                self.running += 1
                self.calls += 1
                self.most = max(self.most, self.running)
            try:
                time.sleep(0.01)
                real(fd)
            finally:
                with self.lock:
                    self.running -= 1

        monkeypatch.setattr(os, "fsync", fsync)


async def lead_all(manager: ReplicaManager) -> None:
    info = make_info(Schema([Column("v", BIGINT())]))
    await asyncio.gather(
        *(
            manager.take_leadership(
                TableBucket(info.table_id, None, b),
                database="db",
                table="t",
                partition_name=None,
                table_info=info,
                leader=0,
                leader_epoch=3,
                replicas=(0,),
                isr=(0,),
                bucket_epoch=0,
            )
            for b in range(BUCKETS)
        )
    )


def test_new_replicas_sync_together_and_close_clean_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = SlowFsync(monkeypatch)
    manager = ReplicaManager(0, tmp_path, lambda info: LOG_CONFIG)
    asyncio.run(lead_all(manager))
    # every new replica's identity and leader epoch are synced, many at once (before: 8 at a time,
    # each replica's syncs one after another)
    assert slow.most >= 16, f"at most {slow.most} fsyncs ran at once"
    directories = [r.log_tablet().directory for r in manager.replicas.values()]
    for replica in manager.replicas.values():
        assert (replica.directory / "replica.json").stat().st_size > 0
        assert replica.log_tablet().leader_epochs.latest_epoch == 3
        replica.log_tablet().append_as_leader(make_batch())
        replica.log_tablet().update_high_watermark(1)

    slow.most = 0
    manager.close()
    assert slow.most >= 16, f"closing: at most {slow.most} fsyncs ran at once"
    monkeypatch.undo()
    for directory in directories:
        assert (directory / CLEAN_SHUTDOWN_FILE).exists()
        assert LeaderEpochCache.load(directory).latest_epoch == 3
    for directory in directories[:4]:  # a reopen finds each as it was left
        reopened = LogTablet.open(directory, LOG_CONFIG)
        assert (reopened.log_end_offset, reopened.high_watermark, reopened.recovery_point) == (1, 1, 1)
        reopened.close()


def test_closing_in_steps_syncs_data_before_checkpoints_before_the_marker(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path, LOG_CONFIG)
    log.append_as_leader(make_batch())
    steps = log.closing()
    data = next(steps)
    assert log.directory in data and any(p.suffix == ".log" for p in data)
    # the recovery point may claim the data is durable only once the caller synced it
    assert not (tmp_path / RECOVERY_POINT_FILE).exists()
    checkpoints = next(steps)
    assert tmp_path / RECOVERY_POINT_FILE in checkpoints and tmp_path / HIGH_WATERMARK_FILE in checkpoints
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert next(steps) == [tmp_path / CLEAN_SHUTDOWN_FILE, tmp_path]
    with pytest.raises(StopIteration):
        next(steps)
    # closed: the periodic high-watermark checkpoint leaves it alone
    (tmp_path / HIGH_WATERMARK_FILE).unlink()
    log.write_high_watermark_checkpoint()
    assert not (tmp_path / HIGH_WATERMARK_FILE).exists()
