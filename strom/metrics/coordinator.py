"""What a coordinator reports, as state gauges: whether it is the active one, the live
tablet servers, tables, partitions, buckets and buckets without a live leader, and the lake-tiering
queue (pending and running tables)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from strom.metrics.registry import Metrics

Sample = tuple[Sequence[str], float]


def register_coordinator_metrics(metrics: Metrics, active: Callable[[], Any]) -> None:
    """`active()` is the ActiveCoordinator while this process is the active one, else None."""

    def gauge(metric: str, documentation: str, value: Callable[[Any], float]) -> None:
        def samples() -> Iterable[Sample]:
            coordinator = active()
            if coordinator is not None:
                yield (), value(coordinator)

        metrics.state_gauge("", metric, documentation, (), samples)

    def is_active() -> Iterable[Sample]:
        yield (), 1.0 if active() is not None else 0.0

    def offline(c: Any) -> float:
        live = set(c.membership.servers)
        return sum(1 for b in c.store.list_buckets() if b.leader is None or b.leader not in live)

    def partitions(c: Any) -> float:
        return sum(len(c.store.list_partitions(t.table_id)) for t in c.store.list_tables())

    def tiering(state: str) -> Callable[[Any], float]:
        return lambda c: sum(1 for t in c.tiering.tables.values() if t.state.value == state)

    metrics.state_gauge(
        "", "activeCoordinatorCount", "1 while this coordinator is the active one.", (), is_active
    )
    gauge("activeTabletServerCount", "Live tablet servers.", lambda c: len(c.membership.servers))
    gauge("tableCount", "Tables.", lambda c: len(c.store.list_tables()))
    gauge("partitionCount", "Partitions.", partitions)
    gauge("bucketCount", "Buckets (of tables and of partitions).", lambda c: len(c.store.list_buckets()))
    gauge("offlineBucketCount", "Buckets without a live leader.", offline)
    gauge(
        "eligibleLeaderReplicasBucketCount",
        "Buckets with eligible leader replicas (KIP-966): their ISR is below the minimum.",
        lambda c: sum(1 for b in c.store.list_buckets() if b.elr),
    )
    gauge(
        "electionFromEligibleLeaderReplicasCount",
        "Leaders elected from the ELR since this coordinator became active (no ISR member was live).",
        lambda c: c.controller.elr_elections,
    )
    gauge(
        "uncleanLeaderElectionCount",
        "Leaders elected since this coordinator became active that may have lost acknowledged records "
        "(table.unclean.leader.election.enabled, or every replica restarted uncleanly).",
        lambda c: c.controller.unclean_elections,
    )
    gauge(
        "lakeAheadOfLogBucketCount",
        "Buckets whose log a last-resort or unclean election left ending below the lake's tiered offset "
        "(their tables' tiering is held; docs/reliability.md).",
        lambda c: len(c.lake.lake_ahead()),
    )
    gauge(
        "lakeTiering_pendingTablesCount", "Lake-enabled tables waiting for a tiering job.", tiering("pending")
    )
    gauge("lakeTiering_runningTablesCount", "Lake-enabled tables being tiered now.", tiering("tiering"))
    gauge(
        "remoteOrphanFilesDeleted",
        "Files in remote storage no metadata referred to, deleted since this coordinator became active.",
        lambda c: c.orphan_files.deleted_files if c.orphan_files is not None else 0,
    )
    gauge(
        "remoteOrphanBytesDeleted",
        "Bytes of those files.",
        lambda c: c.orphan_files.deleted_bytes if c.orphan_files is not None else 0,
    )
