"""The `strom` command: a local cluster, or one server of a real deployment."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from strom.server.launcher import (
    TABLET_SERVER,
    TIERING,
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

    from strom.server.allocator import keep_large_allocations_on_the_heap

    keep_large_allocations_on_the_heap()

    async def main() -> None:
        try:
            server = await coroutine_factory()
        except OSError as e:  # e.g. the port is taken: say so, without a traceback
            logging.getLogger("strom").error("cannot start: %s", e)
            sys.exit(1)
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
@click.option(
    "--coordinator",
    "coordinator_address",
    metavar="HOST:PORT",
    help="The coordinator (required unless --config zookeeper.address=... is given).",
)
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def tablet_server(
    server_id: int,
    host: str,
    port: int,
    data_dir: Path,
    coordinator_address: str | None,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a tablet server."""
    from strom.server.tablet.server import TabletServer

    _setup_logging(log_level)
    config = {**(parse_config_file(config_file) if config_file else {}), **parse_config_pairs(config_pairs)}
    coordinator: tuple[str, int] | None = None
    if coordinator_address:
        coordinator_host, _, coordinator_port = coordinator_address.rpartition(":")
        coordinator = (coordinator_host, int(coordinator_port))
    elif "zookeeper.address" not in config:
        raise click.UsageError("give --coordinator HOST:PORT, or --config zookeeper.address=HOST:PORT")

    async def start() -> TabletServer:
        server = TabletServer(
            server_id=server_id,
            host=host,
            port=port,
            data_dir=data_dir,
            coordinator=coordinator,
            config=config,
        )
        await server.start()
        return server

    _run_server(start)


@main.command()
@click.option(
    "--bootstrap", "bootstrap", required=True, metavar="HOST:PORT", help="The cluster's bootstrap.servers."
)
@click.option(
    "--work-dir",
    default="strom-tiering",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Spark's scratch space.",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option(
    "--runner",
    type=click.Choice(["spark", "local"]),
    default="spark",
    show_default=True,
    help="Run splits on Spark executors, or in this process without Spark.",
)
@click.option("--poll-interval", default=5.0, show_default=True, help="Seconds between requests for work.")
@click.option(
    "--host", default="0.0.0.0", show_default=True, help="Address the metrics endpoint (if any) binds to."
)
@click.option(
    "--spark-conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting for the tiering application (repeatable), e.g. spark.executor.memory=2g.",
)
@click.option(
    "--job-name",
    default="strom-tiering",
    show_default=True,
    help="This job's name: its Spark application name, and how `strom status` and the coordinator's "
    "log name it (give each of several tiering jobs its own).",
)
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def tiering(
    bootstrap: str,
    work_dir: Path,
    master: str,
    runner: str,
    poll_interval: float,
    host: str,
    spark_conf: tuple[str, ...],
    job_name: str,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run the lake tiering service (a Spark application) for a cluster.

    The lake is configured like Fluss's tiering job: --config datalake.format=iceberg and
    --config datalake.iceberg.<catalog property>=... (the prefix is stripped).
    """
    from strom.security.credentials import client_properties
    from strom.spark.tiering.runner import LocalSplitRunner, SparkSplitRunner
    from strom.spark.tiering.service import TieringService, TieringSettings

    _setup_logging(log_level)
    config = {**(parse_config_file(config_file) if config_file else {}), **parse_config_pairs(config_pairs)}
    lake_format = config.get("datalake.format")
    if not lake_format:
        raise click.BadParameter(
            "set the lake with --config datalake.format=iceberg (and datalake.iceberg.*)"
        )
    prefix = f"datalake.{lake_format}."
    split_runner: LocalSplitRunner | SparkSplitRunner
    application_id = ""
    if runner == "spark":
        from strom.spark.session import session as spark_session

        work_dir.mkdir(parents=True, exist_ok=True)
        spark = spark_session(
            app=job_name,
            master=master,
            **{"spark.local.dir": str(work_dir.resolve()), **parse_config_pairs(spark_conf)},
        )
        split_runner = SparkSplitRunner(spark)
        application_id = spark.sparkContext.applicationId
    else:
        split_runner = LocalSplitRunner()
    settings = TieringSettings(
        bootstrap=bootstrap,
        lake_format=lake_format,
        lake_properties={k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)},
        poll_interval=poll_interval,
        client_properties=client_properties(config),
        job_name=job_name,
        application_id=application_id,
    )

    async def start() -> Any:
        from strom.common.config import Configuration
        from strom.metrics import Metrics, start_reporter
        from strom.metrics.tiering import TieringMetrics

        metrics = Metrics("tiering")
        service = TieringService(settings, split_runner, TieringMetrics(metrics))
        reporter = start_reporter(metrics, Configuration(config), host)
        from strom.common.supervision import Policy, supervise
        from strom.metrics.supervision import register_supervision_metrics

        register_supervision_metrics(metrics)
        stop = asyncio.Event()
        # run() ends only when stopped, or with what it cannot go on after: then the process exits
        # non-zero (strom.common.supervision) and whoever runs it starts it again
        running = supervise(lambda: service.run(stop), name="tiering service", policy=Policy.FATAL)
        refreshing = supervise(metrics.refresh_state, name="metrics")

        class Running:
            async def stop(self) -> None:
                stop.set()
                await running
                refreshing.cancel()
                if reporter is not None:
                    reporter.close()

        return Running()

    _run_server(start)


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
    return {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(lake / "paimon"),
    }


@main.command()
@click.option("--data-dir", default="strom-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9123, show_default=True, type=int, help="The coordinator's port.")
@click.option("--tablet-servers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--lake-format",
    type=click.Choice(["iceberg", "paimon"]),
    default="iceberg",
    show_default=True,
    help="The embedded lake that tiering writes to (unless --config datalake.format=... is given).",
)
@click.option(
    "--tiering/--no-tiering", default=True, show_default=True, help="Start the Spark tiering service."
)
@click.option(
    "--tiering-runner",
    type=click.Choice(["spark", "local"]),
    default="spark",
    show_default=True,
    help="Where tiering splits run: Spark executors, or in the tiering process itself.",
)
@click.option(
    "--spark-master",
    type=click.Choice(["local", "standalone"]),
    default="local",
    show_default=True,
    help="Where the tiering service runs Spark: local mode, or a 2-worker standalone cluster started here.",
)
@click.option(
    "--zookeeper",
    "with_zookeeper",
    is_flag=True,
    help="Start a ZooKeeper server (under the data directory) and keep the metadata there.",
)
@click.option(
    "--coordinators",
    default=1,
    show_default=True,
    type=click.IntRange(1, 9),
    help="Coordinators to run: one active, the others standbys (needs ZooKeeper when more than one).",
)
@config_option
def local(
    data_dir: Path,
    host: str,
    port: int,
    tablet_servers: int,
    lake_format: str,
    tiering: bool,
    tiering_runner: str,
    spark_master: str,
    with_zookeeper: bool,
    coordinators: int,
    config_pairs: tuple[str, ...],
) -> None:
    """Run a local cluster: a coordinator, tablet servers and the tiering service, each its own process."""
    from rich.console import Console

    from strom.security.credentials import client_properties
    from strom.server import local_cluster

    busy = local_cluster.port_in_use(host, port)
    if busy is not None:
        # before the data directory is touched: it may be a running cluster's (its cluster.json)
        raise click.ClickException(
            f"{busy}: is another Strom or Fluss cluster running? Stop it, or choose another port with --port."
        )
    console = Console(stderr=False, soft_wrap=True)  # long paths stay on one line in logs and pipes
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    local_cluster.remove_cluster_json(data_dir)
    user_config = parse_config_pairs(config_pairs)
    if coordinators > 1 and not with_zookeeper and "zookeeper.address" not in user_config:
        raise click.UsageError("several coordinators need ZooKeeper: add --zookeeper")
    config = {"remote.data.dir": str(data_dir / "remote")}
    if "datalake.format" not in user_config:
        config.update(embedded_lake_config(data_dir, lake_format))
    config.update(user_config)
    lake_format = config["datalake.format"]
    lake_prefix = f"datalake.{lake_format}."
    lake_properties = {k[len(lake_prefix) :]: v for k, v in config.items() if k.startswith(lake_prefix)}
    logs = data_dir / "logs"
    zookeeper = None
    if with_zookeeper:
        with console.status("starting ZooKeeper"):
            zookeeper = local_cluster.start_zookeeper(data_dir, host)
        config["zookeeper.address"] = zookeeper.address
    coordinator_processes = local_cluster.coordinator_processes(coordinators, host, port, data_dir, config)
    coordinator_process = coordinator_processes[0]
    bootstrap = ",".join(c.address for c in coordinator_processes)
    servers = [*coordinator_processes] + [
        ServerProcess(
            TABLET_SERVER,
            i,
            host,
            free_port(host),
            data_dir / f"tablet-server-{i}",
            config,
            # with ZooKeeper, tablet servers find the active coordinator there
            coordinator=None if "zookeeper.address" in config else coordinator_process.address,
            log_path=logs / f"tablet-server-{i}.log",
        )
        for i in range(tablet_servers)
    ]
    # the tiering service logs in as the servers do (a super user) when the cluster uses SASL
    tiering_config = {k: v for k, v in config.items() if k.startswith("datalake.")}
    tiering_config.update(client_properties(config))
    tiering_process = (
        ServerProcess(
            TIERING,
            0,
            host,
            0,
            data_dir / "tiering",
            tiering_config,
            coordinator=bootstrap,
            log_path=logs / "tiering-0.log",
            extra_args=["--runner", tiering_runner, "--poll-interval", "2"],
        )
        if tiering
        else None
    )
    spark_cluster = None
    if spark_master == "standalone":
        from strom.spark.standalone import start_for_local_cluster

        with console.status("starting a Spark standalone cluster"):
            spark_cluster = start_for_local_cluster(data_dir, host, tiering_process)
    local_cluster.serve_metrics([*servers, *([tiering_process] if tiering_process else [])], host)
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    tablet_processes = servers[len(coordinator_processes) :]
    try:
        with console.status("starting the coordinator" + ("s" if coordinators > 1 else "")):
            for coordinator in coordinator_processes:
                coordinator.start()
            for coordinator in coordinator_processes:
                asyncio.run(wait_until_serving(coordinator))
        with console.status(f"starting {tablet_servers} tablet server(s)"):
            for server in tablet_processes:
                server.start()
            asyncio.run(
                wait_for_tablet_servers(
                    coordinator_process, {s.server_id for s in tablet_processes}, 30.0, tablet_processes
                )
            )
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[red]cluster failed to start:[/red] {e}")
        for server in reversed(servers):
            server.stop()
        if spark_cluster is not None:
            spark_cluster.stop()
        if zookeeper is not None:
            zookeeper.stop()
        sys.exit(1)
    if tiering_process is not None:
        tiering_process.start()  # Spark takes a few seconds; the cluster is usable meanwhile
        servers.append(tiering_process)
    cluster: dict[str, Any] = {
        "bootstrap": bootstrap,
        "servers": [
            {
                "role": s.role,
                "id": s.server_id,
                "host": s.host,
                "port": s.port if s.role != TIERING else None,
                "pid": s.pid,
                **({"metrics": s.metrics_address} if s.metrics_address else {}),
            }
            for s in servers
        ],
        "datalake": local_cluster.datalake_entry(lake_format, lake_properties),
    }
    if spark_cluster is not None:
        cluster["servers"] += spark_cluster.entries()
    if "zookeeper.address" in config:
        cluster["zookeeper"] = config["zookeeper.address"]
    local_cluster.write_cluster_json(data_dir, cluster)
    console.print(f"Strom cluster ready. bootstrap.servers = [bold]{bootstrap}[/bold]")
    if zookeeper is not None:
        console.print(f"  zookeeper: {zookeeper.address} (pid {zookeeper.pid}), data in {zookeeper.data_dir}")
    console.print(f"  data: {data_dir}   logs: {logs}   cluster.json: {data_dir / 'cluster.json'}")
    console.print(f"  lake: {lake_format} {lake_properties}")
    if tiering_process is not None:
        console.print(f"  tiering service: pid {tiering_process.pid}, log {tiering_process.log_path}")
    if spark_cluster is not None:
        console.print(f"  spark: {spark_cluster.master_url}, master UI http://{spark_cluster.master.ui}")
    console.print("  Ctrl-C stops it.")
    sys.stdout.flush()
    # The tiering service exits non-zero when it cannot go on (strom.common.supervision): start it
    # again, waiting longer after each exit so that a service that cannot start does not spin.
    tiering_restarts = 0
    tiering_restart_at: float | None = None
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
                    if server is tiering_process:
                        delay = min(60.0, 2.0**tiering_restarts)
                        tiering_restarts += 1
                        tiering_restart_at = time.monotonic() + delay
                        console.print(f"[yellow]restarting the tiering service in {delay:.0f}s[/yellow]")
            due = tiering_restart_at is not None and time.monotonic() >= tiering_restart_at
            if tiering_process is not None and due:
                tiering_restart_at = None
                tiering_process.start()
                for entry in cluster["servers"]:
                    if entry["role"] == TIERING:
                        entry["pid"] = tiering_process.pid
                local_cluster.write_cluster_json(data_dir, cluster)
                console.print(f"tiering service restarted: pid {tiering_process.pid}")
            time.sleep(0.2)
    finally:
        console.print("stopping the cluster")
        local_cluster.remove_cluster_json(data_dir)
        for server in reversed(servers):
            server.stop()
        if spark_cluster is not None:
            spark_cluster.stop()
        if zookeeper is not None:
            zookeeper.stop()
        console.print("stopped")
    os._exit(0)


def _register_commands() -> None:
    """Adds the administrative commands of `strom.commands` to `main`; each module adds one line here."""
    from strom.commands.acl import acl
    from strom.commands.rebalance import rebalance
    from strom.commands.status import status
    from strom.commands.table import table

    main.add_command(acl)
    main.add_command(status)
    main.add_command(rebalance)
    main.add_command(table)


_register_commands()

if __name__ == "__main__":
    main()
