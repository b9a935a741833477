"""The `strom` command: a local cluster, or one server of a real deployment."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import click

if TYPE_CHECKING:
    from strom.common.config import ConfigOption


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


class _Server(Protocol):
    async def stop(self) -> None: ...


def _run_server(coroutine_factory: Callable[[], Awaitable[_Server]]) -> None:
    import uvloop

    from strom.common.errors import InvalidConfigError
    from strom.server.allocator import keep_large_allocations_on_the_heap

    keep_large_allocations_on_the_heap()

    async def main() -> None:
        try:
            server = await coroutine_factory()
        except (OSError, InvalidConfigError) as e:  # e.g. the port is taken: say so, without a traceback
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


def _server_setting(
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    host_option: ConfigOption[str | None],
    port_option: ConfigOption[str],
) -> tuple[str, int, dict[str, str], Path]:
    """A server's listen address, configuration and data directory: flags over --config over the file."""
    from strom.common.config import Configuration
    from strom.common.errors import InvalidConfigError
    from strom.server import server_options

    file_config = parse_config_file(config_file) if config_file else {}
    try:
        host, port, config = server_options.listen_address(
            host, port, file_config, parse_config_pairs(config_pairs), host_option, port_option, "127.0.0.1"
        )
        return host, port, config, server_options.data_dir(data_dir, Configuration(config))
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None


@click.group()
def main() -> None:
    """Strom: Apache Fluss rebuilt in Python."""


@main.command()
@click.option("--host", default=None, help="Overrides bind.listeners (default 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Overrides bind.listeners (default 9123).")
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(path_type=Path),
    help="Where the coordinator keeps its metadata; overrides data.dir.",
)
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def coordinator(
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a coordinator server (a Fluss server.yaml alone is enough: --config-file)."""
    from strom.common import config as options
    from strom.server.coordinator.server import CoordinatorServer

    _setup_logging(log_level)
    host, port, config, directory = _server_setting(
        host, port, data_dir, config_file, config_pairs, options.COORDINATOR_HOST, options.COORDINATOR_PORT
    )

    async def start() -> CoordinatorServer:
        server = CoordinatorServer(host=host, port=port, data_dir=directory, config=config)
        await server.start()
        return server

    _run_server(start)


@main.command("tablet-server")
@click.option("--server-id", default=None, type=int, help="Overrides tablet-server.id (one is required).")
@click.option("--host", default=None, help="Overrides bind.listeners (default 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Overrides bind.listeners; 0 picks a free port.")
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(path_type=Path),
    help="Where the tablet server keeps its data; overrides data.dir.",
)
@click.option(
    "--coordinator",
    "coordinator_address",
    metavar="HOST:PORT",
    help="The coordinator (required unless zookeeper.address is configured).",
)
@config_file_option
@config_option
@click.option("--log-level", default="info", show_default=True)
def tablet_server(
    server_id: int | None,
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    coordinator_address: str | None,
    config_file: Path | None,
    config_pairs: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a tablet server (a Fluss server.yaml alone is enough: --config-file)."""
    from strom.common import config as options
    from strom.common.config import Configuration
    from strom.common.errors import InvalidConfigError
    from strom.server import server_options
    from strom.server.tablet.server import TabletServer

    _setup_logging(log_level)
    host, port, config, directory = _server_setting(
        host,
        port,
        data_dir,
        config_file,
        config_pairs,
        options.TABLET_SERVER_HOST,
        options.TABLET_SERVER_PORT,
    )
    try:
        server_id = server_options.tablet_server_id(server_id, Configuration(config))
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None
    coordinator: tuple[str, int] | None = None
    if coordinator_address:
        coordinator_host, _, coordinator_port = coordinator_address.rpartition(":")
        coordinator = (coordinator_host, int(coordinator_port))
    elif "zookeeper.address" not in config:
        raise click.UsageError("give --coordinator HOST:PORT, or configure zookeeper.address")

    async def start() -> TabletServer:
        server = TabletServer(
            server_id=server_id,
            host=host,
            port=port,
            data_dir=directory,
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


@main.command()
@click.option("--data-dir", default="strom-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9123, show_default=True, type=int, help="The coordinator's port.")
@click.option("--tablet-servers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--lake-format",
    type=click.Choice(["iceberg", "paimon", "lance", "delta", "none"]),
    default=None,
    help="The embedded lake that tiering writes to: iceberg (the default with tiering), paimon, lance (log "
    "tables only), delta, or none "
    "(the default with --no-tiering: new tables get no lake format). --config datalake.format=... wins.",
)
@click.option(
    "--tiering/--no-tiering",
    default=True,
    show_default=True,
    help="Start the Spark tiering service (only when the cluster has a lake).",
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
    lake_format: str | None,
    tiering: bool,
    tiering_runner: str,
    spark_master: str,
    with_zookeeper: bool,
    coordinators: int,
    config_pairs: tuple[str, ...],
) -> None:
    """Run a local cluster: a coordinator, tablet servers and the tiering service, each its own process."""
    from rich.console import Console

    from strom.server.local_cluster import LocalCluster, LocalClusterError, LocalClusterSettings, port_in_use
    from strom.server.server_options import unknown_key_warnings

    busy = port_in_use(host, port)
    if busy is not None:
        # before the data directory is touched: it may be a running cluster's (its cluster.json)
        raise click.ClickException(
            f"{busy}: is another Strom or Fluss cluster running? Stop it, or choose another port with --port."
        )
    user_config = parse_config_pairs(config_pairs)
    if coordinators > 1 and not with_zookeeper and "zookeeper.address" not in user_config:
        raise click.UsageError("several coordinators need ZooKeeper: add --zookeeper")
    console = Console(stderr=False, soft_wrap=True)  # long paths stay on one line in logs and pipes
    for message in unknown_key_warnings(user_config):  # each server logs it too, but who reads those
        console.print(f"[yellow]{message}[/yellow]")
    cluster = LocalCluster(
        LocalClusterSettings(
            data_dir=data_dir.resolve(),
            host=host,
            port=port,
            tablet_servers=tablet_servers,
            lake_format=lake_format,
            tiering=tiering,
            tiering_runner=tiering_runner,
            spark_master=spark_master,
            with_zookeeper=with_zookeeper,
            coordinators=coordinators,
            user_config=user_config,
        ),
        status=console.status,
    )
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        cluster.start()
    except LocalClusterError as e:
        console.print(f"[red]cluster failed to start:[/red] {e}")
        sys.exit(1)
    _print_ready(console, cluster)
    try:
        cluster.watch(lambda: stopping, lambda text: console.print(f"[yellow]{text}[/yellow]"))
    finally:
        console.print("stopping the cluster")
        cluster.stop()
        console.print("stopped")
    os._exit(0)


def _print_ready(console: Any, cluster: Any) -> None:
    data_dir = cluster.data_dir
    console.print(f"Strom cluster ready. bootstrap.servers = [bold]{cluster.bootstrap}[/bold]")
    if cluster.kafka_bootstrap is not None:
        console.print(f"Kafka clients: bootstrap.servers = [bold]{cluster.kafka_bootstrap}[/bold]")
    if cluster.zookeeper is not None:
        zk = cluster.zookeeper
        console.print(f"  zookeeper: {zk.address} (pid {zk.pid}), data in {zk.data_dir}")
    console.print(f"  data: {data_dir}   logs: {cluster.logs}   cluster.json: {data_dir / 'cluster.json'}")
    if cluster.lake_format:
        console.print(f"  lake: {cluster.lake_format} {cluster.lake_properties}")
    else:
        console.print("  lake: none (new tables get no lake format; restart with --lake-format to add one)")
    if cluster.tiering is not None:
        console.print(f"  tiering service: pid {cluster.tiering.pid}, log {cluster.tiering.log_path}")
    elif cluster.settings.tiering and not cluster.lake:
        console.print("  tiering service: not started, the cluster has no lake")
    if cluster.spark_cluster is not None:
        sc = cluster.spark_cluster
        console.print(f"  spark: {sc.master_url}, master UI http://{sc.master.ui}")
    console.print("  Ctrl-C stops it.")
    sys.stdout.flush()


def _register_commands() -> None:
    """Adds the administrative commands of `strom.commands` to `main`; each module adds one line here."""
    from strom.commands.acl import acl
    from strom.commands.config import config
    from strom.commands.rebalance import rebalance
    from strom.commands.status import status
    from strom.commands.table import table

    main.add_command(acl)
    main.add_command(status)
    main.add_command(rebalance)
    main.add_command(table)
    main.add_command(config)


_register_commands()

if __name__ == "__main__":
    main()
