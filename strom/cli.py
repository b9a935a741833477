"""The `strom` command: a local cluster, or one server of a real deployment."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

from strom.server.launcher import (
    COORDINATOR,
    TABLET_SERVER,
    ServerProcess,
    free_port,
    wait_for_tablet_servers,
    wait_until_serving,
)


def parse_config_file(path: Path) -> dict[str, str]:
    """Fluss's server.yaml is flat `key: value` lines; comments start with '#'."""
    config: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise click.BadParameter(f"{path}:{number}: expected 'key: value', got {raw!r}")
        config[key.strip()] = value.strip().strip("\"'")
    return config


def parse_config_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    config: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--config")
        config[key.strip()] = value.strip()
    return config


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def _run_server(coroutine_factory) -> None:  # type: ignore[no-untyped-def]
    import uvloop

    async def main() -> None:
        server = await coroutine_factory()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await server.stop()

    uvloop.run(main())


config_option = click.option(
    "--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help="Set a server option (repeatable)."
)
config_file_option = click.option(
    "--config-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A server.yaml of flat 'key: value' lines; --config wins over it.",
)


@click.group()
def main() -> None:
    """Strom: Apache Fluss rebuilt in Python."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9123, show_default=True, type=int)
@click.option(
    "--data-dir", default="strom-data/coordinator", show_default=True, type=click.Path(path_type=Path)
)
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def coordinator(
    host: str,
    port: int,
    data_dir: Path,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a coordinator server."""
    from strom.server.coordinator.server import CoordinatorServer

    _setup_logging(log_level)
    config = {**(parse_config_file(config_file) if config_file else {}), **parse_config_pairs(config_pairs)}

    async def start() -> CoordinatorServer:
        server = CoordinatorServer(host=host, port=port, data_dir=data_dir, config=config)
        await server.start()
        return server

    _run_server(start)


@main.command("tablet-server")
@click.option("--server-id", required=True, type=int)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=0, show_default=True, type=int, help="0 picks a free port.")
@click.option("--data-dir", required=True, type=click.Path(path_type=Path))
@click.option("--coordinator", "coordinator_address", required=True, metavar="HOST:PORT")
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def tablet_server(
    server_id: int,
    host: str,
    port: int,
    data_dir: Path,
    coordinator_address: str,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a tablet server."""
    from strom.server.tablet.server import TabletServer

    _setup_logging(log_level)
    config = {**(parse_config_file(config_file) if config_file else {}), **parse_config_pairs(config_pairs)}
    coordinator_host, _, coordinator_port = coordinator_address.rpartition(":")

    async def start() -> TabletServer:
        server = TabletServer(
            server_id=server_id,
            host=host,
            port=port,
            data_dir=data_dir,
            coordinator=(coordinator_host, int(coordinator_port)),
            config=config,
        )
        await server.start()
        return server

    _run_server(start)


@main.command()
@click.option("--data-dir", default="strom-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9123, show_default=True, type=int, help="The coordinator's port.")
@click.option("--tablet-servers", default=1, show_default=True, type=click.IntRange(1, 64))
@config_option
def local(data_dir: Path, host: str, port: int, tablet_servers: int, config_pairs: tuple[str, ...]) -> None:
    """Run a local cluster: a coordinator and tablet servers, each its own process."""
    from rich.console import Console

    console = Console(stderr=False)
    config = parse_config_pairs(config_pairs)
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    logs = data_dir / "logs"
    coordinator_process = ServerProcess(
        COORDINATOR, 0, host, port, data_dir / "coordinator", config, log_path=logs / "coordinator-0.log"
    )
    servers = [coordinator_process] + [
        ServerProcess(
            TABLET_SERVER,
            i,
            host,
            free_port(host),
            data_dir / f"tablet-server-{i}",
            config,
            coordinator=coordinator_process.address,
            log_path=logs / f"tablet-server-{i}.log",
        )
        for i in range(tablet_servers)
    ]
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        with console.status("starting the coordinator"):
            coordinator_process.start()
            asyncio.run(wait_until_serving(coordinator_process))
        with console.status(f"starting {tablet_servers} tablet server(s)"):
            for server in servers[1:]:
                server.start()
            asyncio.run(
                wait_for_tablet_servers(
                    coordinator_process, {s.server_id for s in servers[1:]}, 30.0, servers[1:]
                )
            )
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[red]cluster failed to start:[/red] {e}")
        for server in reversed(servers):
            server.stop()
        sys.exit(1)
    cluster = {
        "bootstrap": coordinator_process.address,
        "servers": [
            {"role": s.role, "id": s.server_id, "host": s.host, "port": s.port, "pid": s.pid} for s in servers
        ],
    }
    (data_dir / "cluster.json").write_text(json.dumps(cluster, indent=2) + "\n")
    console.print(f"Strom cluster ready. bootstrap.servers = [bold]{coordinator_process.address}[/bold]")
    console.print(f"  data: {data_dir}   logs: {logs}   cluster.json: {data_dir / 'cluster.json'}")
    console.print("  Ctrl-C stops it.")
    sys.stdout.flush()
    try:
        while not stopping:
            for server in servers:
                if (
                    not server.is_alive()
                    and server.process is not None
                    and server.process.returncode is not None
                ):
                    code = server.process.returncode
                    console.print(
                        f"[yellow]{server.role} {server.server_id} exited ({code}); see "
                        f"{server.log_path}[/yellow]"
                    )
                    server.process = None
            time.sleep(0.2)
    finally:
        console.print("stopping the cluster")
        for server in reversed(servers):
            server.stop()
        console.print("stopped")
    os._exit(0)


if __name__ == "__main__":
    main()
