"""The nemesis: one fault per round, drawn from a seeded schedule, held for a while, then healed.

Kinds (every one picks its victims from the round's random generator, so a seed replays a campaign):

- isolate        one host (ZooKeeper, a coordinator or a tablet server) loses every peer, both ways
- split          a minority of the server hosts is cut off from the majority (and from the clients)
- zk_cut_leader  a bucket leader loses ZooKeeper, but still reaches the clients and the other servers
- one_way        one host's packets to another are dropped (blackhole route), the reverse path kept
- pause          SIGSTOP of a server for longer than the ZooKeeper session timeout, then SIGCONT
- kill           SIGKILL of one process, restarted at the heal
- kill_bucket    SIGKILL of every replica of a bucket at once, restarted at the heal
- power_cut      SIGKILL of a tablet server and loss of its writes that were not fsynced (LazyMount)
- rolling_restart  SIGTERM and restart of each tablet server in turn, each back in step before the next
- power_cut_pause  (KIP-966's case) one replica of a bucket paused while the
                 other two lose their unsynced writes in a power cut and restart; the paused one, which
                 holds every acknowledged record, resumes after its session expired
- alter_one_way  AddColumn while the coordinators' packets to a tablet server are dropped for longer than
                 TCP retransmits (it misses the UpdateMetadata while alive); after the heal, writes of
                 the new schema must be taken
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .bed import ZK_SESSION_S, FaultCluster, wait_until
from .workload import LOG_TABLE, TABLES

# the coordinator gives an UpdateMetadata up after this long (controller.NOTIFY_TIMEOUT): the
# alter_one_way cut outlasts it, so the AddColumn's UpdateMetadata never reaches the victim
UPDATE_METADATA_TIMEOUT_S = 10.0

KINDS = [
    "alter_one_way",
    "isolate",
    "split",
    "zk_cut_leader",
    "one_way",
    "pause",
    "kill",
    "kill_bucket",
    "power_cut",
    "rolling_restart",
    "power_cut_pause",
]


@dataclass
class Fault:
    kind: str
    description: str
    heal: Callable[[], None]
    hold_s: float  # how long the fault should last at least
    findings: list[str] = field(default_factory=list)  # what a scenario saw go wrong (the checker's job)


def schedule(rng: random.Random, kinds: list[str], rounds: int) -> list[str]:
    """Every kind once, in a seeded order, then seeded random draws."""
    first = list(kinds)
    rng.shuffle(first)
    return (first + [rng.choice(kinds) for _ in range(max(0, rounds - len(first)))])[:rounds]


def server_hosts(cluster: FaultCluster) -> list[str]:
    return [name for name in cluster.net.hosts if name not in ("client", "tiering")]


def tablet_servers(cluster: FaultCluster) -> list[str]:
    return [f"tablet-server-{i}" for i in cluster.tablet_server_ids]


def heal_network(cluster: FaultCluster) -> Callable[[], None]:
    return cluster.net.heal


def bucket_leader(cluster: FaultCluster, rng: random.Random) -> tuple[int, str]:
    buckets = cluster.buckets([LOG_TABLE])[LOG_TABLE]["buckets"]
    bucket = rng.choice(sorted(buckets))
    leader = buckets[bucket]["leader"]
    if leader is None:
        leader = rng.choice(cluster.tablet_server_ids)
    return int(bucket), f"tablet-server-{leader}"


def inject(kind: str, cluster: FaultCluster, rng: random.Random, hold_s: float) -> Fault:
    net = cluster.net
    if kind == "isolate":
        victim = rng.choice(server_hosts(cluster))
        net.isolate(victim)
        return Fault(kind, f"isolated {victim}", net.heal, hold_s)
    if kind == "split":
        hosts = server_hosts(cluster)
        rng.shuffle(hosts)
        minority = hosts[: rng.randint(1, (len(hosts) - 1) // 2)]
        majority = [n for n in net.hosts if n not in minority]
        net.partition(minority, majority)
        return Fault(kind, f"split {sorted(minority)} from the rest", net.heal, hold_s)
    if kind == "zk_cut_leader":
        bucket, leader = bucket_leader(cluster, rng)
        net.partition([leader], ["zk"])
        return Fault(
            kind,
            f"{leader} (leader of {LOG_TABLE} bucket {bucket}) cut from ZooKeeper",
            net.heal,
            max(hold_s, ZK_SESSION_S + 2),
        )
    if kind == "one_way":
        source, target = rng.sample(server_hosts(cluster), 2)
        net.cut(source, target)
        return Fault(kind, f"one-way cut {source} -> {target}", net.heal, hold_s)
    if kind == "pause":
        victim = rng.choice([n for n in server_hosts(cluster) if n != "zk"])
        cluster.pause(victim)
        return Fault(kind, f"paused {victim}", lambda: cluster.resume(victim), max(hold_s, ZK_SESSION_S + 2))
    if kind == "kill":
        victim = rng.choice(server_hosts(cluster))
        cluster.kill(victim)
        return Fault(kind, f"killed {victim}", lambda: cluster.restart(victim), hold_s)
    if kind == "kill_bucket":
        bucket, _ = bucket_leader(cluster, rng)
        replicas = cluster.buckets([LOG_TABLE])[LOG_TABLE]["buckets"][str(bucket)]["replicas"]
        victims = [f"tablet-server-{r}" for r in replicas]
        for victim in victims:
            cluster.kill(victim)

        def restart_all() -> None:
            for victim in victims:
                cluster.restart(victim)

        return Fault(kind, f"killed every replica of bucket {bucket}: {victims}", restart_all, hold_s)
    if kind == "power_cut":
        if cluster.power_cut_disabled:
            return Fault(kind, f"skipped: {cluster.power_cut_disabled}", lambda: None, 0)
        victim = rng.choice(tablet_servers(cluster))
        cluster.power_cut(victim)
        return Fault(kind, f"power cut of {victim}", lambda: cluster.restart(victim), hold_s)
    if kind == "rolling_restart":
        order = tablet_servers(cluster)
        for victim in order:
            cluster.restart(victim, graceful=True)
            cluster.settle(TABLES, timeout=60)
        return Fault(kind, f"rolling restart of {order}", lambda: None, 0)
    if kind == "power_cut_pause":
        if cluster.power_cut_disabled:
            return Fault(kind, f"skipped: {cluster.power_cut_disabled}", lambda: None, 0)
        bucket, leader = bucket_leader(cluster, rng)
        table = cluster.buckets([LOG_TABLE])[LOG_TABLE]
        replicas = [f"tablet-server-{r}" for r in table["buckets"][str(bucket)]["replicas"]]
        # The paused replica must be in the ISR: only an ISR member is sure to hold every acknowledged
        # record. A replica still catching up after a restart does not, and cutting the power of the
        # ISR around it loses the records that only their page caches held (seed 2's rounds 47-48).
        # The round barrier waits for full ISRs, so this is every replica unless that wait timed out.
        isr = {f"tablet-server-{r}" for r in cluster.isr().get((table["table_id"], bucket), [])}
        paused = rng.choice([r for r in replicas if r in isr] or replicas)
        cut = [r for r in replicas if r != paused]
        cluster.pause(paused)  # at once: it is in the ISR, so it holds every acknowledged record
        for victim in cut:
            cluster.power_cut(victim)
        for victim in cut:
            cluster.restart(victim)
        description = f"bucket {bucket}: {paused} paused, power cut of {cut}"
        if paused not in isr:  # said in the round's line: a loss in this round is then no surprise
            description += f" (the ISR was {sorted(isr)}: no member of it could be paused)"
        return Fault(
            kind,
            description,
            lambda: cluster.resume(paused),
            max(hold_s, ZK_SESSION_S + 4),
        )
    if kind == "alter_one_way":
        return alter_one_way(cluster, rng, hold_s)
    raise ValueError(f"unknown nemesis kind {kind!r}; known: {KINDS}")


def heal_everything(cluster: FaultCluster) -> list[str]:
    """The end of every round: no cut, no paused process, every process running."""
    cluster.net.heal()
    for name in cluster.servers:
        cluster.resume(name)
    return cluster.start_if_dead()


def hold(fault: Fault, started: float) -> None:
    remaining = fault.hold_s - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)


def alter_one_way(cluster: FaultCluster, rng: random.Random, hold_s: float) -> Fault:
    table = f"altered_{rng.randrange(1 << 30)}"
    base = ["-m", "tests.faults.alter"]
    where = ["--bootstrap", cluster.bootstrap, "--table", table]
    created = cluster.client_json([*base, "create", *where])
    if not created["ok"]:
        return Fault(
            "alter_one_way",
            f"skipped: creating {table} failed",
            lambda: None,
            0,
            [f"alter_one_way: creating {table} failed: {created['error']}"],
        )
    leader = cluster.buckets([table])[table]["buckets"]["0"]["leader"]
    victim = f"tablet-server-{leader}"
    coordinators = [n for n in cluster.servers if n.startswith("coordinator")]
    # the cut outlasts TCP's retransmissions (on every host involved, as machines configured alike
    # are): the connections between coordinators and victim break, and the UpdateMetadata in flight
    # is lost rather than delivered late when the network heals
    for host in [*coordinators, victim]:
        cluster.net.set_tcp_retries(host, 3)
    for coordinator in coordinators:
        cluster.net.cut(coordinator, victim)
    altered = cluster.client_json([*base, "alter", *where])
    fault = Fault(
        "alter_one_way",
        f"AddColumn on {table} while the coordinators' packets to {victim} drop",
        lambda: None,
        max(hold_s, UPDATE_METADATA_TIMEOUT_S + 2),
    )
    if not altered["ok"]:
        fault.findings.append(f"alter_one_way: AddColumn on {table} failed: {altered['error']}")

    def heal() -> None:
        cluster.net.heal()
        for host in [*coordinators, victim]:
            cluster.net.set_tcp_retries(host, 15)
        written = cluster.client_json([*base, "write", *where])
        if written["ok"]:
            fault.description += (
                f"; new-schema write taken after {written['seconds']} s, attempt {written['attempts']}"
            )
            try:  # as follower too the victim must take the new schema's batches, and catch up
                wait_until(lambda: cluster.in_step([table]), 20, f"{victim} in step on {table}", interval=0.5)
            except TimeoutError:
                fault.findings.append(
                    f"alter_one_way: {victim} missed the UpdateMetadata of AddColumn on {table} and, after "
                    "the heal, its replicas of the table do not catch up (follower appends of the new schema "
                    "fail)"
                )
        else:
            fault.findings.append(
                f"alter_one_way: {victim} missed the UpdateMetadata of AddColumn on {table} and, after the "
                f"heal, writes of the new schema fail: {written['error']}"
            )

    fault.heal = heal
    return fault
