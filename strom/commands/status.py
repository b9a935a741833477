"""`strom status`: servers, buckets (leader, replicas, ISR, offsets, KV snapshots), lake and tiering
state, and the rebalance in progress — a rich table for people, `--json` for scripts (the shape of
`strom.client.cluster_status.ClusterStatus.to_json`, documented in docs/operations.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from strom.client.cluster_status import (
    BucketStatus,
    ClusterStatus,
    LakeOffset,
    RebalanceProgress,
    TableStatus,
    TieringJobStatus,
)
from strom.commands.cluster_client import (
    bootstrap_option,
    client_config_option,
    client_properties,
    run_with_connection,
)

# A table with more buckets than this gets one summary row, plus a row for each bucket that needs
# attention (no leader, a short ISR, eligible leader replicas), at most BUCKETS_NEEDING_ATTENTION:
# a 2,048-bucket table printed 2,048 rows and buried the rest of the page.
BUCKETS_IN_FULL = 32
BUCKETS_NEEDING_ATTENTION = 20


@click.command()
@bootstrap_option
@client_config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--all-buckets",
    is_flag=True,
    help=f"A row for every bucket (by default a table of more than {BUCKETS_IN_FULL} buckets is summarised).",
)
def status(bootstrap: str, config_pairs: tuple[str, ...], as_json: bool, all_buckets: bool) -> None:
    """Show how the cluster is doing: servers, buckets, lake, tiering, rebalance."""

    async def body(connection: Any) -> ClusterStatus:
        return await connection.get_admin().describe_cluster()

    cluster = run_with_connection(client_properties(bootstrap, config_pairs), body)
    if as_json:
        click.echo(json.dumps(cluster.to_json(), indent=2))
    else:
        print_status(cluster, all_buckets=all_buckets)


def needs_attention(b: BucketStatus) -> bool:
    return b.leader is None or len(b.isr) < len(b.replicas) or bool(b.elr)


def shown_buckets(t: TableStatus, all_buckets: bool) -> tuple[list[BucketStatus], int]:
    """The buckets of `t` that get a row of their own, and how many more need attention than shown."""
    if all_buckets or len(t.buckets) <= BUCKETS_IN_FULL:
        return t.buckets, 0
    attention = [b for b in t.buckets if needs_attention(b)]
    return attention[:BUCKETS_NEEDING_ATTENTION], max(0, len(attention) - BUCKETS_NEEDING_ATTENTION)


def summary_row(t: TableStatus) -> list[str]:
    """One row for a whole table: counts, and offsets summed over its buckets."""
    buckets = t.buckets
    leaderless = sum(b.leader is None for b in buckets)
    short = sum(len(b.isr) < len(b.replicas) for b in buckets)
    with_elr = sum(bool(b.elr) for b in buckets)
    partitions = len({b.partition_id for b in buckets if b.partition_id is not None})

    def total(values: list[int | None]) -> str:
        known = [v for v in values if v is not None]
        missing = len(values) - len(known)
        return str(sum(known)) + (f" ({missing} unknown)" if missing else "")

    lag = max((lag for b in buckets for lag in b.follower_lag.values()), default=None)
    return [
        f"{t.database}.{t.name}",
        f"{partitions} partitions" if partitions else "",
        f"all {len(buckets)}",
        f"[red]{leaderless} without[/]" if leaderless else "every bucket led",
        "",
        f"[yellow]{short} short[/]" if short else "full",
        f"[yellow]{with_elr} buckets[/]" if with_elr else "",
        total([b.log_start for b in buckets]),
        total([b.log_end for b in buckets]),
        total([b.high_watermark for b in buckets]),
        f"{sum(b.kv_snapshot_id is not None for b in buckets)} buckets" if t.primary_key else "",
        "" if lag is None else f"max {lag}",
        "",
    ]


def _ids(values: list[int]) -> str:
    return ",".join(map(str, values))


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_status(cluster: ClusterStatus, *, all_buckets: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    servers = Table(title=f"Servers (coordinator epoch {cluster.coordinator_epoch})")
    for column in ("role", "id", "address", "alive", "leaders", "replicas", "tag"):
        servers.add_column(column)
    for s in cluster.servers:
        servers.add_row(
            s.role,
            str(s.id),
            f"{s.host}:{s.port}" if s.host else "-",
            "[green]yes[/]" if s.alive else "[red]no[/]",
            str(s.leaders),
            str(s.replicas),
            s.tag or "",
        )
    console.print(servers)

    disks = [(s, d) for s in cluster.servers for d in s.data_dirs]
    if disks:
        dirs = Table(title="Data directories")
        for column in ("server", "directory", "replicas", "used", "free", "state"):
            dirs.add_column(column)
        for s, d in disks:
            if d.offline is not None:
                state = f"[red]offline ({d.offline})[/]"
            elif d.write_locked:
                state = "[red]write-locked (disk full)[/]"
            else:
                state = "[green]ok[/]"
            free = "-" if d.free_bytes is None else f"{d.free_bytes / 2**30:.1f} GiB"
            dirs.add_row(str(s.id), d.path, str(d.replicas), f"{d.usage_ratio:.1%}", free, state)
        console.print(dirs)

    buckets = Table(title="Buckets")
    for column in (
        "table", "partition", "bucket", "leader", "replicas", "isr", "elr", "log start", "log end",
        "high watermark",
        "kv snapshot", "follower lag", "held for lake",
    ):  # fmt: skip
        buckets.add_column(column)
    summarised = False
    for t in cluster.tables:
        shown, more = shown_buckets(t, all_buckets)
        if shown is not t.buckets:
            summarised = True
            buckets.add_row(*summary_row(t), style="bold")
        for b in shown:
            under = len(b.isr) < len(b.replicas)
            buckets.add_row(
                f"{t.database}.{t.name}",
                b.partition or "",
                str(b.bucket),
                "[red]none (waiting for an eligible replica)[/]" if b.leader is None else str(b.leader),
                _ids(b.replicas),
                f"[yellow]{_ids(b.isr)}[/]" if under else _ids(b.isr),
                f"[yellow]{_ids(b.elr)}[/]" if b.elr else "",
                _offset(b.log_start),
                _offset(b.log_end),
                _offset(b.high_watermark),
                _offset(b.kv_snapshot_id),
                " ".join(f"{f}:{lag}" for f, lag in sorted(b.follower_lag.items())),
                held_for_lake(b.held_local, b.held_remote),
            )
        if more:
            buckets.add_row(f"{t.database}.{t.name}", "", f"[yellow]{more} more needing attention[/]")
    if summarised:
        buckets.caption = (
            f"Tables of more than {BUCKETS_IN_FULL} buckets: one summary row (offsets summed) and the "
            "buckets needing attention; --all-buckets shows every bucket, --json everything."
        )
    console.print(buckets)

    rescaled = [t for t in cluster.tables if t.rescale is not None]
    if rescaled:
        rescales = Table(title="Bucket rescales")
        for column in ("table", "rescale"):
            rescales.add_column(column)
        for t in rescaled:
            sealed = "SEALED" in (t.rescale or "")
            rescales.add_row(f"{t.database}.{t.name}", f"[yellow]{t.rescale}[/]" if sealed else t.rescale)
        console.print(rescales)

    lake_tables = [t for t in cluster.tables if t.lake is not None]
    if lake_tables:
        lake = Table(title="Lake")
        for column in ("table", "snapshot", "committed", "tiered offsets", "lag (records)", "lag (s)"):
            lake.add_column(column)
        for t in lake_tables:
            assert t.lake is not None
            committed = _clock(t.lake.committed_time_ms or None)
            lake.add_row(
                f"{t.database}.{t.name}",
                _offset(t.lake.snapshot_id),
                committed,
                " ".join(_lake_offset(o) for o in t.lake.offsets),
                str(t.lake.lag_records),
                f"{t.lake.lag_ms / 1000:.1f}",
            )
        console.print(lake)

    if cluster.tiering:
        tiering = Table(title="Tiering")
        for column in ("table", "state", "epoch", "job", "last heartbeat", "heartbeat age (s)"):
            tiering.add_column(column)
        for tier in cluster.tiering:
            age = "-" if tier.heartbeat_age_ms is None else f"{tier.heartbeat_age_ms / 1000:.1f}"
            holder = "-" if tier.job is None else job_label(tier.job)
            if tier.job is not None and tier.state != "tiering":
                holder = f"[dim]last: {holder}[/]"
            tiering.add_row(
                tier.table, tier.state, str(tier.tiering_epoch), holder, _clock(tier.last_heartbeat_ms), age
            )
        console.print(tiering)

    if cluster.tiering_jobs:
        jobs = Table(title="Tiering jobs")
        for column in ("job", "application", "address", "principal", "tables held", "last heartbeat (s ago)"):
            jobs.add_column(column)
        for job in cluster.tiering_jobs:
            held = [
                t.table
                for t in cluster.tiering
                if t.state == "tiering" and t.job is not None and t.job.identity == job.identity
            ]
            jobs.add_row(
                job.name or "-",
                job.application_id or "-",
                job.address,
                job.principal or "-",
                ", ".join(held) or "-",
                "-" if job.last_seen_age_ms is None else f"{job.last_seen_age_ms / 1000:.1f}",
            )
        console.print(jobs)

    if cluster.rebalance is not None:
        console.print(rebalance_summary(cluster.rebalance))


def held_for_lake(local: tuple[int, int], remote: tuple[int, int]) -> str:
    """Segments (and bytes) past their TTL that retention keeps until the lake has them."""
    parts = [
        f"[yellow]{tier} {segments} seg {size / 1024:.0f} KiB[/]"
        for tier, (segments, size) in (("local", local), ("remote", remote))
        if segments
    ]
    return " ".join(parts)


def job_label(job: TieringJobStatus) -> str:
    """`name (application id) at address`, leaving out what the job did not say."""
    name = job.name or "unnamed job"
    app = f" ({job.application_id})" if job.application_id else ""
    return f"{name}{app} at {job.address}"


def _clock(epoch_ms: int | None) -> str:
    return "-" if epoch_ms is None else datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%H:%M:%S")


def rebalance_summary(progress: RebalanceProgress) -> str:
    return (
        f"Rebalance {progress.rebalance_id}: {progress.status} "
        f"({progress.done}/{len(progress.buckets)} bucket(s) done)"
    )


def _lake_offset(o: LakeOffset) -> str:
    where = f"{o.partition_id}/{o.bucket}" if o.partition_id is not None else str(o.bucket)
    if o.lake_ahead_log_end is not None:
        return f"[red]{where}:{o.offset} lake ahead of log (log end {o.lake_ahead_log_end})[/]"
    return f"{where}:{o.offset}"
