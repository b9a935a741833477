"""A Strom cluster whose every process is a host of its own on a `NetBed`: ZooKeeper, two coordinators,
tablet servers, the Spark tiering service, and a client host where the workload, the final readers and
the agent (the bed's readiness checks) run. Servers listen on their namespace address and reach each
other through the bridge, never over loopback.

Tablet servers keep their data directory on a `LazyMount` (tests/faults/lazyfs.py) when it is available,
so that the nemesis can cut their power: writes that were not fsynced are lost.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.server.launcher import COORDINATOR, TABLET_SERVER, TIERING, ServerProcess
from strom.server.zookeeper.local_server import MAIN_CLASS, ZOOKEEPER_JAR, LocalZooKeeper, zookeeper_installed

from .netbed import Host, NetBed

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
SERVER_PORT = 9123  # every host has an address of its own: one port for all is unambiguous
ZK_PORT = 2181
ZK_SESSION_S = 3.0

# Fast failure detection, as the cluster tests use; lag and session limits short enough that a round
# of a few seconds sees servers leave and rejoin the ISR.
BED_CONFIG = {
    "tablet-server.heartbeat.interval": "200ms",
    "tablet-server.session.timeout": "2s",
    "zookeeper.client.session-timeout": f"{ZK_SESSION_S:.0f}s",
    "log.replica.max-lag-time": "2s",
    "log.replica.fetch.wait-max-time": "200ms",
    "kv.snapshot.interval": "5s",
}


def lazy_mount_class() -> tuple[Any, str | None]:
    """(LazyMount, None), or (None, why the power-cut nemesis is off)."""
    try:
        from .lazyfs import LazyMount, fuse_available
    except ImportError as e:
        return None, f"power cut off: tests/faults/lazyfs.py cannot be imported ({e})"
    missing = fuse_available()
    if missing is not None:
        return None, f"power cut off: {missing}"
    return LazyMount, None


@dataclass
class HostProcess(ServerProcess):
    """A Strom server started inside its host's namespace."""

    netns: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        env = [f"{k}={v}" for k, v in self.env.items()]
        return ["ip", "netns", "exec", self.netns, *(["env", *env] if env else []), *super().command()]


class ZooKeeperHost:
    """Debian's ZooKeeper, standalone, listening on its host's address."""

    def __init__(self, host: Host, data_dir: Path, log_path: Path) -> None:
        self.host = host
        self.server = LocalZooKeeper(data_dir, ZK_PORT, host=host.address, log_path=log_path)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        if not zookeeper_installed():
            raise RuntimeError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR}): run scripts/install_zookeeper.sh"
            )
        data_dir = self.server.data_dir
        (data_dir / "data").mkdir(parents=True, exist_ok=True)
        (data_dir / "zoo.cfg").write_text(self.server.config_text())
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                [
                    *self.host.exec_prefix(),
                    shutil.which("java") or "java",
                    "-Xmx192m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-Dzookeeper.admin.enableServer=false",
                    "-cp",
                    str(ZOOKEEPER_JAR),
                    MAIN_CLASS,
                    str(data_dir / "zoo.cfg"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.is_alive():
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 10) -> None:
        if self.process is None or not self.is_alive():
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class Agent:
    """The campaign's line to `tests.faults.agent`, running in the client host."""

    def __init__(self, host: Host, log_path: Path) -> None:
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [*host.exec_prefix(), sys.executable, "-m", "tests.faults.agent"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            text=True,
            start_new_session=True,
        )

    def call(self, op: str, **args: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the agent exited with code {self.process.returncode}")
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the agent closed its output")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"agent {op}: {answer['error']}")
        return answer["ok"]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except RuntimeError as e:
            last_error = e
        time.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )


class FaultCluster:
    def __init__(
        self,
        base_dir: Path,
        *,
        tablet_servers: int = 3,
        coordinators: int = 2,
        tiering: bool = True,
        power_cut: bool = True,
    ) -> None:
        self.base_dir = base_dir
        self.logs = base_dir / "logs"
        self.tablet_server_ids = list(range(tablet_servers))
        names = [
            "zk",
            *(f"coordinator-{i}" for i in range(coordinators)),
            *(f"tablet-server-{i}" for i in self.tablet_server_ids),
            "client",
        ]
        if tiering:
            names.append("tiering")
        self.net = NetBed(names)
        self.with_tiering = tiering
        self.mount_class: Any
        self.power_cut_disabled: str | None
        self.mount_class, self.power_cut_disabled = (
            lazy_mount_class() if power_cut else (None, "power cut off: not asked for")
        )
        self.servers: dict[str, HostProcess] = {}
        self.zookeeper: ZooKeeperHost | None = None
        self.mounts: dict[str, Any] = {}
        self.agent: Agent | None = None
        self._stopped = False

    # ---- addresses ---------------------------------------------------------------------------

    def host(self, name: str) -> Host:
        return self.net.hosts[name]

    @property
    def coordinator_addresses(self) -> list[str]:
        return [s.address for n, s in self.servers.items() if n.startswith("coordinator")]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.coordinator_addresses)

    def tablet_server_address(self, server_id: int) -> str:
        return self.servers[f"tablet-server-{server_id}"].address

    @property
    def lake_config(self) -> dict[str, str]:
        return {
            "datalake.format": "iceberg",
            "datalake.iceberg.type": "sql",
            "datalake.iceberg.uri": f"sqlite:///{self.base_dir}/lake/iceberg_catalog.db",
            "datalake.iceberg.warehouse": f"file://{self.base_dir}/lake/warehouse",
        }

    def config(self) -> dict[str, str]:
        assert self.zookeeper is not None
        return {
            **BED_CONFIG,
            "zookeeper.address": self.zookeeper.address,
            "zookeeper.path.root": "/strom",
            "remote.data.dir": str(self.base_dir / "remote"),
            **self.lake_config,
        }

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultCluster:
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "lake").mkdir(exist_ok=True)
        self.net.create()
        self.agent = Agent(self.host("client"), self.logs / "agent.log")
        zookeeper = ZooKeeperHost(self.host("zk"), self.base_dir / "zk", self.logs / "zk.log")
        self.zookeeper = zookeeper
        zookeeper.start()
        wait_until(lambda: self.call("zk_ok", address=zookeeper.address), 60, "ZooKeeper")
        config = self.config()
        for name in self.net.hosts:
            if name.startswith("coordinator"):
                index = int(name.rsplit("-", 1)[1])
                self.servers[name] = HostProcess(
                    COORDINATOR,
                    index,
                    self.host(name).address,
                    SERVER_PORT,
                    self.base_dir / name,
                    config,
                    log_path=self.logs / f"{name}.log",
                    netns=self.host(name).netns,
                )
        for server in self.servers.values():
            server.start()
        for name in list(self.servers):
            wait_until(lambda n=name: self.serving(n), 60, f"{name} serving")
        for server_id in self.tablet_server_ids:
            name = f"tablet-server-{server_id}"
            data_dir = self.base_dir / name / "data"
            if self.mount_class is not None:
                backing = self.base_dir / name / "backing"
                backing.mkdir(parents=True, exist_ok=True)
                data_dir.mkdir(parents=True, exist_ok=True)
                mount = self.mount_class(backing, data_dir)
                mount.start()
                self.mounts[name] = mount
            self.servers[name] = HostProcess(
                TABLET_SERVER,
                server_id,
                self.host(name).address,
                SERVER_PORT,
                data_dir,
                config,
                log_path=self.logs / f"{name}.log",
                netns=self.host(name).netns,
            )
            self.servers[name].start()
        self.wait_listed()
        if self.with_tiering:
            self.servers["tiering"] = HostProcess(
                TIERING,
                0,
                self.host("tiering").address,
                0,
                self.base_dir / "tiering",
                self.lake_config,
                coordinator=self.bootstrap,
                log_path=self.logs / "tiering.log",
                extra_args=["--runner", "local", "--poll-interval", "0.5"],
                netns=self.host("tiering").netns,
                env={"SPARK_LOCAL_IP": "127.0.0.1"},
            )
            self.servers["tiering"].start()

    def stop(self) -> None:
        """Stops every process, unmounts, removes the namespaces. Idempotent; runs at exit too."""
        if self._stopped:
            return
        self._stopped = True
        for name, server in self.servers.items():
            if server.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server.pid, signal.SIGCONT)
            try:
                server.stop(timeout=10)
            except Exception as e:  # keep tearing down the rest
                log.warning("stopping %s: %s", name, e)
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.agent is not None:
            self.agent.stop()
        for name, mount in self.mounts.items():
            try:
                mount.stop()
            except Exception as e:
                log.warning("unmounting %s: %s", name, e)
        self.net.destroy()
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)

    # ---- questions, asked from inside the network --------------------------------------------

    def call(self, op: str, **args: Any) -> Any:
        assert self.agent is not None
        return self.agent.call(op, **args)

    def serving(self, name: str) -> bool:
        server = self.servers[name]
        if not server.is_alive():
            raise RuntimeError(
                f"{name} exited with code {server.process.returncode if server.process else '?'}"
                f"; see {server.log_path}"
            )
        return bool(self.call("serving", address=server.address))

    def listed(self) -> list[int]:
        return list(self.call("listed", coordinators=self.coordinator_addresses))

    def wait_listed(self, timeout: float = 60) -> None:
        want = sorted(self.tablet_server_ids)
        wait_until(lambda: self.listed() == want, timeout, f"the coordinator to list tablet servers {want}")

    def buckets(self, tables: list[str]) -> dict[str, Any]:
        return dict(self.call("buckets", coordinators=self.coordinator_addresses, tables=tables))

    def replicas(self) -> dict[str, Any]:
        addresses = [self.tablet_server_address(i) for i in self.tablet_server_ids]
        return dict(self.call("replicas", tablet_servers=addresses))

    def in_step(self, tables: list[str]) -> bool:
        """Every bucket of `tables` has a leader, and every replica's log ends at the leader's high
        watermark, which is the leader's log end: nothing left to replicate or to truncate."""
        if self.listed() != sorted(self.tablet_server_ids):
            return False
        metadata = self.buckets(tables)
        states = self.replicas()
        if any("error" in s for s in states.values()):
            return False
        by_bucket: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for state in states.values():
            for r in state["replicas"]:
                by_bucket.setdefault((r["table_id"], r["bucket"]), []).append(r)
        for table in metadata.values():
            for bucket, meta in table["buckets"].items():
                copies = by_bucket.get((table["table_id"], int(bucket)), [])
                leaders = [c for c in copies if c["leader"]]
                if meta["leader"] is None or len(leaders) != 1 or len(copies) != len(meta["replicas"]):
                    return False
                end = leaders[0]["log_end"]
                if leaders[0]["high_watermark"] != end or any(c["log_end"] != end for c in copies):
                    return False
        return True

    def isr(self) -> dict[tuple[int, int], list[int]]:
        """(table id, bucket) -> the ISR the active coordinator holds for it."""
        answer = self.call("isr", coordinators=self.coordinator_addresses)
        return {(int(t), int(b)): members for key, members in answer.items() for t, b in [key.split("/")]}

    def healthy(self, tables: list[str]) -> bool:
        """Every tablet server listed and answering, every bucket led, every replica hosted and back in
        the bucket's ISR (writes may go on: unlike `in_step`, this does not ask for every record of a
        follower to be fetched, only for the follower to hold every acknowledged one).

        The ISR matters: a replica that restarted after a power cut is hosted long before it caught
        up. A round started then may cut the power of every replica that holds the acknowledged tail
        (the 30-minute run, seed 2, rounds 47-49: 27,961 appends lost that way), which no
        replication protocol without fsync survives: that is a fault beyond the one a round makes."""
        if self.listed() != sorted(self.tablet_server_ids):
            return False
        metadata = self.buckets(tables)
        states = self.replicas()
        if any("error" in s for s in states.values()):
            return False
        hosted = {
            (r["table_id"], r["bucket"], s["server_id"]) for s in states.values() for r in s["replicas"]
        }
        for table in metadata.values():
            for bucket, meta in table["buckets"].items():
                if meta["leader"] is None:
                    return False
                if any((table["table_id"], int(bucket), r) not in hosted for r in meta["replicas"]):
                    return False
        isr = self.isr()
        for table in metadata.values():
            for bucket, meta in table["buckets"].items():
                if sorted(isr.get((table["table_id"], int(bucket)), [])) != sorted(meta["replicas"]):
                    return False
        return True

    def settle(self, tables: list[str], timeout: float = 90) -> float:
        """Waits until the cluster is whole and its replicas in step; returns the seconds it took."""
        started = time.monotonic()
        for name, server in self.servers.items():
            if not server.is_alive():
                raise RuntimeError(f"{name} is not running at settle time; see {server.log_path}")
        wait_until(lambda: self.in_step(tables), timeout, "every replica in step", interval=0.5)
        return time.monotonic() - started

    # ---- process faults ----------------------------------------------------------------------

    def pid(self, name: str) -> int:
        process = self.zookeeper if name == "zk" else self.servers[name]
        assert process is not None and process.pid is not None
        return process.pid

    def pause(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(name), signal.SIGCONT)

    def kill(self, name: str) -> None:
        if name == "zk":
            assert self.zookeeper is not None
            self.zookeeper.kill()
        else:
            self.servers[name].kill()

    def power_cut(self, name: str) -> None:
        """Kills the tablet server and drops every write it had not fsynced."""
        mount = self.mounts.get(name)
        if mount is None:
            raise RuntimeError(self.power_cut_disabled or f"{name} has no LazyMount")
        self.servers[name].kill()
        mount.power_cut()

    def restart(self, name: str, *, graceful: bool = False) -> None:
        if name == "zk":
            assert self.zookeeper is not None
            self.zookeeper.stop() if graceful else self.zookeeper.kill()
            self.zookeeper.start()
            return
        server = self.servers[name]
        if graceful:
            server.stop()
        else:
            server.kill()
        server.start()

    def start_if_dead(self) -> list[str]:
        started = []
        if self.zookeeper is not None and not self.zookeeper.is_alive():
            self.zookeeper.start()
            started.append("zk")
        for name, server in self.servers.items():
            if not server.is_alive():
                server.start()
                started.append(name)
        return started

    def client_command(self, *args: str) -> list[str]:
        return [*self.host("client").exec_prefix(), sys.executable, *args]

    def client_json(self, args: list[str], timeout: float = 90) -> dict[str, Any]:
        """Runs a module in the client host and returns the JSON object its last output line holds."""
        result = subprocess.run(
            self.client_command(*args), capture_output=True, text=True, cwd=ROOT, timeout=timeout
        )
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            return {"ok": False, "error": f"exit {result.returncode}: {result.stderr.strip()[-500:]}"}
        return dict(json.loads(lines[-1]))
