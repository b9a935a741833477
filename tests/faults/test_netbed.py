"""The bed's network on its own: hosts reach each other over the bridge, a cut drops one direction only,
a heal restores it, and the stale-namespace sweep removes only namespaces of runs that are gone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from faults.netbed import PREFIX, NetBed, ip, sweep_stale

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and iproute2"
)

# inside host a: a UDP datagram to b, whose reader (inside b) prints what it got within the timeout
RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 9999)); s.settimeout(2)
try:
    print(s.recv(100).decode())
except TimeoutError:
    print("nothing")
"""
SEND = """
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"hi", (sys.argv[1], 9999))
"""


@pytest.fixture
def bed() -> Iterator[NetBed]:
    net = NetBed(["a", "b"]).create()
    try:
        yield net
    finally:
        net.destroy()
    assert not [n for n in ip("netns", "list").stdout.split() if n.startswith(net.run_id + "-")]


def delivered(net: NetBed, source: str, target: str) -> bool:
    receiver = subprocess.Popen(
        [*net.hosts[target].exec_prefix(), sys.executable, "-c", RECEIVE, net.hosts[target].address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(5):  # the receiver may not be bound yet: a few datagrams, one is enough
            subprocess.run(
                [*net.hosts[source].exec_prefix(), sys.executable, "-c", SEND, net.hosts[target].address],
                timeout=10,
                check=False,
            )
        out, _ = receiver.communicate(timeout=10)
    finally:
        receiver.kill()
    return out.strip() == "hi"


def test_a_cut_drops_one_direction_until_the_heal(bed: NetBed) -> None:
    assert delivered(bed, "a", "b") and delivered(bed, "b", "a")
    bed.cut("a", "b")
    assert bed.cuts() == [("a", "b")]
    assert not delivered(bed, "a", "b")
    assert delivered(bed, "b", "a")
    bed.heal()
    assert bed.cuts() == []
    assert delivered(bed, "a", "b")


def test_the_sweep_removes_namespaces_of_dead_runs_only() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs (reuse within this test is unlikely)
    stale = f"{PREFIX}{dead.pid}-h0"
    alive = f"{PREFIX}{os.getpid()}-h99"
    for name in (stale, alive):
        ip("netns", "add", name)
    try:
        removed = sweep_stale()
        names = ip("netns", "list").stdout.split()
        assert stale in removed and stale not in names
        assert alive in names
    finally:
        for name in (stale, alive):
            ip("netns", "del", name, check=False)
