"""`strom local` as a user runs it: ready message, cluster.json, clean stop, restart with metadata,
and a cluster without a lake whose composite-key tables pyfluss can write."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa

from strom.server.launcher import free_port, pid_alive


def start_local(data_dir: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    # the tiering service (Spark) has its own tests in tests/lake; these check the servers
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom",
            "local",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--no-tiering",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(process: subprocess.Popen[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    output = []
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        if "cluster ready" in line:
            return "".join(output)
    process.kill()
    raise AssertionError("strom local did not become ready:\n" + "".join(output))


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def test_strom_local_runs_stops_and_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    process = start_local(
        data_dir,
        port,
        "--lake-format",
        "iceberg",  # a lake, although --no-tiering: asked for
        "--tablet-servers",
        "2",
        "--config",
        "default.bucket.number=3",
        "--config",
        "tablet-server.session.timeout=3s",
    )
    try:
        output = wait_ready(process)
        assert f"127.0.0.1:{port}" in output
        cluster = json.loads((data_dir / "cluster.json").read_text())
        assert cluster["bootstrap"] == f"127.0.0.1:{port}"
        assert cluster["datalake"]["format"] == "iceberg"
        assert cluster["datalake"]["properties"]["type"] == "sql"
        assert cluster["datalake"]["name"] == "default"  # the Iceberg catalog name readers must use
        roles = sorted((s["role"], s["id"]) for s in cluster["servers"])
        assert roles == [("coordinator", 0), ("tablet-server", 0), ("tablet-server", 1)]
        pids = [s["pid"] for s in cluster["servers"]]
        assert all(pid_alive(pid) for pid in pids)
        tablet_ports = {s["port"] for s in cluster["servers"] if s["role"] == "tablet-server"}

        async def create() -> list[Any]:
            conn = await fluss.FlussConnection.create(
                fluss.Config({"bootstrap.servers": cluster["bootstrap"]})
            )
            admin = conn.get_admin()
            await admin.create_database("kept")
            await admin.create_table(
                fluss.TablePath("kept", "t"),
                fluss.TableDescriptor(fluss.Schema(pa.schema([("a", pa.int32())]))),
            )
            info = await admin.get_table_info(fluss.TablePath("kept", "t"))
            assert info.num_buckets == 3  # --config reached the coordinator
            nodes = await admin.get_server_nodes()
            await conn.close()
            return nodes

        nodes = asyncio.run(create())
        assert {n.port for n in nodes if n.server_type == "TabletServer"} == tablet_ports
    finally:
        stop(process)
    assert process.returncode == 0
    for pid in pids:
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid), f"server process {pid} still running after strom local stopped"

    # --no-tiering alone: no lake, so new tables are bound to no lake format (Iceberg's key encoder
    # would refuse the composite bucket key below)
    process = start_local(data_dir, port)
    try:
        wait_ready(process)
        assert json.loads((data_dir / "cluster.json").read_text())["datalake"] is None
        keyed = fluss.TablePath("kept", "composite")
        schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("v", pa.int64())])

        async def check() -> None:
            conn = await fluss.FlussConnection.create(
                fluss.Config({"bootstrap.servers": f"127.0.0.1:{port}"})
            )
            admin = conn.get_admin()
            assert await admin.list_tables("kept") == ["t"]
            descriptor = fluss.TableDescriptor(fluss.Schema(schema, primary_keys=["a", "b"]), bucket_count=2)
            await admin.create_table(keyed, descriptor)
            info = await admin.get_table_info(keyed)
            assert info.get_bucket_keys() == ["a", "b"]
            assert "table.datalake.format" not in info.get_properties()
            table = await conn.get_table(keyed)
            writer = table.new_upsert().create_writer()
            for i in range(20):
                writer.upsert({"a": i % 3, "b": f"k{i}", "v": i})
            await writer.flush()
            lookuper = table.new_lookup().create_lookuper()
            assert await lookuper.lookup({"a": 1, "b": "k7"}) == {"a": 1, "b": "k7", "v": 7}
            await conn.close()

        asyncio.run(check())
    finally:
        stop(process)


def test_strom_local_refuses_a_busy_port(tmp_path: Path) -> None:
    """Another process on the port: refused at once, naming the port, before anything starts or the
    data directory is touched (it used to start a coordinator that died binding, and only then fail,
    pointing at its log)."""
    import socket

    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # any address: 127.0.0.1 cannot take the port either
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        process = start_local(data_dir, port)
        try:
            out, _ = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                stop(process)
        elapsed = time.monotonic() - started
    assert process.returncode == 1, out
    assert f"port {port} on 127.0.0.1 is already in use" in out
    assert elapsed < 10, f"took {elapsed:.1f} s to refuse"
    assert not data_dir.exists()  # nothing started, nothing written


def test_strom_local_on_a_running_clusters_port_leaves_it_alone(tmp_path: Path) -> None:
    """The usual way to hit a busy port: `strom local` run twice on the same data directory. The second
    must refuse without touching the first one's cluster.json (which it used to delete)."""
    data_dir = tmp_path / "data"
    port = free_port()
    first = start_local(data_dir, port)
    try:
        wait_ready(first)
        cluster_json = (data_dir / "cluster.json").read_text()
        second = start_local(data_dir, port)
        try:
            out, _ = second.communicate(timeout=30)
        finally:
            if second.poll() is None:  # it started servers after all (they joined the first cluster)
                stop(second)
        assert second.returncode == 1, out
        assert f"port {port}" in out and "already in use" in out
        assert (data_dir / "cluster.json").read_text() == cluster_json
        assert first.poll() is None
    finally:
        stop(first)
