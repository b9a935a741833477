"""Starts server processes: the pieces behind `strom local` and the cluster test fixtures.

Each server runs in its own OS process (`python -m strom <role> ...`) so that tests and users can kill
one for real. The launcher picks free loopback ports, waits until each server answers, and stops them
with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common.errors import FlussError
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.security.credentials import cluster_login, cluster_tls

COORDINATOR = "coordinator"
TABLET_SERVER = "tablet-server"
TIERING = "tiering"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    role: str
    server_id: int
    host: str
    port: int
    data_dir: Path
    config: dict[str, str]
    coordinator: str | None = None  # host:port, for tablet servers
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    metrics_address: str | None = None  # host:port of its Prometheus endpoint, when it serves one
    kafka_address: str | None = None  # host:port of its Kafka listener, when it serves one
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        if self.role == TIERING:
            args = [
                sys.executable,
                "-m",
                "strom",
                TIERING,
                "--bootstrap",
                self.coordinator or "",
                "--work-dir",
                str(self.data_dir),
            ]
            for key, value in self.config.items():
                args += ["--config", f"{key}={value}"]
            return args + self.extra_args
        args = [
            sys.executable,
            "-m",
            "strom",
            self.role,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        if self.role == TABLET_SERVER:
            args += ["--server-id", str(self.server_id)]
            if self.coordinator:  # with ZooKeeper, tablet servers find the active coordinator there
                args += ["--coordinator", self.coordinator]
        for key, value in self.config.items():
            args += ["--config", f"{key}={value}"]
        return args

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path or self.data_dir / f"{self.role}-{self.server_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches only the launcher, which stops us
            )

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.process is not None and self.is_alive():
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if the server does not exit in time."""
        if self.process is None or not self.is_alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def wait_until_serving(server: ServerProcess, timeout: float = 30.0) -> None:
    """Until the server answers ApiVersions (or its process died)."""
    deadline = time.monotonic() + timeout
    while True:
        if not server.is_alive():
            raise RuntimeError(
                f"{server.role} {server.server_id} exited with code "
                f"{server.process.returncode if server.process else '?'}; see {server.log_path}"
            )
        try:
            connection = await RpcConnection.connect(
                server.host, server.port, connect_timeout=2, tls=cluster_tls(server.config)
            )
            connection.close()
            return
        except FlussError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{server.role} {server.server_id} not serving on {server.address}"
                ) from None
            await asyncio.sleep(0.1)


async def listed_tablet_servers(coordinator: ServerProcess) -> set[int] | None:
    """The tablet servers the coordinator's metadata lists as alive (None: it did not answer)."""
    try:
        connection = await RpcConnection.connect(
            coordinator.host,
            coordinator.port,
            connect_timeout=2,
            sasl=cluster_login(coordinator.config),
            tls=cluster_tls(coordinator.config),
        )
        try:
            response = await connection.request(ApiKey.GET_METADATA, pb.MetadataRequest(), timeout=5)
        finally:
            connection.close()
    except FlussError:
        return None
    return {s.node_id for s in response.tablet_servers}


async def _internal_request(
    server: ServerProcess, login_from: ServerProcess, api: ApiKey, request: Any
) -> Any:
    connection = await RpcConnection.connect(
        server.host,
        server.port,
        connect_timeout=2,
        sasl=cluster_login(login_from.config),
        tls=cluster_tls(login_from.config),
    )
    try:
        return await connection.request(api, request, timeout=5)
    finally:
        connection.close()


async def leads_what_it_should(coordinator: ServerProcess, server: ServerProcess) -> bool:
    """Whether the tablet server leads every bucket the coordinator names it leader of, and every
    bucket it could lead (it is in the ISR or ELR, or the only replica) has a leader. A restarted
    server is listed as soon as it registers, but its buckets have a leader only once the coordinator's
    election ends and lead only once its NotifyLeaderAndIsr arrives; until then clients get "no leader"
    or NOT_LEADER_OR_FOLLOWER, which some pyfluss calls (ListOffsets under `to_arrow`) do not retry."""
    try:
        cluster = await _internal_request(
            coordinator, coordinator, ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest()
        )
        replicas = await _internal_request(
            server, coordinator, ApiKey.DESCRIBE_REPLICAS, internal.DescribeReplicasRequest()
        )
    except FlussError:
        return False
    led = {
        (r.table_id, r.partition_id if r.HasField("partition_id") else None, r.bucket_id)
        for r in replicas.replicas
        if r.leader
    }
    me = server.server_id
    for b in cluster.buckets:
        key = (b.table_id, b.partition_id if b.HasField("partition_id") else None, b.bucket_id)
        could_lead = me in b.isr or me in b.elr or list(b.replicas) == [me]
        if (b.leader == me and key not in led) if b.HasField("leader") else could_lead:
            return False
    return True


async def wait_until_leading(
    coordinator: ServerProcess, server: ServerProcess, timeout: float = 30.0
) -> None:
    """Until `leads_what_it_should` (failing fast if the server's process exits)."""
    deadline = time.monotonic() + timeout
    while not await leads_what_it_should(coordinator, server):
        if not server.is_alive():
            raise RuntimeError(f"tablet server {server.server_id} exited; see {server.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"tablet server {server.server_id} does not lead the buckets the coordinator gave it"
            )
        await asyncio.sleep(0.05)


async def wait_for_tablet_servers(
    coordinator: ServerProcess, ids: set[int], timeout: float = 30.0, processes: Sequence[ServerProcess] = ()
) -> None:
    """Until the coordinator's metadata lists exactly the given tablet servers as alive (failing fast
    when one of `processes` exits)."""
    deadline = time.monotonic() + timeout
    while True:
        for process in processes:
            if process.process is not None and not process.is_alive():
                raise RuntimeError(
                    f"{process.role} {process.server_id} exited with code "
                    f"{process.process.returncode}; see {process.log_path}"
                )
        if await listed_tablet_servers(coordinator) == ids:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"tablet servers {sorted(ids)} did not all register with the coordinator")
        await asyncio.sleep(0.1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
