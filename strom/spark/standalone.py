"""A Spark standalone cluster from the Spark that pyspark ships: one master and N workers, each its own
JVM process (`bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), bound to
one address (loopback by default) on free ports.

`strom local --spark-master standalone` and the cluster tests start one; `cluster.json` lists the
master and the workers with their web UIs (the master's `/json/` says which workers are alive and
which applications run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.server.launcher import free_port

SPARK_MASTER = "spark-master"
SPARK_WORKER = "spark-worker"

# The daemons themselves are small; executors get their own memory (spark.executor.memory).
DAEMON_MEMORY = "256m"


def spark_home() -> Path:
    """The Spark inside the pyspark package (it has bin/spark-class and the jars)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkDaemon:
    """A master or worker JVM: its RPC port and its web UI port."""

    role: str
    index: int
    host: str
    port: int
    ui_port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def ui(self) -> str:
        return f"{self.host}:{self.ui_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, command: list[str], env: dict[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its executors die with it when we kill the group
            )

    def kill(self) -> None:
        """SIGKILL to the daemon and the executors it started (the host-crash case)."""
        if self.process is not None and self.is_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or not self.is_alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class StandaloneCluster:
    master: SparkDaemon
    workers: list[SparkDaemon]
    work_dir: Path

    @property
    def master_url(self) -> str:
        return f"spark://{self.master.host}:{self.master.port}"

    def state(self) -> dict[str, Any]:
        """The master's `/json/`: workers (with their state) and active/completed applications."""
        with urllib.request.urlopen(f"http://{self.master.ui}/json/", timeout=5) as response:
            return json.loads(response.read())

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def wait_for_workers(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for daemon in [self.master, *self.workers]:
                if daemon.process is not None and not daemon.is_alive():
                    raise RuntimeError(
                        f"{daemon.role} {daemon.index} exited ({daemon.process.returncode}); "
                        f"see {daemon.log_path}"
                    )
            try:
                if len(self.alive_workers()) >= count:
                    return
            except OSError:
                pass  # the master's UI is not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} Spark workers did not register with {self.master_url}")
            time.sleep(0.3)

    def add_worker(self, cores: int = 1, memory: str = "1g") -> SparkDaemon:
        """Another worker (e.g. to replace a killed one)."""
        index = max((w.index for w in self.workers), default=-1) + 1
        host = self.master.host
        worker = SparkDaemon(
            SPARK_WORKER,
            index,
            host,
            free_port(host),
            free_port(host),
            self.work_dir / "logs" / f"spark-worker-{index}.log",
        )
        worker_dir = self.work_dir / f"worker-{index}"
        worker_dir.mkdir(parents=True, exist_ok=True)
        worker.start(
            [
                *_spark_class("org.apache.spark.deploy.worker.Worker"),
                "--host",
                host,
                "--port",
                str(worker.port),
                "--webui-port",
                str(worker.ui_port),
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(worker_dir),
                self.master_url,
            ],
            _daemon_env(host),
        )
        self.workers.append(worker)
        return worker

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and its executors; it leaves `workers` (add_worker starts a replacement)."""
        worker = next(w for w in self.workers if w.index == index)
        worker.kill()
        self.workers.remove(worker)

    def entries(self) -> list[dict[str, Any]]:
        """cluster.json's entries for the master and the workers."""
        return [
            {"role": d.role, "id": d.index, "host": d.host, "port": d.port, "pid": d.pid, "ui": d.ui}
            for d in [self.master, *self.workers]
        ]

    def stop(self) -> None:
        for daemon in [*self.workers, self.master]:
            daemon.stop()


def _spark_class(main_class: str) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), main_class]


def _daemon_env(host: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # executors get code shipped
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=host,
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def start_standalone(
    work_dir: Path, host: str = "127.0.0.1", workers: int = 2, cores: int = 1, memory: str = "1g"
) -> StandaloneCluster:
    """A master and `workers` workers (each offering `cores` cores and `memory` to executors), running
    and registered when this returns. Worker scratch space and logs go under `work_dir`."""
    work_dir.mkdir(parents=True, exist_ok=True)
    master = SparkDaemon(
        SPARK_MASTER, 0, host, free_port(host), free_port(host), work_dir / "logs" / "spark-master.log"
    )
    master.start(
        [
            *_spark_class("org.apache.spark.deploy.master.Master"),
            "--host",
            host,
            "--port",
            str(master.port),
            "--webui-port",
            str(master.ui_port),
        ],
        _daemon_env(host),
    )
    cluster = StandaloneCluster(master, [], work_dir)
    try:
        for _ in range(workers):
            cluster.add_worker(cores, memory)
        cluster.wait_for_workers(workers)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_for_local_cluster(data_dir: Path, host: str, tiering: Any | None) -> StandaloneCluster:
    """`strom local --spark-master standalone`: a 2-worker cluster under <data-dir>/spark, and the
    tiering service (a launcher.ServerProcess, if any) pointed at it with the web UI on a free port."""
    cluster = start_standalone(data_dir / "spark", host)
    if tiering is not None:
        tiering.extra_args = [
            *tiering.extra_args,
            "--master",
            cluster.master_url,
            "--spark-conf",
            f"spark.ui.port={free_port(host)}",
        ]
    return cluster
