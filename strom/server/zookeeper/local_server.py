"""A ZooKeeper server process for one machine: `strom local --zookeeper`, the tests and the benchmarks.

It runs Debian's `zookeeper` package (installed by `scripts/install_zookeeper.sh`, which `make test` and
`make run ARGS=--zookeeper` call) on the Java that Spark already needs, standalone, with its own data
directory and loopback port.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's package; its manifest names the rest
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
TICK_MS = 500  # sessions may be as short as 2 ticks: tests use short session timeouts


def zookeeper_installed() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


@dataclass
class LocalZooKeeper:
    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def config_text(self) -> str:
        return "\n".join(
            [
                f"tickTime={TICK_MS}",
                f"dataDir={self.data_dir / 'data'}",
                f"clientPort={self.port}",
                f"clientPortAddress={self.host}",
                "maxClientCnxns=0",
                f"minSessionTimeout={2 * TICK_MS}",
                "maxSessionTimeout=120000",  # Fluss's default session timeout is 60 s
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,mntr",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
                "",
            ]
        )

    def start(self) -> None:
        if not zookeeper_installed():
            raise RuntimeError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR} or java missing): run "
                "scripts/install_zookeeper.sh (Debian's zookeeper package)"
            )
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(self.config_text())
        log_path = self.log_path or self.data_dir / "zookeeper.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [
                    shutil.which("java") or "java",
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-Dzookeeper.admin.enableServer=false",
                    "-cp",
                    str(ZOOKEEPER_JAR),
                    MAIN_CLASS,
                    str(config),
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "JVMFLAGS": ""},
            )

    def is_serving(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def wait_until_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_serving():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with code {self.process.returncode}; see its log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ZooKeeper not serving on {self.address} after {timeout:.0f}s")
            time.sleep(0.1)

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or not self.is_alive():
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
