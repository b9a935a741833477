"""Failures of real server processes in the embedded (SQLite) mode: leaders killed again and again
under acks=all writes, the KIP-101 divergent-log case, coordinator-epoch and leader-epoch fencing of
forged requests, and restarts that never answer with a cluster missing its tables."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import fluss
import pytest
from failover_workload import (
    AckedWriter,
    bucket_leaders,
    create_table,
    lookup_missing,
    read_log_ids,
    rows,
    wait_for,
)
from harness import Cluster

from strom.common.errors import FencedLeaderEpochError, InvalidCoordinatorError, NotLeaderOrFollowerError
from strom.record.log_batch import iter_batches
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb

# production's session timeout, so that a quick failover can only be the fast path
SESSION_TIMEOUT = 10.0
CONFIG = {
    "tablet-server.session.timeout": f"{SESSION_TIMEOUT:.0f}s",
    "log.replica.max-lag-time": "2s",
    "log.replica.fetch.wait-max-time": "200ms",
}


def isr_of(cluster: Cluster, table: str) -> dict[int, list[int]]:
    db = sqlite3.connect(cluster.coordinator.data_dir / "metadata.db")
    try:
        found = db.execute(
            "SELECT b.bucket_id, b.isr FROM buckets b JOIN tables t ON t.table_id = b.table_id "
            "WHERE t.name = ?",
            (table,),
        ).fetchall()
    finally:
        db.close()
    return {bucket: sorted(json.loads(isr)) for bucket, isr in found}


def leader(cluster: Cluster, table: str, bucket: int = 0) -> int:
    current = bucket_leaders(cluster.coordinator.host, cluster.coordinator.port, table)[bucket][0]
    assert current is not None
    return current


# long (make test-long): 33 s; the fault campaign's leader kills and
# test_client_log_tables.py's killed leader keep this in make test
@pytest.mark.long
def test_repeated_leader_kills_lose_no_acknowledged_write(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=3, config=CONFIG)
    asyncio.run(create_table(cluster.bootstrap, "kills_log"))
    asyncio.run(create_table(cluster.bootstrap, "kills_pk", primary_key=True))
    log_writer = AckedWriter(cluster.bootstrap, "kills_log").start()
    pk_writer = AckedWriter(cluster.bootstrap, "kills_pk", primary_key=True).start()
    pauses = []
    for round_ in range(10):
        table = "kills_log" if round_ % 2 == 0 else "kills_pk"
        victim = leader(cluster, table)
        killed_at = time.monotonic()
        cluster.kill_tablet_server(victim)
        pauses.append(max(log_writer.resumed_after(killed_at), pk_writer.resumed_after(killed_at)))
        cluster.start_tablet_server(victim)
        wait_for(
            lambda: all(
                isr == [0, 1, 2] for t in ("kills_log", "kills_pk") for isr in isr_of(cluster, t).values()
            ),
            what=f"server {victim} back in every ISR (round {round_})",
        )
    log_acked = log_writer.stop()
    pk_acked = pk_writer.stop()
    print("write pauses after leader kills (s):", [f"{p:.2f}" for p in pauses])
    # the coordinator noticed each dead process at once, not after its 10 s session timeout
    assert max(pauses) < SESSION_TIMEOUT / 2, pauses

    ids = asyncio.run(read_log_ids(cluster.bootstrap, "kills_log"))
    assert len(ids) == len(set(ids)), "a row was written twice"
    assert log_acked <= set(ids), f"acknowledged rows lost: {sorted(log_acked - set(ids))[:10]}"
    assert asyncio.run(lookup_missing(cluster.bootstrap, "kills_pk", pk_acked)) == []


def test_a_stopping_leader_answers_its_requests_and_hands_its_buckets_over(cluster_factory: Any) -> None:
    """SIGTERM of the leader while pyfluss appends with acks=all (controlled shutdown): a fetch it
    holds is answered with NOT_LEADER_OR_FOLLOWER rather than cut off with its connection, the
    coordinator moves the leadership before the port closes, and pyfluss keeps writing without an
    error or a pause (before, a request in flight could go unanswered until the client's timeout)."""
    cluster: Cluster = cluster_factory(tablet_servers=3, config=CONFIG)
    asyncio.run(create_table(cluster.bootstrap, "graceful"))
    # nothing is written here: a fetch of it waits (3 buckets on 3 servers, so the victim leads one)
    asyncio.run(create_table(cluster.bootstrap, "graceful_idle", buckets=3))
    writer = AckedWriter(cluster.bootstrap, "graceful").start()
    victim = leader(cluster, "graceful")
    server = cluster.tablet_servers[victim]
    idle_leaders = bucket_leaders(cluster.coordinator.host, cluster.coordinator.port, "graceful_idle")
    idle_bucket = next(b for b, (lead, _) in idle_leaders.items() if lead == victim)

    async def stop_under_a_held_fetch() -> BaseException | None:
        connection = await RpcConnection.connect(server.host, server.port)
        try:
            metadata = pb.MetadataRequest()
            metadata.table_path.add(database_name="fluss", table_name="graceful_idle")
            table_id = (await connection.request(ApiKey.GET_METADATA, metadata)).table_metadata[0].table_id
            fetch = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1 << 20, max_wait_ms=30_000)
            table = fetch.tables_req.add(table_id=table_id, projection_pushdown_enabled=False)
            table.buckets_req.add(bucket_id=idle_bucket, fetch_offset=0, max_fetch_bytes=1 << 20)
            held = asyncio.ensure_future(connection.request(ApiKey.FETCH_LOG, fetch, timeout=30))
            await asyncio.sleep(0.5)
            assert not held.done(), held
            await asyncio.get_running_loop().run_in_executor(None, server.stop)  # SIGTERM, waits for exit
            return await asyncio.wait_for(held, 5)
        except Exception as e:
            return e
        finally:
            connection.close()

    stopped_at = time.monotonic()
    outcome = asyncio.run(stop_under_a_held_fetch())
    stop_s = time.monotonic() - stopped_at
    assert isinstance(outcome, NotLeaderOrFollowerError), outcome
    pause = writer.resumed_after(stopped_at)
    writer.wait_for_acks(len(writer.acks) + 20)
    acked = writer.stop()
    acks = [t for t, _, _ in writer.acks if t > stopped_at - 1]
    gap = max(b - a for a, b in itertools.pairwise(acks))
    print(f"stop {stop_s:.2f} s, first ack after {pause:.2f} s, longest gap {gap:.2f} s")
    assert not writer.errors, writer.errors
    assert gap < 2.0, gap  # no request was left for pyfluss's own timeout to find
    log = (cluster.base_dir / "logs" / "coordinator-0.log").read_text()
    assert f"tablet server {victim} is shutting down: moving its leadership" in log
    assert leader(cluster, "graceful") != victim
    ids = asyncio.run(read_log_ids(cluster.bootstrap, "graceful"))
    assert acked <= set(ids) and len(ids) == len(set(ids))


def test_lookups_of_one_connection_follow_a_killed_leader(cluster_factory: Any) -> None:
    """64 callers keep looking keys up through one connection while the leader of one bucket is
    killed: the batches sent to the dead server are retried at the new leader, and every key is
    found with its value, before and after."""
    from strom.client import Connection

    cluster: Cluster = cluster_factory(tablet_servers=3, config=CONFIG)
    asyncio.run(create_table(cluster.bootstrap, "kills_lookups", primary_key=True, buckets=2))
    victim = leader(cluster, "kills_lookups", bucket=0)

    async def main() -> tuple[int, int, list[int]]:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as connection:
            table = await connection.get_table("fluss.kills_lookups")
            writer = table.new_upsert().create_writer()
            writer.write_arrow(rows(0, 500))
            await writer.flush()
            lookuper = table.new_lookup().create_lookuper()
            wrong: list[int] = []
            done = 0
            stop = asyncio.Event()

            async def caller(first: int) -> None:
                nonlocal done
                while not stop.is_set():
                    for i in range(first, 500, 64):
                        found = await lookuper.lookup({"id": i})
                        if found != {"id": i, "v": f"v{i}"}:
                            wrong.append(i)
                        done += 1

            callers = asyncio.gather(*(caller(c) for c in range(64)))
            await asyncio.sleep(0.3)
            cluster.kill_tablet_server(victim)
            before = done
            loop = asyncio.get_running_loop()
            while await loop.run_in_executor(None, leader, cluster, "kills_lookups", 0) == victim:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # lookups at the new leader
            stop.set()
            await callers
            return before, done, wrong

    before, done, wrong = asyncio.run(main())
    assert wrong == []
    assert before > 0 and done > before + 500, (before, done)


def _write(bootstrap: str, table: str, start: int, count: int) -> None:
    async def main() -> None:
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        try:
            writer = (
                (await connection.get_table(fluss.TablePath("fluss", table))).new_append().create_writer()
            )
            writer.write_arrow(rows(start, count))
            await writer.flush()
        finally:
            await connection.close()

    asyncio.run(main())


def _cut_last_batch(server_dir: Path) -> None:
    """What a power failure does to a log whose last append was never fsynced: it is gone."""
    segments = sorted(server_dir.glob("fluss/diverge-*/bucket-0/log/*.log"))
    active = segments[-1]
    data = active.read_bytes()
    starts = [position for position, _ in iter_batches(data)]
    with open(active, "r+b") as f:
        f.truncate(starts[-1])


def test_kip101_divergent_logs_end_identical(cluster_factory: Any) -> None:
    """KIP-101's scenario 2: leader A and follower B both hold batch m2; A dies, B takes over, then B
    dies too and comes back without m2 (a power failure took its unflushed tail). B leads again and
    writes m3 at m2's offset. A returns with m2 under its high watermark: truncating to the high
    watermark keeps m2 and the replicas diverge for good; truncating by leader epoch drops it.

    m2 itself is lost with B's page cache, as it would be in Kafka or Fluss without an fsync per
    append; what must hold is that both replicas end identical, with everything else they acknowledged.
    B restarts uncleanly, so it may lead again only because the table allows unclean leader elections:
    by default the bucket waits for an eligible replica (test_eligible_leaders.py).
    """
    config = {**CONFIG, "log.replica.high-watermark.checkpoint-interval": "100ms"}
    cluster: Cluster = cluster_factory(tablet_servers=2, config=config)
    asyncio.run(
        create_table(
            cluster.bootstrap,
            "diverge",
            replication=2,
            properties={"table.unclean.leader.election.enabled": "true"},
        )
    )
    _write(cluster.bootstrap, "diverge", 0, 100)  # R1
    _write(cluster.bootstrap, "diverge", 100, 1)  # m2: acknowledged by both replicas
    a = leader(cluster, "diverge")
    b = 1 - a
    time.sleep(0.5)  # A's high-watermark checkpoint now covers m2

    cluster.kill_tablet_server(a)
    wait_for(lambda: leader(cluster, "diverge") == b, what="B taking over")
    cluster.kill_tablet_server(b)
    _cut_last_batch(cluster.tablet_servers[b].data_dir)
    cluster.start_tablet_server(b)
    wait_for(lambda: leader(cluster, "diverge") == b, what="B leading again")
    _write(cluster.bootstrap, "diverge", 200, 1)  # m3, at m2's offset

    cluster.start_tablet_server(a)
    wait_for(lambda: isr_of(cluster, "diverge")[0] == [0, 1], what="A back in the ISR")
    from_b = asyncio.run(read_log_ids(cluster.bootstrap, "diverge"))
    cluster.kill_tablet_server(b)
    wait_for(lambda: leader(cluster, "diverge") == a, what="A leading")
    from_a = asyncio.run(read_log_ids(cluster.bootstrap, "diverge"))
    expected = [*range(100), 200]
    assert from_b == expected
    assert from_a == expected, "A kept m2 where B has m3: the replicas diverged"
    log = (cluster.base_dir / "logs" / f"tablet-server-{a}.log").read_text()
    assert "truncates from 101 to 100: the end of epoch 0 on the leader" in log


async def _request(address: tuple[str, int], key: ApiKey, message: Any) -> Any:
    connection = await RpcConnection.connect(*address)
    try:
        return await connection.request(key, message, timeout=10)
    finally:
        connection.close()


def test_forged_coordinator_requests_are_fenced(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=1)
    asyncio.run(create_table(cluster.bootstrap, "fenced", replication=1))
    server = cluster.tablet_servers[0]
    address = (server.host, server.port)
    current_leader, leader_epoch = bucket_leaders(
        cluster.coordinator.host, cluster.coordinator.port, "fenced"
    )[0]
    table_id = _get_table_id(cluster.bootstrap, "fenced")
    epoch = 1  # the coordinator's first epoch

    def notify(
        coordinator_epoch: int, epoch_of_leader: int, leader_id: int = 0
    ) -> pb.NotifyLeaderAndIsrRequest:
        request = pb.NotifyLeaderAndIsrRequest(coordinator_epoch=coordinator_epoch)
        entry = request.notify_buckets_leader_req.add(
            leader=leader_id, leader_epoch=epoch_of_leader, replicas=[0], isr=[0], bucket_epoch=0
        )
        entry.physical_table_path.database_name = "fluss"
        entry.physical_table_path.table_name = "fenced"
        entry.table_bucket.table_id = table_id
        entry.table_bucket.bucket_id = 0
        return request

    # an older coordinator, and one claiming an epoch the cluster never reached
    for forged_epoch in (epoch - 1, epoch + 100):
        with pytest.raises(InvalidCoordinatorError):
            asyncio.run(
                _request(address, ApiKey.NOTIFY_LEADER_AND_ISR, notify(forged_epoch, leader_epoch + 5))
            )
    with pytest.raises(InvalidCoordinatorError):  # no epoch at all counts as Fluss's initial epoch 0
        asyncio.run(_request(address, ApiKey.UPDATE_METADATA, pb.UpdateMetadataRequest()))
    stale = pb.StopReplicaRequest(coordinator_epoch=epoch - 1)
    stale_entry = stale.stop_replicas_req.add(leader_epoch=leader_epoch + 5, delete=True)
    stale_entry.table_bucket.table_id = table_id
    stale_entry.table_bucket.bucket_id = 0
    with pytest.raises(InvalidCoordinatorError):
        asyncio.run(_request(address, ApiKey.STOP_REPLICA, stale))

    # the current coordinator epoch with a stale leader epoch, or another leader in the same epoch
    for forged in (notify(epoch, leader_epoch - 1), notify(epoch, leader_epoch, leader_id=7)):
        response = asyncio.run(_request(address, ApiKey.NOTIFY_LEADER_AND_ISR, forged))
        assert response.notify_buckets_leader_resp[0].error_code == FencedLeaderEpochError.code
    stop = pb.StopReplicaRequest(coordinator_epoch=epoch)
    entry = stop.stop_replicas_req.add(leader_epoch=leader_epoch - 1, delete=True)
    entry.table_bucket.table_id = table_id
    entry.table_bucket.bucket_id = 0
    response = asyncio.run(_request(address, ApiKey.STOP_REPLICA, stop))
    assert response.stop_replicas_resp[0].error_code == FencedLeaderEpochError.code

    # nothing changed: the table is still there, led by the same server, and writable
    assert bucket_leaders(cluster.coordinator.host, cluster.coordinator.port, "fenced")[0] == (
        current_leader,
        leader_epoch,
    )
    _write(cluster.bootstrap, "fenced", 0, 10)
    assert asyncio.run(read_log_ids(cluster.bootstrap, "fenced")) == list(range(10))


def _get_table_id(bootstrap: str, table: str) -> int:
    async def main() -> int:
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        try:
            return (await connection.get_table(fluss.TablePath("fluss", table))).get_table_info().table_id
        finally:
            await connection.close()

    return asyncio.run(main())


def test_restarts_never_answer_table_not_found(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(tablet_servers=2, config=CONFIG)
    asyncio.run(create_table(cluster.bootstrap, "kept", replication=2))
    table_id = _get_table_id(cluster.bootstrap, "kept")

    # the coordinator alone restarts: it still knows its tablet servers
    cluster.restart_coordinator(kill=True)
    assert _get_table_id(cluster.bootstrap, "kept") == table_id

    # the whole cluster stops cleanly and starts again; a client asks before the tablet servers are up
    cluster.stop()
    cluster.start_coordinator()

    def start_tablet_servers_later() -> None:
        time.sleep(1.0)
        for server in cluster.tablet_servers.values():
            server.start()

    starter = threading.Thread(target=start_tablet_servers_later)
    starter.start()
    try:
        assert _get_table_id(cluster.bootstrap, "kept") == table_id
    finally:
        starter.join()
    cluster.wait_for_tablet_servers({0, 1})
    _write(cluster.bootstrap, "kept", 0, 10)
    assert asyncio.run(read_log_ids(cluster.bootstrap, "kept")) == list(range(10))
