"""A follower's fetch answered after its replica changed term is dropped, not appended.

Found by the 30-minute fault campaign (seed 2, docs/reliability.md): a PK-table leader was paused
with an upsert in its log that one follower had not fetched yet; that follower was elected, and its
fetch, still waiting at the paused leader, was answered when the leader resumed. The new leader
appended the old term's records as a follower would, past its KV tablet: the client's retry of the
upsert was then acknowledged as a duplicate, and lookups saw the older value (12 stale lookups).

The old leader here is a stand-in that holds the fetch until released; the fetcher, the replica and
its log are the real ones. The same holds for the answer to a truncation request (OffsetForLeaderEpoch)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import pytest
from kv_table_maker import make_info
from log_batch_maker import make_batch

from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.types import INT
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import LogTablet
from strom.server.tablet.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from strom.server.tablet.replica_manager import Replica

BUCKET = TableBucket(7, None, 0)
OLD_LEADER, ME = 1, 0


class PausedLeader:
    """Answers the first fetch only when released, with two records at the offset asked for."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.fetches = 0

    async def request(self, host: str, port: int, key: Any, message: Any, timeout: float) -> Any:
        self.fetches += 1
        if self.fetches > 1:
            await asyncio.sleep(3600)  # later fetches: nothing new, ever
        self.asked.set()
        await self.release.wait()
        asked = message.tables_req[0].buckets_req[0]
        response = pb.FetchLogResponse()
        result = response.tables_resp.add(table_id=BUCKET.table_id).buckets_resp.add(bucket_id=BUCKET.bucket)
        result.records = make_batch(b"old term", records=2, base_offset=asked.fetch_offset)
        result.high_watermark = asked.fetch_offset + 2
        return response


def become_leader(replica: Replica) -> None:
    replica.leader, replica.leader_epoch = ME, replica.leader_epoch + 1


def follow_another_leader(replica: Replica) -> None:
    replica.leader, replica.leader_epoch, replica.needs_truncation = 2, replica.leader_epoch + 1, True


@pytest.mark.parametrize("change", [become_leader, follow_another_leader])
def test_an_answer_to_a_fetch_of_an_earlier_term_is_not_appended(tmp_path: Path, change: Any) -> None:
    asyncio.run(follow_through_a_term_change(tmp_path, change))


async def follow_through_a_term_change(tmp_path: Path, change: Any) -> None:
    log = LogTablet.open(tmp_path / "log", LogConfig(segment_ms=None, retention_ms=None))
    log.append_as_leader(make_batch(records=3))
    schema = Schema([Column("k", INT())], primary_key=["k"])
    replica = Replica(
        BUCKET, "db", "t", None, tmp_path, make_info(schema), log=log, leader=OLD_LEADER, leader_epoch=5
    )
    replica.local_id = ME
    replica._batch_check = lambda *_: None  # the stand-in's batches carry no Arrow payload
    leader = PausedLeader()
    fetchers = ReplicaFetcherManager(
        ME,
        cast(ConnectionPool, leader),
        lambda server: ("127.0.0.1", 1),
        FetcherSettings(max_bytes=1 << 20, max_bytes_per_bucket=1 << 20, max_wait_ms=500, backoff=0.01),
    )
    try:
        fetchers.follow(replica)
        await asyncio.wait_for(leader.asked.wait(), 5)
        change(replica)  # what NotifyLeaderAndIsr does while the old leader is paused
        fetchers.unfollow(BUCKET)
        leader.release.set()  # the old leader resumes and answers
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert log.log_end_offset == 3, "the old term's records reached the log"
        assert log.high_watermark <= 3
    finally:
        await fetchers.close()
        log.close()


class PausedTruncationLeader:
    """Answers the first OffsetForLeaderEpoch only when released: its epoch 4 ends at offset 1."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.requests = 0

    async def request(self, host: str, port: int, key: Any, message: Any, timeout: float) -> Any:
        self.requests += 1
        if self.requests > 1:
            await asyncio.sleep(3600)  # anything after it (a fetch): never answered
        self.asked.set()
        await self.release.wait()
        response = internal.OffsetForLeaderEpochResponse()
        response.buckets.add(table_id=BUCKET.table_id, bucket_id=BUCKET.bucket, leader_epoch=4, end_offset=1)
        return response


def test_an_answer_to_a_truncation_request_of_an_earlier_term_is_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The old leader's answer would cut the log to where its epoch 4 ends and clear the pending
    truncation, so the replica would never truncate against the new leader (a divergence)."""
    caplog.set_level(logging.INFO, logger="strom.server.tablet.replica_fetcher")
    asyncio.run(truncate_through_a_term_change(tmp_path))
    assert "OffsetForLeaderEpoch answer for" in caplog.text


async def truncate_through_a_term_change(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path / "log", LogConfig(segment_ms=None, retention_ms=None))
    log.leader_epochs.assign(4, 0)
    for _ in range(3):  # one record a batch, so that the log can be cut at offset 1
        log.append_as_leader(make_batch())
    schema = Schema([Column("k", INT())], primary_key=["k"])
    replica = Replica(
        BUCKET, "db", "t", None, tmp_path, make_info(schema), log=log, leader=OLD_LEADER, leader_epoch=5
    )
    replica.local_id = ME
    replica.needs_truncation = True
    leader = PausedTruncationLeader()
    fetchers = ReplicaFetcherManager(
        ME,
        cast(ConnectionPool, leader),
        lambda server: ("127.0.0.1", 1),
        FetcherSettings(max_bytes=1 << 20, max_bytes_per_bucket=1 << 20, max_wait_ms=500, backoff=0.01),
    )
    try:
        fetchers.follow(replica)
        await asyncio.wait_for(leader.asked.wait(), 5)
        follow_another_leader(replica)  # NotifyLeaderAndIsr while the old leader is paused
        fetchers.unfollow(BUCKET)
        leader.release.set()  # the old leader resumes and answers
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert log.log_end_offset == 3, "truncated against the old leader"
        assert replica.needs_truncation, "the truncation against the new leader was cleared"
    finally:
        await fetchers.close()
        log.close()
