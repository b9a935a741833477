"""Hosts on a private network of their own: one Linux network namespace per host, a veth from each into
a bridge that lives in a "switch" namespace, addresses from one /24 that exists only inside them.

Nothing connects the root namespace to this network, so no process there can reach a host (nor a host
anything outside): whatever talks to the servers runs inside a namespace (`Host.exec_prefix`).
Partitions are blackhole routes inside the sending namespace (`ip route add blackhole ADDR`), which is
what this kernel offers without `tc netem`: a cut from A to B drops A's packets to B, and a TCP
connection between them stalls in both directions because its acknowledgements are dropped.

Names carry the pid of the process that made them (`sfb<pid>-...`), so `sweep_stale` can remove what a
crashed run left behind without touching a concurrent run's namespaces.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PREFIX = "sfb"
SUBNET = "10.201.0"  # the /24; .1 is unused, hosts get .10, .11, ...
_NAME = re.compile(rf"^{PREFIX}(\d+)-")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@dataclass(frozen=True)
class Host:
    name: str  # logical name: zk, coordinator-0, tablet-server-1, tiering, client
    netns: str
    address: str

    def exec_prefix(self) -> list[str]:
        """Prefix for a command that must run inside this host (ip execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.netns]


@dataclass
class NetBed:
    names: list[str]
    run_id: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    hosts: dict[str, Host] = field(default_factory=dict)
    _made: list[str] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.run_id}-sw"

    def create(self) -> NetBed:
        sweep_stale()
        try:
            self._add_netns(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            for index, name in enumerate(self.names):
                netns = f"{self.run_id}-h{index}"
                self._add_netns(netns)
                port = f"v{index}"  # created in the switch namespace: no name clash with anything
                ip(
                    "-n",
                    self.switch,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    netns,
                )
                ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
                address = f"{SUBNET}.{10 + index}"
                ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
                ip("-n", netns, "link", "set", "eth0", "up")
                ip("-n", netns, "link", "set", "lo", "up")  # for the process's own use (Spark's driver)
                self.hosts[name] = Host(name, netns, address)
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_netns(self, netns: str) -> None:
        ip("netns", "add", netns)
        self._made.append(netns)

    # ---- faults ------------------------------------------------------------------------------

    def cut(self, source: str, target: str) -> None:
        """Drops every packet `source` sends to `target` (one way)."""
        result = ip(
            "-n",
            self.hosts[source].netns,
            "route",
            "add",
            "blackhole",
            self.hosts[target].address,
            check=False,
        )
        if result.returncode != 0 and "File exists" not in result.stderr:
            raise RuntimeError(f"cannot cut {source} -> {target}: {result.stderr.strip()}")

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        for a in side_a:
            for b in side_b:
                self.cut(a, b)
                self.cut(b, a)

    def isolate(self, name: str) -> None:
        self.partition([name], [n for n in self.hosts if n != name])

    def cuts(self) -> list[tuple[str, str]]:
        by_address = {h.address: h.name for h in self.hosts.values()}
        found = []
        for host in self.hosts.values():
            for line in ip("-n", host.netns, "route", "show", "type", "blackhole").stdout.splitlines():
                target = line.split()[-1] if line.split() else ""
                found.append((host.name, by_address.get(target, target)))
        return found

    def set_tcp_retries(self, name: str, retries: int) -> None:
        """net.ipv4.tcp_retries2 of one host: how many retransmissions before TCP gives a connection up
        (15, about 15 minutes, by default). Lowered, a cut outlasting it breaks the host's connections
        and loses what they had not delivered, as long packet loss does between real machines."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.hosts[name].netns, "sh", "-c",
             f"echo {int(retries)} > /proc/sys/net/ipv4/tcp_retries2"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"cannot set tcp_retries2 of {name}: {result.stderr.strip()}")

    def heal(self) -> None:
        for host in self.hosts.values():
            ip("-n", host.netns, "route", "flush", "type", "blackhole", check=False)
        left = self.cuts()
        if left:
            raise RuntimeError(f"blackhole routes survived the heal: {left}")

    # ---- teardown ----------------------------------------------------------------------------

    def destroy(self) -> None:
        """Kills whatever still runs in our namespaces and deletes them. Safe to call twice."""
        for netns in reversed(self._made):
            _remove_netns(netns)
        self._made.clear()


def _remove_netns(netns: str) -> None:
    pids = ip("netns", "pids", netns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGCONT)  # a paused process would not die of SIGKILL before resumed
            os.kill(int(pid), signal.SIGKILL)
    ip("netns", "del", netns, check=False)


def sweep_stale() -> list[str]:
    """Removes namespaces of our prefix whose run (the pid in the name) no longer exists."""
    removed = []
    for line in ip("netns", "list", check=False).stdout.splitlines():
        netns = line.split()[0] if line.split() else ""
        match = _NAME.match(netns)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
            continue  # its run is alive (this run, or a concurrent one): not ours to remove
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        log.warning("removing stale namespace %s left by run %d", netns, pid)
        _remove_netns(netns)
        removed.append(netns)
    return removed
