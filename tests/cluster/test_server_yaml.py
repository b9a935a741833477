"""A cluster started only from Fluss `server.yaml` files (no CLI flags but --config-file), served to
the official pyfluss client: data.dir, tablet-server.id, tablet-server.rack, bind.listeners,
remote.data.dir, zookeeper.address and allow.create.kv.tables are honoured, --config wins over the
file, and a misspelt key is logged with the key it was probably meant to be."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import run_pyfluss

from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.launcher import free_port
from strom.server.zookeeper.local_server import LocalZooKeeper


def write_yaml(path: Path, entries: dict[str, object]) -> Path:
    lines = ["# a Fluss server.yaml: flat key: value lines"]
    lines += [f"{key}: {value}" for key, value in entries.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def start(role: str, config_file: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "strom", role, "--config-file", str(config_file), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def racks(port: int) -> tuple[dict[int, str], dict[int, str]]:
    """Each tablet server's rack as DescribeCluster (strom status) and Metadata report it."""
    connection = await RpcConnection.connect("127.0.0.1", port, connect_timeout=2)
    try:
        described = await connection.request(
            ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest(), timeout=5
        )
        metadata = await connection.request(ApiKey.GET_METADATA, pb.MetadataRequest(), timeout=5)
    finally:
        connection.close()
    return (
        {s.server_id: s.rack for s in described.tablet_servers if s.HasField("rack")},
        {s.node_id: s.rack for s in metadata.tablet_servers if s.HasField("rack")},
    )


def test_a_cluster_from_server_yaml_files_alone_serves_pyfluss(
    tmp_path: Path, zookeeper: LocalZooKeeper
) -> None:
    coordinator_port, tablet_port = free_port(), free_port()
    root = f"/strom-yaml-{uuid.uuid4().hex[:8]}"  # apart from other clusters on the shared ZooKeeper
    remote = tmp_path / "remote"
    coordinator_yaml = write_yaml(
        tmp_path / "coordinator.yaml",
        {
            "zookeeper.address": zookeeper.address,
            "zookeeper.path.root": root,
            "bind.listeners": f"FLUSS://127.0.0.1:{coordinator_port}",
            "data.dir": tmp_path / "coordinator-data",
            "remote.data.dir": remote,
            "default.bucket.number": 5,  # --config below sets 2, and wins
            "allow.create.kv.tables": "false",
            "defualt.replication.factor": 1,  # misspelt: logged with the key meant
            "log.file-preallocate": "true",  # accepted, logged as having no effect
        },
    )
    tablet_yaml = write_yaml(
        tmp_path / "tablet-server.yaml",
        {
            "zookeeper.address": zookeeper.address,
            "zookeeper.path.root": root,
            "bind.listeners": f"FLUSS://127.0.0.1:{tablet_port}",
            "tablet-server.id": 7,
            "tablet-server.rack": "rack-a",
            "data.dir": tmp_path / "tablet-data",
            "remote.data.dir": remote,
        },
    )
    coordinator_log, tablet_log = tmp_path / "coordinator.log", tmp_path / "tablet-server.log"
    coordinator = start(
        "coordinator", coordinator_yaml, coordinator_log, "--config", "default.bucket.number=2"
    )
    tablet = start("tablet-server", tablet_yaml, tablet_log)
    bootstrap = f"127.0.0.1:{coordinator_port}"
    try:

        async def wait_for_tablet_server(connection: Any) -> list[Any]:
            while True:
                nodes = await connection.get_admin().get_server_nodes()
                if any(n.server_type == "TabletServer" for n in nodes):
                    return nodes
                await asyncio.sleep(0.2)

        deadline = time.monotonic() + 60
        while True:  # the coordinator takes a moment to bind and win its election
            assert coordinator.poll() is None, coordinator_log.read_text()
            assert tablet.poll() is None, tablet_log.read_text()
            try:
                nodes = run_pyfluss(bootstrap, wait_for_tablet_server, timeout=30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        tablets = [(n.id, n.port) for n in nodes if n.server_type == "TabletServer"]
        assert tablets == [(7, tablet_port)]  # tablet-server.id and bind.listeners
        assert asyncio.run(racks(coordinator_port)) == ({7: "rack-a"}, {7: "rack-a"})

        path = fluss.TablePath("fluss", "from_yaml")
        keyed = fluss.TablePath("fluss", "from_yaml_pk")
        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        rows = pa.table({"id": pa.array(range(100), pa.int64()), "name": [f"n{i}" for i in range(100)]})

        async def body(connection: Any) -> tuple[int, pa.Table, int]:
            admin = connection.get_admin()
            await admin.create_table(path, fluss.TableDescriptor(fluss.Schema(schema)))
            info = await admin.get_table_info(path)
            table = await connection.get_table(path)
            writer = table.new_append().create_writer()
            writer.write_arrow(rows)
            await writer.flush()
            scanner = await table.new_scan().create_record_batch_log_scanner()
            scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(info.num_buckets)})
            read = await scanner.to_arrow()
            with pytest.raises(fluss.FlussError) as refused:
                await admin.create_table(
                    keyed, fluss.TableDescriptor(fluss.Schema(schema, primary_keys=["id"]))
                )
            assert "Creation of Primary Key Tables is disallowed" in refused.value.message
            return info.num_buckets, read, refused.value.error_code

        buckets, read, code = run_pyfluss(bootstrap, body)
        assert buckets == 2  # --config default.bucket.number=2 over the file's 5
        assert read.sort_by("id").equals(rows)
        assert code == fluss.ErrorCode.INVALID_TABLE_EXCEPTION
        # data.dir: the table's log lives under the tablet server's data.dir
        assert list((tmp_path / "tablet-data").rglob("*.log")), "no log segment under data.dir"
    finally:
        stop(tablet)
        stop(coordinator)
    log_text = coordinator_log.read_text()
    assert "unknown configuration key 'defualt.replication.factor'" in log_text
    assert "did you mean 'default.replication.factor'?" in log_text
    assert "'log.file-preallocate' is accepted for compatibility and has no effect" in log_text


def test_kafka_enabled_without_a_kafka_listener_is_refused_at_start(tmp_path: Path) -> None:
    config = write_yaml(
        tmp_path / "server.yaml",
        {
            "kafka.enabled": "true",
            "data.dir": tmp_path / "data",
            "tablet-server.id": "0",
            "bind.listeners": f"FLUSS://127.0.0.1:{free_port()}",
        },
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "tablet-server",
            "--config-file",
            str(config),
            "--coordinator",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "bind.listeners has no listener named in kafka.listener.names (KAFKA)" in done.stdout + done.stderr
