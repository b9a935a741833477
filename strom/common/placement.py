"""Where the replicas of new buckets go: spread over failure domains first, then evenly over servers.

A bucket's replicas should not share a failure domain. There are two: the rack (`tablet-server.rack`)
and the host (the advertised host of a server's internal listener; one tablet-server process per
core means several servers on one host). Racks count only when every candidate server has one, as in
Fluss, so a rolling change of rack settings does not block table creation; hosts always count.

The leader of each bucket is chosen round-robin over a list of servers that alternates racks and,
within a rack, hosts (Fluss's rack-alternated list), from a random start. Every further replica goes
to the server that adds a new rack, else a new host, else carries the fewest replicas so far, ties
broken by position after the leader (shifted once per round, so buckets do not all get the same
followers). When racks or hosts are too few for the replication factor the placement still succeeds
(each domain gets a replica before any gets two) and says so in `warnings`.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServerLocation:
    """A tablet server's failure domains."""

    server_id: int
    host: str
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Domains:
    """The failure domains placement honours for a set of servers."""

    host: Mapping[int, str]
    rack: Mapping[int, str] | None  # None: not every server has a rack, so racks are not used
    unracked: tuple[int, ...] = ()  # servers without a rack while others have one

    @classmethod
    def of(cls, locations: Iterable[ServerLocation]) -> Domains:
        locations = list(locations)
        host = {loc.server_id: loc.host for loc in locations}
        unracked = tuple(sorted(loc.server_id for loc in locations if loc.rack is None))
        if unracked:
            racked = len(unracked) < len(locations)
            return cls(host, None, unracked if racked else ())
        return cls(host, {loc.server_id: loc.rack for loc in locations if loc.rack is not None})

    # a server without a known location (gone, or not live) is a domain of its own
    def rack_of(self, server: int) -> str:
        assert self.rack is not None
        return self.rack.get(server, f"?{server}")

    def host_of(self, server: int) -> str:
        return self.host.get(server, f"?{server}")

    def racks(self, servers: Iterable[int]) -> set[str]:
        return set() if self.rack is None else {self.rack_of(s) for s in servers}

    def hosts(self, servers: Iterable[int]) -> set[str]:
        return {self.host_of(s) for s in servers}

    def crowding(self, replicas: Sequence[int]) -> tuple[int, int]:
        """Replicas beyond the first in their rack, and in their host (0, 0: fully spread)."""
        racks = len(replicas) - len(self.racks(replicas)) if self.rack is not None else 0
        return racks, len(replicas) - len(self.hosts(replicas))


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    replicas: list[tuple[int, ...]]  # per bucket, first replica leads
    warnings: list[str] = field(default_factory=list)


def domain_warnings(domains: Domains, replication_factor: int, servers: Sequence[int]) -> list[str]:
    """What placement cannot guarantee for this replication factor over these servers."""
    warnings = []
    if domains.unracked:
        warnings.append(
            f"tablet servers {list(domains.unracked)} have no tablet-server.rack while others have one: "
            "replicas are placed without regard to racks"
        )
    racks = domains.racks(servers)
    if domains.rack is not None and replication_factor > len(racks):
        warnings.append(
            f"replication factor {replication_factor} is larger than the number of racks ({len(racks)}): "
            "some buckets keep two replicas in one rack"
        )
    hosts = domains.hosts(servers)
    if replication_factor > len(hosts) and len(hosts) > 1:
        # a single-host cluster (a laptop, `strom local`) cannot do otherwise and is not worth a warning
        warnings.append(
            f"replication factor {replication_factor} is larger than the number of hosts ({len(hosts)}): "
            "some buckets keep two replicas on one host"
        )
    return warnings


def alternated(domains: Domains, servers: Sequence[int]) -> list[int]:
    """Servers ordered so that neighbours differ in rack, then in host: r1h1, r2h3, r1h2, r2h4, ..."""

    def interleave(groups: list[list[int]]) -> list[int]:
        out: list[int] = []
        for i in range(max((len(g) for g in groups), default=0)):
            out.extend(g[i] for g in groups if i < len(g))
        return out

    def by_host(members: Sequence[int]) -> list[int]:
        hosts: dict[str, list[int]] = defaultdict(list)
        for s in sorted(members):
            hosts[domains.host[s]].append(s)
        return interleave([hosts[h] for h in sorted(hosts)])

    if domains.rack is None:
        return by_host(servers)
    racks: dict[str, list[int]] = defaultdict(list)
    for s in servers:
        racks[domains.rack[s]].append(s)
    return interleave([by_host(racks[r]) for r in sorted(racks)])


def place_replicas(
    bucket_count: int,
    replication_factor: int,
    servers: Sequence[ServerLocation],
    start: int | None = None,
) -> ReplicaPlacement:
    """Replicas for `bucket_count` new buckets over `servers` (the caller checked that there are at least
    `replication_factor` of them). `start` fixes the otherwise random first leader (for tests)."""
    domains = Domains.of(servers)
    order = alternated(domains, [s.server_id for s in servers])
    n = len(order)
    position = {s: i for i, s in enumerate(order)}
    if start is None:
        start = random.randrange(n)
    load: Counter[int] = Counter()
    result = []
    for bucket in range(bucket_count):
        first = (start + bucket) % n
        shift = bucket // n  # a new round of leaders gets a new set of followers
        chosen = [order[first]]
        for _ in range(replication_factor - 1):
            racks, hosts = domains.racks(chosen), domains.hosts(chosen)

            # a new rack, a new host, the fewest replicas, then the next in order after the leader
            _, best = min(
                (
                    (
                        domains.rack is not None and domains.rack_of(s) in racks,
                        domains.host_of(s) in hosts,
                        load[s],
                        (position[s] - first - 1 - shift) % n,
                    ),
                    s,
                )
                for s in order
                if s not in chosen
            )
            chosen.append(best)
        load.update(chosen)
        result.append(tuple(chosen))
    return ReplicaPlacement(result, domain_warnings(domains, replication_factor, order))
