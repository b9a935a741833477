"""A real Strom cluster for tests: each server is its own OS process, killed and restarted for real."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom.server.launcher import (
    COORDINATOR,
    TABLET_SERVER,
    ServerProcess,
    free_port,
    listed_tablet_servers,
    wait_for_tablet_servers,
    wait_until_leading,
    wait_until_serving,
)


async def wait_until_listed(coordinator: ServerProcess, server: ServerProcess, timeout: float = 30) -> None:
    """Until the coordinator's metadata lists the tablet server (failing fast if its process exits)."""
    deadline = time.monotonic() + timeout
    while True:
        if not server.is_alive():
            raise RuntimeError(f"tablet server {server.server_id} exited; see {server.log_path}")
        if server.server_id in (await listed_tablet_servers(coordinator) or set()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the coordinator does not list tablet server {server.server_id}")
        await asyncio.sleep(0.05)


# Fast failure detection in tests; production defaults are longer.
TEST_CONFIG = {
    "tablet-server.heartbeat.interval": "200ms",
    "tablet-server.session.timeout": "2s",
    # the machine's disk is shared with other runs: its usage must not refuse unrelated tests' writes
    # (tests/cluster/test_data_disks.py sets the ratios on disks of its own)
    "server.data-disk.write-limit-ratio": "1.0",
}


class Cluster:
    """Coordinator(s) and tablet servers. With `zookeeper` (host:port of a ZooKeeper server), the
    metadata lives there, under a root znode of this cluster's own, and `coordinators` may be > 1."""

    def __init__(
        self,
        base_dir: Path,
        tablet_servers: int = 1,
        config: dict[str, str] | None = None,
        *,
        zookeeper: str | None = None,
        coordinators: int = 1,
    ) -> None:
        self.base_dir = base_dir
        # one remote directory shared by all servers, as S3 would be: KV snapshots live there
        self.config = {**TEST_CONFIG, "remote.data.dir": str(base_dir / "remote"), **(config or {})}
        if zookeeper is not None:
            self.config.update(
                {
                    "zookeeper.address": zookeeper,
                    "zookeeper.path.root": f"/strom-test/{base_dir.parent.name}-{base_dir.name}",
                    "zookeeper.client.session-timeout": "3s",
                }
            )
            self.config.update(config or {})
        self.coordinators = [
            ServerProcess(
                COORDINATOR,
                i,
                "127.0.0.1",
                free_port(),
                base_dir / f"coordinator-{i}" if i else base_dir / "coordinator",
                self.config,
                log_path=base_dir / "logs" / f"coordinator-{i}.log",
            )
            for i in range(coordinators)
        ]
        self.coordinator = self.coordinators[0]
        # a server's CLIENT port by its (internal) port, when add_client_listener gave it one
        self.client_ports: dict[int, int] = {}
        self.tablet_servers = {
            i: ServerProcess(
                TABLET_SERVER,
                i,
                "127.0.0.1",
                free_port(),
                base_dir / f"tablet-server-{i}",
                self.config,
                coordinator=None if zookeeper else self.coordinator.address,
                log_path=base_dir / "logs" / f"tablet-server-{i}.log",
            )
            for i in range(tablet_servers)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(c.address for c in self.coordinators)

    def start(self) -> Cluster:
        try:
            self.start_coordinator()
            for server_id in self.tablet_servers:
                self.tablet_servers[server_id].start()
            self.wait_for_tablet_servers()
        except BaseException:
            self.stop()  # a cluster that failed to start must not leave processes behind
            raise
        return self

    def start_coordinator(self) -> None:
        """Starts every coordinator that is not running."""
        started = [c for c in self.coordinators if not c.is_alive()]
        for coordinator in started:
            coordinator.start()
        for coordinator in started:
            asyncio.run(wait_until_serving(coordinator))

    def wait_for_tablet_servers(self, ids: set[int] | None = None, timeout: float = 30) -> None:
        alive = {i for i, s in self.tablet_servers.items() if s.is_alive()} if ids is None else ids
        processes = [self.tablet_servers[i] for i in alive]
        coordinator = next(c for c in self.coordinators if c.is_alive())
        asyncio.run(wait_for_tablet_servers(coordinator, alive, timeout, processes))
        for process in processes:
            asyncio.run(wait_until_leading(coordinator, process, timeout))

    def kill_tablet_server(self, server_id: int) -> None:
        self.tablet_servers[server_id].kill()

    def start_tablet_server(self, server_id: int) -> None:
        """Start it and return once the coordinator lists it again and it leads what the coordinator
        says it leads: a client connecting before that gets a cluster without it (pyfluss then reports
        a table whose only server it was as not found), or NOT_LEADER_OR_FOLLOWER from it."""
        server = self.tablet_servers[server_id]
        server.start()
        asyncio.run(wait_until_serving(server))
        coordinator = next((c for c in self.coordinators if c.is_alive()), None)
        if coordinator is not None:
            asyncio.run(wait_until_listed(coordinator, server))
            asyncio.run(wait_until_leading(coordinator, server))

    def restart_coordinator(self, kill: bool = True) -> None:
        if kill:
            self.coordinator.kill()
        else:
            self.coordinator.stop()
        self.start_coordinator()

    def stop(self) -> None:
        for server in self.tablet_servers.values():
            server.stop()
        for coordinator in self.coordinators:
            coordinator.stop()

    def logs(self) -> str:
        parts = []
        for path in sorted((self.base_dir / "logs").glob("*.log")):
            parts.append(f"==== {path.name}\n{path.read_text()[-4000:]}")
        return "\n".join(parts)


def run_pyfluss(
    bootstrap: str,
    body: Callable[[Any], Awaitable[Any]],
    timeout: float = 90,
    properties: dict[str, str] | None = None,
) -> Any:
    """Runs `body(connection)` with an official pyfluss connection to the cluster, then closes it.

    `properties` are more pyfluss settings, e.g. SASL credentials (see `sasl_login`)."""
    import fluss

    async def main() -> Any:
        config = fluss.Config({"bootstrap.servers": bootstrap, **(properties or {})})
        connection = await fluss.FlussConnection.create(config)
        try:
            return await asyncio.wait_for(body(connection), timeout)
        finally:
            await connection.close()

    return asyncio.run(main())


def sasl_login(user: str, password: str) -> dict[str, str]:
    """pyfluss settings for a SASL/PLAIN login."""
    return {
        "security.protocol": "sasl",
        "security.sasl.mechanism": "PLAIN",
        "security.sasl.username": user,
        "security.sasl.password": password,
    }


def add_client_listener(cluster: Cluster, client_protocol: str = "PLAINTEXT") -> str:
    """Gives every server of a not-yet-started cluster a CLIENT listener besides its INTERNAL one (the
    port the harness already uses, which servers use among themselves), as Fluss's recommended layout
    does; returns the clients' bootstrap address. A server's CLIENT port is
    `cluster.client_ports[server.port]`."""
    for server in [cluster.coordinator, *cluster.tablet_servers.values()]:
        client_port = free_port()
        server.config = {
            **server.config,
            "bind.listeners": f"INTERNAL://127.0.0.1:{server.port},CLIENT://127.0.0.1:{client_port}",
            "internal.listener.name": "INTERNAL",
            "security.protocol.map": f"CLIENT:{client_protocol},INTERNAL:PLAINTEXT",
        }
        cluster.client_ports[server.port] = client_port
    return f"127.0.0.1:{cluster.client_ports[cluster.coordinator.port]}"


def add_kafka_listener(cluster: Cluster) -> str:
    """Gives every tablet server of a not-yet-started cluster a KAFKA listener besides its FLUSS one
    and turns kafka.enabled on; returns the Kafka clients' bootstrap address."""
    addresses = []
    for server in cluster.tablet_servers.values():
        kafka_port = free_port()
        server.config = {
            **server.config,
            "kafka.enabled": "true",
            "bind.listeners": f"FLUSS://127.0.0.1:{server.port},KAFKA://127.0.0.1:{kafka_port}",
        }
        addresses.append(f"127.0.0.1:{kafka_port}")
    return ",".join(addresses)
