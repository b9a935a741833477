"""Eligible leader replicas (KIP-966) on a real cluster: acknowledged records survive when the replicas
that kept them are paused while the others lose their unflushed tails in a power cut.

The ordering that made the controller lose acknowledged records before ELR (RF 3, min ISR 2, acks=all):
1. every replica holds the acknowledged records; none of them is fsynced yet;
2. C is paused (SIGSTOP); A, the leader, loses power: B leads with ISR {B, C};
3. C's session expires: the ISR shrinks to {B}, below the minimum, so no acks=all write commits;
4. B loses power: the bucket has no leader, B stays its last ISR member;
5. A and B come back without their unflushed tails; B, "in the ISR", led with an empty log;
6. C resumes and followed B: it truncated the records only it still had.
With ELR, C joined the eligible leader replicas in step 3; A and B register after an unclean shutdown and
are not eligible, so the bucket waits for C in step 5 and C leads in step 6: nothing is lost.

The power cut is real as far as the file system goes: each tablet server's data directory is a
LazyMount (tests/faults/lazyfs.py), which forgets every write not fsynced; with
`log.flush.interval-messages` unset nothing fsyncs the appends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from faults.lazyfs import LazyMount, requires_fuse
from harness import Cluster

from strom.client import Connection, TableChange
from strom.client import TablePath as StromTablePath

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
CONFIG = {
    "log.replica.min-in-sync-replicas-number": "2",
    "log.replica.max-lag-time": "2s",
    "log.replica.fetch.wait-max-time": "200ms",
    "metrics.reporters": "prometheus",
    "metrics.reporter.prometheus.port": "0",
}
TABLE = fluss.TablePath("fluss", "acked")
ROWS = 500


def bucket_state(cluster: Cluster) -> dict[str, Any]:
    """Leader, replicas, ISR and ELR of the table's only bucket, from the coordinator's store."""
    db = sqlite3.connect(cluster.coordinator.data_dir / "metadata.db")
    try:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM buckets").fetchone()
    finally:
        db.close()
    return {
        "leader": row["leader"],
        "replicas": json.loads(row["replicas"]),
        "isr": json.loads(row["isr"]),
        "elr": json.loads(row["elr"]),
    }


def wait_for(predicate: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def pyfluss(cluster: Cluster, body: Any) -> Any:
    async def main() -> Any:
        config = fluss.Config({"bootstrap.servers": cluster.bootstrap})
        connection = await fluss.FlussConnection.create(config)
        try:
            return await asyncio.wait_for(body(connection), 60)
        finally:
            await connection.close()

    return asyncio.run(main())


def coordinator_metric(cluster: Cluster, name: str) -> float:
    log = cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]
    port = re.findall(r"Prometheus metrics on http://[^:]+:(\d+)/metrics", log)[-1]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return float(re.search(rf"^fluss_coordinator_{name} (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


async def describe_buckets(cluster: Cluster) -> list[Any]:
    async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as connection:
        status = await connection.get_admin().describe_cluster()
    return [b for t in status.tables if t.name == TABLE.table_name for b in t.buckets]


async def set_option(cluster: Cluster, key: str, value: str) -> None:
    async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as connection:
        path = StromTablePath(TABLE.database_name, TABLE.table_name)
        await connection.get_admin().alter_table(path, [TableChange.set_option(key, value)])


def power_cut(cluster: Cluster, mounts: dict[int, LazyMount], server_id: int) -> None:
    """SIGKILL, and what the server never fsynced is gone from its disk."""
    cluster.tablet_servers[server_id].kill()
    mounts[server_id].power_cut()


# the unclean variant is long (make test-long, 20 s): test_an_unclean_election_takes_the_longest_live_log
# keeps unclean elections in make test
@pytest.mark.parametrize(
    "unclean",
    [False, pytest.param(True, marks=pytest.mark.long)],
    ids=["elr", "unclean-election-after-waiting"],
)
@requires_fuse()
def test_acknowledged_records_survive_a_power_cut_of_two_replicas_while_the_third_is_paused(
    tmp_path: Path, unclean: bool
) -> None:
    """`unclean`: once the bucket waits, the operator accepts the loss (docs/operations.md's runbook):
    the table option elects a replica that lost the records, and they are gone."""
    with power_cut_cluster(tmp_path) as (cluster, mounts):
        scenario(cluster, mounts, unclean)


@contextlib.contextmanager
def power_cut_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, dict[int, LazyMount]]]:
    """Three tablet servers, each with its data directory on a LazyMount."""
    cluster = Cluster(tmp_path / "cluster", tablet_servers=3, config=CONFIG)
    mounts = {i: LazyMount(tmp_path / f"disk-{i}", s.data_dir) for i, s in cluster.tablet_servers.items()}
    try:
        for mount in mounts.values():
            mount.start()
        cluster.start()
        yield cluster, mounts
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for server in cluster.tablet_servers.values():
            if server.pid is not None and server.is_alive():
                os.kill(server.pid, signal.SIGCONT)  # a paused server cannot stop
        cluster.stop()
        for mount in mounts.values():
            mount.stop()


def scenario(cluster: Cluster, mounts: dict[int, LazyMount], unclean: bool) -> None:
    properties = {"table.replication.factor": "3"}

    async def create(connection: Any) -> None:
        descriptor = fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=1, properties=properties)
        await connection.get_admin().create_table(TABLE, descriptor)

    pyfluss(cluster, create)
    wait_for(lambda: len(bucket_state(cluster)["isr"]) == 3, "a full ISR")
    a, b, c = bucket_state(cluster)["replicas"]  # a leads; b is next in line

    async def write(connection: Any) -> None:
        table = await connection.get_table(TABLE)
        writer = table.new_append().create_writer()  # acks=all
        writer.write_arrow(pa.table({"id": range(ROWS), "v": [f"v{i}" for i in range(ROWS)]}, SCHEMA))
        await writer.flush()

    pyfluss(cluster, write)
    assert sorted(bucket_state(cluster)["isr"]) == sorted([a, b, c])  # all three hold every row

    paused = cluster.tablet_servers[c].pid
    assert paused is not None
    os.kill(paused, signal.SIGSTOP)
    try:
        power_cut(cluster, mounts, a)
        wait_for(lambda: bucket_state(cluster)["leader"] == b, "B leading")
        wait_for(lambda: bucket_state(cluster)["isr"] == [b], "the paused C leaving the ISR")
        assert bucket_state(cluster)["elr"] == [c]
        power_cut(cluster, mounts, b)
        wait_for(lambda: bucket_state(cluster)["leader"] is None, "no leader")
        cluster.start_tablet_server(a)
        cluster.start_tablet_server(b)
        time.sleep(1.0)  # the coordinator has had its chance to elect a replica that lost data
        state = bucket_state(cluster)
        assert (state["leader"], state["isr"], state["elr"]) == (None, [], [c])
        (shown,) = asyncio.run(describe_buckets(cluster))  # what `strom status` shows
        assert (shown.leader, shown.isr, shown.elr) == (None, [], [c])
        if unclean:
            asyncio.run(set_option(cluster, "table.unclean.leader.election.enabled", "true"))
            wait_for(lambda: bucket_state(cluster)["leader"] in (a, b), "an unclean leader")
    finally:
        os.kill(paused, signal.SIGCONT)
    cluster.wait_for_tablet_servers({a, b, c})
    wait_for(lambda: len(bucket_state(cluster)["isr"]) == 3, "every replica back in the ISR", timeout=30)
    if not unclean:
        assert bucket_state(cluster)["leader"] == c

    async def read(connection: Any) -> list[int]:
        table = await connection.get_table(TABLE)
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
        return sorted((await scanner.to_arrow()).column("id").to_pylist())

    ids = pyfluss(cluster, read)
    if unclean:
        # availability first, as the table asked: the acknowledged records are gone, and the log says so
        assert ids == []
        assert "UNCLEAN LEADER ELECTION" in cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]
        wait_for(lambda: coordinator_metric(cluster, "uncleanLeaderElectionCount") == 1, "the metric")
    else:
        assert ids == list(range(ROWS))
        wait_for(
            lambda: coordinator_metric(cluster, "electionFromEligibleLeaderReplicasCount") == 1, "the metric"
        )
        assert coordinator_metric(cluster, "uncleanLeaderElectionCount") == 0


def test_on_zookeeper_a_killed_replica_waits_for_the_one_stopped_cleanly(cluster_factory: Any) -> None:
    """The clean-shutdown record and the ZooKeeper registration: F is killed, L stopped with SIGTERM
    (both out of the ISR below the minimum, so both eligible); F returns first but is not eligible
    after its unclean shutdown; L returns and leads with every acknowledged record."""
    cluster: Cluster = cluster_factory(tablet_servers=2, config=CONFIG, zookeeper=True)

    async def create_and_write(connection: Any) -> None:
        descriptor = fluss.TableDescriptor(
            fluss.Schema(SCHEMA), bucket_count=1, properties={"table.replication.factor": "2"}
        )
        await connection.get_admin().create_table(TABLE, descriptor)
        table = await connection.get_table(TABLE)
        writer = table.new_append().create_writer()
        writer.write_arrow(pa.table({"id": range(ROWS), "v": [f"v{i}" for i in range(ROWS)]}, SCHEMA))
        await writer.flush()

    def shown() -> Any:
        (bucket,) = asyncio.run(describe_buckets(cluster))
        return bucket

    pyfluss(cluster, create_and_write)
    wait_for(lambda: len(shown().isr) == 2, "a full ISR")
    leader = shown().leader
    follower = 1 - leader
    cluster.kill_tablet_server(follower)
    wait_for(lambda: shown().elr == [follower], "the killed follower in the ELR")
    cluster.tablet_servers[leader].stop()  # SIGTERM: records a clean shutdown
    wait_for(lambda: shown().leader is None, "no leader")
    assert sorted(shown().elr) == sorted([leader, follower])
    cluster.start_tablet_server(follower)
    wait_for(lambda: shown().elr == [leader], "the killed follower leaving the ELR")
    assert shown().leader is None
    cluster.start_tablet_server(leader)
    wait_for(lambda: shown().leader == leader, "the cleanly stopped replica leading")
    wait_for(lambda: len(shown().isr) == 2, "the killed replica caught up", timeout=30)
    log = cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]

    def last_registration(server_id: int) -> str:
        return re.findall(rf"tablet server {server_id} registered at .*", log)[-1]

    assert "after an unclean shutdown" in last_registration(follower)
    assert "unclean" not in last_registration(leader)

    async def read(connection: Any) -> list[int]:
        table = await connection.get_table(TABLE)
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
        return sorted((await scanner.to_arrow()).column("id").to_pylist())

    assert pyfluss(cluster, read) == list(range(ROWS))


@requires_fuse()
def test_when_every_replica_restarted_uncleanly_the_longest_log_leads(tmp_path: Path) -> None:
    """The chain that lost 3,132 acknowledged appends in a campaign (docs/reliability.md): every replica
    of a bucket goes down at once, the first in assignment order by a power cut (its log ends at its
    last fsync), the others by kill -9 (the page cache kept every record). All three restart after an
    unclean shutdown, so none is eligible and waiting brings nothing back: a last-resort election.
    The first in assignment order led with the short log and the others truncated to it; now the
    coordinator asks each replica for its log and the longest leads."""
    with power_cut_cluster(tmp_path) as (cluster, mounts):
        properties = {"table.replication.factor": "3"}

        async def create_and_write(connection: Any) -> None:
            descriptor = fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=1, properties=properties)
            await connection.get_admin().create_table(TABLE, descriptor)
            table = await connection.get_table(TABLE)
            writer = table.new_append().create_writer()  # acks=all
            writer.write_arrow(pa.table({"id": range(ROWS), "v": [f"v{i}" for i in range(ROWS)]}, SCHEMA))
            await writer.flush()

        pyfluss(cluster, create_and_write)
        wait_for(lambda: len(bucket_state(cluster)["isr"]) == 3, "a full ISR")
        a, b, c = bucket_state(cluster)["replicas"]
        power_cut(cluster, mounts, a)
        cluster.kill_tablet_server(b)
        cluster.kill_tablet_server(c)
        wait_for(lambda: bucket_state(cluster)["leader"] is None, "no leader")
        for server_id in (a, b, c):
            cluster.start_tablet_server(server_id)
        cluster.wait_for_tablet_servers({a, b, c})
        wait_for(lambda: bucket_state(cluster)["leader"] is not None, "a last-resort leader")
        assert bucket_state(cluster)["leader"] == b  # the longest logs tie: the first of them
        wait_for(lambda: len(bucket_state(cluster)["isr"]) == 3, "every replica back in the ISR", timeout=30)

        async def read(connection: Any) -> list[int]:
            table = await connection.get_table(TABLE)
            scanner = await table.new_scan().create_record_batch_log_scanner()
            scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
            return sorted((await scanner.to_arrow()).column("id").to_pylist())

        assert pyfluss(cluster, read) == list(range(ROWS))
        log = cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]
        assert f"server {b} has the longest, not {a}" in log


def test_an_unclean_election_takes_the_longest_live_log(tmp_path: Path) -> None:
    """`table.unclean.leader.election.enabled` with no eligible replica live: of the live replicas the
    one with the longest log leads (the coordinator asks them, as for a last-resort election), not the
    first in assignment order, which here lost its unflushed tail in a power cut while the second was
    only killed and kept every acknowledged record."""
    with power_cut_cluster(tmp_path) as (cluster, mounts):
        properties = {"table.replication.factor": "3"}

        async def create_and_write(connection: Any) -> None:
            descriptor = fluss.TableDescriptor(fluss.Schema(SCHEMA), bucket_count=1, properties=properties)
            await connection.get_admin().create_table(TABLE, descriptor)
            table = await connection.get_table(TABLE)
            writer = table.new_append().create_writer()  # acks=all
            writer.write_arrow(pa.table({"id": range(ROWS), "v": [f"v{i}" for i in range(ROWS)]}, SCHEMA))
            await writer.flush()

        pyfluss(cluster, create_and_write)
        wait_for(lambda: len(bucket_state(cluster)["isr"]) == 3, "a full ISR")
        a, b, c = bucket_state(cluster)["replicas"]
        power_cut(cluster, mounts, a)
        cluster.kill_tablet_server(b)
        cluster.kill_tablet_server(c)
        wait_for(lambda: bucket_state(cluster)["leader"] is None, "no leader")
        cluster.start_tablet_server(a)
        cluster.start_tablet_server(b)  # both unclean, c down: nobody is eligible, no last resort
        assert bucket_state(cluster)["leader"] is None
        asyncio.run(set_option(cluster, "table.unclean.leader.election.enabled", "true"))
        wait_for(lambda: bucket_state(cluster)["leader"] is not None, "an unclean leader")
        assert bucket_state(cluster)["leader"] == b
        log = cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]
        assert f"server {b} has the longest, not {a}" in log
        assert "UNCLEAN LEADER ELECTION" in log

        async def read(connection: Any) -> list[int]:
            table = await connection.get_table(TABLE)
            scanner = await table.new_scan().create_record_batch_log_scanner()
            scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
            return sorted((await scanner.to_arrow()).column("id").to_pylist())

        assert pyfluss(cluster, read) == list(range(ROWS))
