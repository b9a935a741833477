"""High availability on ZooKeeper with real processes: `strom local --zookeeper --coordinators 2` as a
user runs it (active and standby coordinators, SIGKILL of each role under acks=all writes, a full stop
and start), a coordinator killed in the middle of CreateTable and of a leader election, and a tablet
server whose ZooKeeper session expires (a long stall) registering again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
from failover_workload import AckedWriter, bucket_leaders, create_table, read_log_ids, wait_for
from harness import Cluster
from kazoo.client import KazooClient

from strom.common.errors import FlussError, LeaderNotAvailableError
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.launcher import free_port

HA_CONFIG = {"log.replica.max-lag-time": "2s", "log.replica.fetch.wait-max-time": "200ms"}


# ---- strom local, as the user runs it


def start_local(data_dir: Path, port: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "strom", "local", "--data-dir", str(data_dir), "--port", str(port),
            "--zookeeper", "--coordinators", "2", "--tablet-servers", "3", "--no-tiering",
            "--config", "tablet-server.session.timeout=10s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    assert process.stdout is not None
    output = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        output.append(line)
        if "cluster ready" in line:
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            return process
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("strom local did not become ready:\n" + "".join(output))


def stop_local(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(60)


def ddl_works(bootstrap: str, name: str) -> bool:
    async def main() -> None:
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        try:
            await connection.get_admin().create_database(name, ignore_if_exists=True)
        finally:
            await connection.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
        return True
    except Exception:
        return False


def test_strom_local_with_zookeeper_survives_each_kind_of_kill_and_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    process = start_local(data_dir, free_port())
    try:
        cluster = json.loads((data_dir / "cluster.json").read_text())
        bootstrap = cluster["bootstrap"]
        assert len(bootstrap.split(",")) == 2
        zk = KazooClient(hosts=cluster["zookeeper"])
        zk.start()
        try:
            active = json.loads(zk.get("/fluss/coordinators/active")[0])
            assert sorted(zk.get_children("/fluss/tabletservers/ids")) == ["0", "1", "2"]
        finally:
            zk.stop()
            zk.close()
        coordinators = {s["port"]: s["pid"] for s in cluster["servers"] if s["role"] == "coordinator"}
        active_port = int(active["listeners"].rsplit(":", 1)[1])
        standby_port = next(p for p in coordinators if p != active_port)

        asyncio.run(create_table(bootstrap, "ha_events", replication=3))
        writer = AckedWriter(bootstrap, "ha_events").start()
        killed = time.monotonic()
        os.kill(coordinators[active_port], signal.SIGKILL)
        wait_for(lambda: ddl_works(bootstrap, "after_failover"), timeout=15, what="DDL on the new active one")
        coordinator_failover = time.monotonic() - killed
        writer.wait_for_acks(len(writer.acks) + 5)

        leader = bucket_leaders("127.0.0.1", standby_port, "ha_events")[0][0]
        pid = next(s["pid"] for s in cluster["servers"] if s["role"] == "tablet-server" and s["id"] == leader)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        pause = writer.resumed_after(killed)
        acked = writer.stop()
        print(f"DDL back after {coordinator_failover:.2f}s; writes paused {pause:.2f}s after a leader died")
        assert pause < 3.0, pause
        ids = asyncio.run(read_log_ids(bootstrap, "ha_events"))
        assert len(ids) == len(set(ids)), "a row was written twice"
        assert acked <= set(ids), f"acknowledged rows lost: {sorted(acked - set(ids))[:10]}"
    finally:
        stop_local(process)
    assert not (data_dir / "cluster.json").exists()  # nobody mistakes a stopped cluster for a running one

    process = start_local(data_dir, free_port())
    try:
        bootstrap = json.loads((data_dir / "cluster.json").read_text())["bootstrap"]
        after = asyncio.run(read_log_ids(bootstrap, "ha_events"))
        assert set(after) >= acked and len(after) == len(ids)
    finally:
        stop_local(process)


# ---- coordinator failover at awkward moments


def active_coordinator(cluster: Cluster) -> Any:
    """The coordinator process named in /coordinators/active of this cluster's root."""
    zk = KazooClient(hosts=cluster.config["zookeeper.address"])
    zk.start()
    try:
        data, _ = zk.get(f"{cluster.config['zookeeper.path.root']}/coordinators/active")
    finally:
        zk.stop()
        zk.close()
    port = int(json.loads(data)["listeners"].rsplit(":", 1)[1])
    return next(c for c in cluster.coordinators if c.port == port)


def test_coordinator_killed_during_create_table(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(3, HA_CONFIG, zookeeper=True, coordinators=2)
    created: list[str] = []
    retried: list[str] = []

    async def create_many() -> None:
        # pyfluss 1.0 keeps a connection's coordinator for good: an application reconnects (through
        # its bootstrap servers, both coordinators) and retries, which CreateTable allows
        schema = fluss.Schema(pa.schema([("id", pa.int64())]))
        descriptor = fluss.TableDescriptor(
            schema, bucket_count=3, properties={"table.replication.factor": "2"}
        )
        connection = None
        for i in range(40):
            for attempt in range(60):
                try:
                    if connection is None:
                        config = fluss.Config({"bootstrap.servers": cluster.bootstrap})
                        connection = await fluss.FlussConnection.create(config)
                    await connection.get_admin().create_table(
                        fluss.TablePath("fluss", f"t{i}"), descriptor, ignore_if_exists=True
                    )
                    created.append(f"t{i}")
                    break
                except Exception as e:
                    retried.append(f"t{i} attempt {attempt}: {str(e)[:80]}")
                    if connection is not None:
                        await connection.close()
                    connection = None
                    await asyncio.sleep(0.2)
        if connection is not None:
            await connection.close()

    creator = threading.Thread(target=lambda: asyncio.run(create_many()))
    creator.start()
    wait_for(lambda: len(created) >= 5, what="some tables created")
    active_coordinator(cluster).kill()
    creator.join(120)
    assert not creator.is_alive()
    assert created == [f"t{i}" for i in range(40)], retried[-3:]
    print(f"{len(retried)} CreateTable attempts failed while the coordinators failed over")

    # none is half-made: each has all its buckets, each led by a live server
    def complete() -> bool:
        port = next(c for c in cluster.coordinators if c.is_alive()).port
        for name in created:
            leaders = bucket_leaders("127.0.0.1", port, name)
            if len(leaders) != 3 or any(leader is None for leader, _ in leaders.values()):
                return False
        return True

    wait_for(complete, what="every created table with a leader for each bucket")


def test_coordinator_killed_during_a_leader_election(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(3, HA_CONFIG, zookeeper=True, coordinators=2)
    asyncio.run(create_table(cluster.bootstrap, "election", replication=3, buckets=3))
    writer = AckedWriter(cluster.bootstrap, "election").start()
    port = active_coordinator(cluster).port
    leaders = bucket_leaders("127.0.0.1", port, "election")
    victim = leaders[0][0]
    assert victim is not None
    # the tablet server dies and, before (or while) its buckets move, so does the active coordinator
    cluster.kill_tablet_server(victim)
    active_coordinator(cluster).kill()

    def moved() -> bool:
        port = next(c for c in cluster.coordinators if c.is_alive()).port
        current = bucket_leaders("127.0.0.1", port, "election")
        return all(leader not in (None, victim) for leader, _ in current.values())

    wait_for(moved, timeout=30, what="every bucket led by a live server under the new coordinator")
    writer.wait_for_acks(len(writer.acks) + 5, timeout=30)
    acked = writer.stop()
    ids = asyncio.run(read_log_ids(cluster.bootstrap, "election", buckets=3))
    assert acked <= set(ids) and len(ids) == len(set(ids))


# ---- ZooKeeper session loss


def test_tablet_server_whose_session_expired_registers_again(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(2, HA_CONFIG, zookeeper=True, coordinators=1)
    asyncio.run(create_table(cluster.bootstrap, "stalled", replication=2))
    stalled = cluster.tablet_servers[1]
    assert stalled.process is not None
    zk = KazooClient(hosts=cluster.config["zookeeper.address"])
    zk.start()
    ids_path = f"{cluster.config['zookeeper.path.root']}/tabletservers/ids"
    try:
        os.kill(stalled.process.pid, signal.SIGSTOP)  # a stall longer than the 3 s session timeout
        wait_for(
            lambda: zk.get_children(ids_path) == ["0"], timeout=20, what="the stalled server's node gone"
        )
        os.kill(stalled.process.pid, signal.SIGCONT)
        wait_for(lambda: sorted(zk.get_children(ids_path)) == ["0", "1"], timeout=30, what="re-registration")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stalled.process.pid, signal.SIGCONT)
        zk.stop()
        zk.close()
    cluster.wait_for_tablet_servers({0, 1})
    writer = AckedWriter(cluster.bootstrap, "stalled").start()
    writer.wait_for_acks(20)
    acked = writer.stop()
    assert acked <= set(asyncio.run(read_log_ids(cluster.bootstrap, "stalled")))


def test_tablet_server_without_an_active_coordinator_answers_leader_not_available(
    cluster_factory: Any,
) -> None:
    """A request the tablet server passes on to the coordinator, while ZooKeeper names none (the only
    coordinator died), is answered with the retriable LEADER_NOT_AVAILABLE, not an internal error."""
    cluster: Cluster = cluster_factory(1, HA_CONFIG, zookeeper=True, coordinators=1)
    server = cluster.tablet_servers[0]
    cluster.coordinator.kill()

    async def list_databases() -> FlussError | None:
        connection = await RpcConnection.connect(server.host, server.port)
        try:
            await connection.request(ApiKey.LIST_DATABASES, pb.ListDatabasesRequest(), timeout=10)
            return None
        except FlussError as e:
            return e
        finally:
            connection.close()

    # The active node goes when the dead coordinator's 3 s ZooKeeper session expires.
    deadline = time.monotonic() + 20
    answer = asyncio.run(list_databases())
    while not isinstance(answer, LeaderNotAvailableError) and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = asyncio.run(list_databases())
    assert isinstance(answer, LeaderNotAvailableError), f"{type(answer).__name__}: {answer}"
    assert "unexpected error" not in (cluster.base_dir / "logs" / "tablet-server-0.log").read_text()
