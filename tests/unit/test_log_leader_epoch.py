"""The leader-epoch cache of a log (KIP-101): assignment, Kafka's endOffsetFor, truncation, the
checkpoint file, and the cache following the log tablet's truncations."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from log_batch_maker import make_batch

from strom.server.tablet.log.leader_epoch import (
    _WRITER,
    LEADER_EPOCH_FILE,
    UNDEFINED,
    EpochEntry,
    LeaderEpochCache,
)
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import LogTablet


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


def test_assign_keeps_epochs_and_offsets_increasing(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    assert cache.latest_epoch == UNDEFINED
    assert cache.assign(0, 0)
    assert not cache.assign(0, 10)  # an epoch keeps its first start offset
    assert cache.assign(2, 10)
    assert cache.assign(3, 10)  # no data in epoch 2: epoch 3 takes its place
    assert pairs(cache) == [(0, 0), (3, 10)]
    assert cache.assign(5, 20)
    assert not cache.assign(3, 30)  # an epoch already known
    # a lower epoch at a lower offset than later ones replaces them (the log was truncated below them)
    assert cache.assign(4, 15)
    assert pairs(cache) == [(0, 0), (3, 10), (4, 15)]


def test_end_offset_for_follows_kafka(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    assert cache.end_offset_for(1, 100) == (UNDEFINED, UNDEFINED)  # nothing known
    for epoch, start in [(1, 10), (3, 40), (6, 70)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(6, 100) == (6, 100)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 100) == (3, 70)
    assert cache.end_offset_for(4, 100) == (3, 70)  # largest known epoch <= 4
    assert cache.end_offset_for(0, 100) == (0, 10)  # below every known epoch
    assert cache.end_offset_for(7, 100) == (UNDEFINED, UNDEFINED)  # above every known epoch
    assert cache.end_offset_for(UNDEFINED, 100) == (UNDEFINED, UNDEFINED)


def test_truncation_and_persistence(tmp_path: Path) -> None:
    cache = LeaderEpochCache.load(tmp_path)
    for epoch, start in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(20)
    assert pairs(cache) == [(0, 0), (1, 10)]
    cache.truncate_from_start(15)
    assert pairs(cache) == [(1, 15)]
    assert pairs(LeaderEpochCache.load(tmp_path)) == [(1, 15)]  # every change is on disk
    cache.clear()
    assert LeaderEpochCache.load(tmp_path).entries == []


def test_damaged_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / LEADER_EPOCH_FILE).write_text("0\n2\n1 10\n0 20\n")  # out of order
    assert LeaderEpochCache.load(tmp_path).entries == []
    (tmp_path / LEADER_EPOCH_FILE).write_text("0\n3\n1 10\n")  # fewer entries than announced
    assert LeaderEpochCache.load(tmp_path).entries == []
    (tmp_path / LEADER_EPOCH_FILE).write_text("0\n1\n4 7\n")
    assert LeaderEpochCache.load(tmp_path).entries == [EpochEntry(4, 7)]


def test_log_truncation_carries_the_epochs(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1 << 20)
    tablet = LogTablet.open(tmp_path, config)
    tablet.leader_epochs.assign(0, 0)
    for _ in range(3):
        tablet.append_as_leader(make_batch(records=5))
    tablet.leader_epochs.assign(1, tablet.log_end_offset)  # offsets 15.. in epoch 1
    tablet.append_as_leader(make_batch(records=5))
    tablet.truncate_to(10)  # a follower cut back: epoch 1 is gone from its log
    assert pairs(tablet.leader_epochs) == [(0, 0)]
    tablet.leader_epochs.assign(2, tablet.log_end_offset)
    tablet.append_as_leader(make_batch(records=5))
    tablet.leader_epochs.assign(3, tablet.log_end_offset)  # a term that wrote nothing
    tablet.close()
    reopened = LogTablet.open(tmp_path, config)
    # an epoch without data in the log is not kept across a restart (Kafka's truncateFromEnd)
    assert pairs(reopened.leader_epochs) == [(0, 0), (2, 10)]
    reopened.truncate_fully_and_start_at(50)
    assert reopened.leader_epochs.entries == []
    reopened.close()


def test_the_checkpoint_is_fsynced_off_the_callers_thread_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is the event loop: it writes the change to the page cache and goes on; one writer
    thread fsyncs and renames the changes in their order. A process killed before the writer ran
    still finds its newest change (the temporary file) when it loads."""
    fsynced_on: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsynced_on.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    cache = LeaderEpochCache.load(tmp_path)
    # hold the writer thread, as a slow disk would: the changes wait behind it
    release = threading.Event()
    _WRITER.submit(release.wait, 10)
    for epoch in range(1, 41):
        cache.assign(epoch, epoch * 10)
    assert fsynced_on == []  # the caller did not wait for the disk
    # "killed" now: a new process loads the newest complete change, not the stale checkpoint
    assert LeaderEpochCache.load(tmp_path).entries[-1] == EpochEntry(40, 400)
    release.set()
    cache.assign(41, 410)
    cache.sync()
    assert fsynced_on and all(name.startswith("leader-epoch-checkpoint") for name in fsynced_on)
    # the earlier changes, renamed in their order, did not overwrite the latest one
    assert LeaderEpochCache.load(tmp_path).entries == cache.entries
    assert cache.entries[-1] == EpochEntry(41, 410)
    assert not list(tmp_path.glob(f"{LEADER_EPOCH_FILE}.*.tmp"))
