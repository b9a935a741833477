"""The high-availability side of `strom local`: a ZooKeeper server, several coordinators, and the
`cluster.json` lifecycle (absent while the cluster starts or is stopped, written once it is ready).
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path
from typing import Any

from strom.server.launcher import COORDINATOR, TIERING, ServerProcess, free_port
from strom.server.zookeeper.local_server import LocalZooKeeper

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
