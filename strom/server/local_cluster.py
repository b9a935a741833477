"""`strom local`: a whole cluster on one machine, each server its own process.

`LocalCluster` starts, in order, an optional ZooKeeper server, the coordinators, the tablet servers
and (when the cluster has a lake) the tiering service, writes `cluster.json` once all of it serves,
watches the processes, and tears everything down in one place (`stop`), whether start-up failed
half-way or the user pressed Ctrl-C. `cluster.json` is absent while the cluster starts or is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.lake_enablement import cluster_lake_enabled
from strom.security.credentials import client_properties
from strom.server.launcher import (
    COORDINATOR,
    TABLET_SERVER,
    TIERING,
    ServerProcess,
    free_port,
    wait_for_tablet_servers,
    wait_until_serving,
)
from strom.server.zookeeper.local_server import LocalZooKeeper

# `--lake-format none`: the cluster has no lake, so new tables are bound to no lake format.
NO_LAKE = "none"
DEFAULT_LAKE_FORMAT = "iceberg"

CLUSTER_JSON = "cluster.json"


def remove_cluster_json(data_dir: Path) -> None:
    """Whoever waits for cluster.json must not take an old one for this run's."""
    (data_dir / CLUSTER_JSON).unlink(missing_ok=True)


def port_in_use(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (None: it can), found by binding it as the servers do
    (SO_REUSEADDR, so a previous run's connections in TIME_WAIT do not count). Checked before anything
    starts: a coordinator that fails to bind would leave a half-started cluster behind."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        return f"{host} does not resolve: {e}"
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return f"port {port} on {host} is already in use by another process"
                return f"cannot listen on port {port} on {host}: {e.strerror or e}"
    return None


def write_cluster_json(data_dir: Path, cluster: dict[str, Any]) -> Path:
    """Written whole or not at all (readers poll for the file and read it at once)."""
    path = data_dir / CLUSTER_JSON
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(cluster, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def start_zookeeper(data_dir: Path, host: str) -> LocalZooKeeper:
    """A ZooKeeper server for the local cluster, its data under <data-dir>/zookeeper (so metadata
    survives a restart of the cluster on the same data directory)."""
    server = LocalZooKeeper(
        data_dir / "zookeeper", free_port(host), host, log_path=data_dir / "logs" / "zookeeper.log"
    )
    server.start()
    try:
        server.wait_until_serving()
    except BaseException:
        server.stop()
        raise
    return server


def serve_metrics(processes: list[ServerProcess], host: str) -> None:
    """Every process serves Prometheus metrics on a port of its own (unless the user configured the
    reporters), so that cluster.json can say where."""
    for process in processes:
        if "metrics.reporters" in process.config:
            continue
        port = free_port(host)
        process.config = {
            **process.config,
            "metrics.reporters": "prometheus",
            "metrics.reporter.prometheus.port": str(port),
        }
        process.metrics_address = f"{host}:{port}"
        if process.role == TIERING:
            process.extra_args = [*process.extra_args, "--host", host]


def coordinator_processes(
    count: int, host: str, port: int, data_dir: Path, config: dict[str, str]
) -> list[ServerProcess]:
    """The first coordinator on `port`, the others on free ports."""
    return [
        ServerProcess(
            COORDINATOR,
            i,
            host,
            port if i == 0 else free_port(host),
            data_dir / ("coordinator" if i == 0 else f"coordinator-{i}"),
            config,
            log_path=data_dir / "logs" / f"coordinator-{i}.log",
        )
        for i in range(count)
    ]


def datalake_entry(lake_format: str, properties: dict[str, str]) -> dict[str, object]:
    """cluster.json's "datalake": the format, its catalog properties and, for Iceberg, the catalog name
    (a SQL catalog keeps it in its rows: a reader opening the catalog under another name sees nothing)."""
    entry: dict[str, object] = {"format": lake_format, "properties": properties}
    if lake_format == "iceberg":
        from strom.lake.iceberg.catalog import DEFAULT_CATALOG_NAME

        entry["name"] = properties.get("name", DEFAULT_CATALOG_NAME)
    return entry


def embedded_lake_config(data_dir: Path, lake_format: str) -> dict[str, str]:
    """The lake `strom local` sets up under its data directory (Fluss's datalake.<format>.* names)."""
    lake = data_dir / "lake"
    if lake_format == "iceberg":
        return {
            "datalake.format": "iceberg",
            "datalake.iceberg.type": "sql",
            "datalake.iceberg.uri": f"sqlite:///{lake / 'iceberg_catalog.db'}",
            "datalake.iceberg.warehouse": f"file://{lake / 'iceberg'}",
        }
    if lake_format in ("lance", "delta"):
        # path-based formats: table db.t lives under <warehouse>/db/ (cluster.json names the warehouse)
        return {"datalake.format": lake_format, f"datalake.{lake_format}.warehouse": str(lake / lake_format)}
    return {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(lake / "paimon"),
    }


def chosen_lake_format(lake_format: str | None, tiering: bool, user_config: dict[str, str]) -> str:
    """The embedded lake to set up: the user's `datalake.format` wins, then --lake-format; without
    either, Iceberg when the tiering service runs and no lake when it does not (a user who turned
    tiering off must not find every new table bound to Iceberg's key encoding)."""
    if "datalake.format" in user_config:
        return user_config["datalake.format"]
    if lake_format is not None:
        return lake_format
    return DEFAULT_LAKE_FORMAT if tiering else NO_LAKE


@dataclass
class LocalClusterSettings:
    """What `strom local` was asked for."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9123
    tablet_servers: int = 1
    lake_format: str | None = None  # iceberg, paimon, lance, delta, none; None: decided by `tiering`
    tiering: bool = True
    tiering_runner: str = "spark"
    spark_master: str = "local"
    with_zookeeper: bool = False
    coordinators: int = 1
    user_config: dict[str, str] = field(default_factory=dict)

    def server_config(self) -> dict[str, str]:
        """The configuration every server gets (before ZooKeeper's address is known)."""
        config = {"remote.data.dir": str(self.data_dir / "remote")}
        lake = chosen_lake_format(self.lake_format, self.tiering, self.user_config)
        if lake != NO_LAKE and "datalake.format" not in self.user_config:
            config.update(embedded_lake_config(self.data_dir, lake))
        config.update(self.user_config)
        return config


# the longest wait before starting an exited tiering service again
TIERING_RESTART_MAX_DELAY = 60.0


class LocalClusterError(RuntimeError):
    """The cluster did not start; everything that had started is stopped again."""


class LocalCluster:
    """The processes of one `strom local` run, started and stopped together."""

    def __init__(self, settings: LocalClusterSettings, status: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        # `status(text)` returns a context manager shown while a step runs (rich's console.status)
        self._status = status
        self.data_dir = settings.data_dir
        self.config = settings.server_config()
        self.lake = cluster_lake_enabled(Configuration(self.config))
        self.lake_format: str | None = self.config.get("datalake.format")
        prefix = f"datalake.{self.lake_format}."
        self.lake_properties = {k[len(prefix) :]: v for k, v in self.config.items() if k.startswith(prefix)}
        self.logs = self.data_dir / "logs"
        self.zookeeper: LocalZooKeeper | None = None
        self.coordinators: list[ServerProcess] = []
        self.tablet_servers: list[ServerProcess] = []
        self.tiering: ServerProcess | None = None
        self.spark_cluster: Any = None
        self._stopped = False

    @property
    def runs_tiering(self) -> bool:
        return self.settings.tiering and self.lake

    @property
    def bootstrap(self) -> str:
        return ",".join(c.address for c in self.coordinators)

    @property
    def processes(self) -> list[ServerProcess]:
        return [*self.coordinators, *self.tablet_servers, *([self.tiering] if self.tiering else [])]

    def _step(self, text: str) -> Any:
        return self._status(text) if self._status is not None else contextlib.nullcontext()

    def start(self) -> None:
        """Start everything and write cluster.json; on failure stop what started and raise."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        remove_cluster_json(self.data_dir)
        try:
            self._start()
        except BaseException as e:
            self.stop()
            if isinstance(e, RuntimeError | TimeoutError | OSError):
                raise LocalClusterError(str(e)) from e
            raise
        write_cluster_json(self.data_dir, self.cluster_entry())

    def _start(self) -> None:
        settings = self.settings
        host = settings.host
        if settings.with_zookeeper:
            with self._step("starting ZooKeeper"):
                self.zookeeper = start_zookeeper(self.data_dir, host)
            self.config["zookeeper.address"] = self.zookeeper.address
        self.coordinators = coordinator_processes(
            settings.coordinators, host, settings.port, self.data_dir, self.config
        )
        with_zookeeper = "zookeeper.address" in self.config
        self.tablet_servers = [
            ServerProcess(
                TABLET_SERVER,
                i,
                host,
                free_port(host),
                self.data_dir / f"tablet-server-{i}",
                self.config,
                # with ZooKeeper, tablet servers find the active coordinator there
                coordinator=None if with_zookeeper else self.coordinators[0].address,
                log_path=self.logs / f"tablet-server-{i}.log",
            )
            for i in range(settings.tablet_servers)
        ]
        self._add_kafka_listeners()
        if self.runs_tiering:
            # the tiering service logs in as the servers do (a super user) when the cluster uses SASL
            tiering_config = {k: v for k, v in self.config.items() if k.startswith("datalake.")}
            tiering_config.update(client_properties(self.config))
            self.tiering = ServerProcess(
                TIERING,
                0,
                host,
                0,
                self.data_dir / "tiering",
                tiering_config,
                coordinator=self.bootstrap,
                log_path=self.logs / "tiering-0.log",
                extra_args=["--runner", settings.tiering_runner, "--poll-interval", "2"],
            )
        if settings.spark_master == "standalone":
            from strom.spark.standalone import start_for_local_cluster

            with self._step("starting a Spark standalone cluster"):
                self.spark_cluster = start_for_local_cluster(self.data_dir, host, self.tiering)
        serve_metrics(self.processes, host)
        with self._step("starting the coordinator" + ("s" if settings.coordinators > 1 else "")):
            for coordinator in self.coordinators:
                coordinator.start()
            for coordinator in self.coordinators:
                asyncio.run(wait_until_serving(coordinator))
        with self._step(f"starting {settings.tablet_servers} tablet server(s)"):
            for server in self.tablet_servers:
                server.start()
            asyncio.run(
                wait_for_tablet_servers(
                    self.coordinators[0],
                    {s.server_id for s in self.tablet_servers},
                    30.0,
                    self.tablet_servers,
                )
            )
        if self.tiering is not None:
            self.tiering.start()  # Spark takes a few seconds; the cluster is usable meanwhile

    def _add_kafka_listeners(self) -> None:
        """With kafka.enabled, each tablet server also listens for Kafka clients on a free port."""
        conf = Configuration(self.config)
        if not conf.get(options.KAFKA_ENABLED):
            return
        name = conf.get(options.KAFKA_LISTENER_NAMES)[0]
        host = self.settings.host
        for server in self.tablet_servers:
            kafka_port = free_port(host)
            server.config = {
                **server.config,
                options.BIND_LISTENERS.key: f"FLUSS://{host}:{server.port},{name}://{host}:{kafka_port}",
            }
            server.kafka_address = f"{host}:{kafka_port}"

    @property
    def kafka_bootstrap(self) -> str | None:
        addresses = [s.kafka_address for s in self.tablet_servers if s.kafka_address]
        return ",".join(addresses) if addresses else None

    def cluster_entry(self) -> dict[str, Any]:
        """cluster.json: the bootstrap address, every process, the lake (null without one)."""
        cluster: dict[str, Any] = {
            "bootstrap": self.bootstrap,
            "servers": [
                {
                    "role": s.role,
                    "id": s.server_id,
                    "host": s.host,
                    "port": s.port if s.role != TIERING else None,
                    "pid": s.pid,
                    **({"metrics": s.metrics_address} if s.metrics_address else {}),
                }
                for s in self.processes
            ],
            "datalake": (
                datalake_entry(self.lake_format, self.lake_properties) if self.lake_format else None
            ),
        }
        if self.spark_cluster is not None:
            cluster["servers"] += self.spark_cluster.entries()
        if self.kafka_bootstrap is not None:
            cluster["kafka_bootstrap"] = self.kafka_bootstrap
        if "zookeeper.address" in self.config:
            cluster["zookeeper"] = self.config["zookeeper.address"]
        return cluster

    def watch(self, stopping: Callable[[], bool], report: Callable[[str], None]) -> None:
        """Until `stopping()`: report each process that exits (once). The servers are left down; the
        tiering service, which exits non-zero when it cannot go on (strom.common.supervision), is
        started again, after a delay that doubles with each exit so that one that cannot start does
        not spin."""
        tiering_exits = 0
        restart_at: float | None = None
        tiering_started = time.monotonic()
        while not stopping():
            for server in self.processes:
                if server.process is not None and server.process.poll() is not None:
                    report(
                        f"{server.role} {server.server_id} exited ({server.process.returncode}); "
                        f"see {server.log_path}"
                    )
                    server.process = None
                    if server is self.tiering:
                        if time.monotonic() - tiering_started > TIERING_RESTART_MAX_DELAY:
                            tiering_exits = 0  # it ran a good while: not a crash loop
                        delay = min(TIERING_RESTART_MAX_DELAY, 2.0**tiering_exits)
                        tiering_exits += 1
                        restart_at = time.monotonic() + delay
                        report(f"restarting the tiering service in {delay:.0f}s")
            if self.tiering is not None and restart_at is not None and time.monotonic() >= restart_at:
                restart_at = None
                self.tiering.start()
                tiering_started = time.monotonic()
                write_cluster_json(self.data_dir, self.cluster_entry())
                report(f"tiering service restarted: pid {self.tiering.pid}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop everything that started, newest first; safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        remove_cluster_json(self.data_dir)
        for server in reversed(self.processes):
            server.stop()
        if self.spark_cluster is not None:
            self.spark_cluster.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
