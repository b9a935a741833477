"""`strom rebalance`: spread replicas and leaders fairly over the tablet servers (after adding one), or
drain servers before retiring them (`--remove-server ID`, Fluss's PERMANENT_OFFLINE server tag), with a
progress bar until the coordinator reports the rebalance finished. `--dry-run` shows the plan only."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from typing import Any

import click

from strom.client.cluster_status import ClusterStatus, RebalanceProgress
from strom.commands.cluster_client import (
    bootstrap_option,
    client_config_option,
    client_properties,
    run_with_connection,
)
from strom.commands.status import rebalance_summary
from strom.common.placement import ServerLocation
from strom.common.rebalance import (
    GoalType,
    Placement,
    RebalanceImpossible,
    RebalanceStatus,
    ServerTag,
    plan_rebalance,
)

_GOALS = [g.name for g in GoalType]
POLL_SECONDS = 0.5


def dry_run_plan(cluster: ClusterStatus, remove: set[int], goals: list[GoalType]) -> RebalanceProgress:
    """The plan the coordinator would make now (it plans with the same function)."""
    tagged = {s.id for s in cluster.servers if s.role == "tablet-server" and s.tag}
    drained = remove | {
        s.id
        for s in cluster.servers
        if s.role == "tablet-server" and s.tag == ServerTag.PERMANENT_OFFLINE.name
    }
    live = [s.id for s in cluster.servers if s.role == "tablet-server" and s.alive and s.id not in tagged]
    placements = [
        Placement((t.table_id, b.partition_id, b.bucket), tuple(b.replicas), b.leader)
        for t in cluster.tables
        for b in t.buckets
    ]
    locations = [
        ServerLocation(s.id, s.host, s.rack)
        for s in cluster.servers
        if s.role == "tablet-server" and s.alive and s.host is not None
    ]
    return RebalanceProgress.planned(plan_rebalance(placements, live, drained, goals, locations))


def print_plan(cluster: ClusterStatus | None, progress: RebalanceProgress) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Rebalance plan: {len(progress.buckets)} bucket(s)")
    for column in ("table", "partition", "bucket", "replicas", "→ replicas", "leader", "→ leader", "status"):
        table.add_column(column)
    for b in progress.buckets:
        table.add_row(
            cluster.table_name(b.table_id) if cluster else str(b.table_id),
            "" if b.partition_id is None else str(b.partition_id),
            str(b.bucket),
            ",".join(map(str, b.original_replicas)),
            ",".join(map(str, b.new_replicas)),
            str(b.original_leader),
            str(b.new_leader),
            b.status,
        )
    Console().print(table)


@click.command()
@bootstrap_option
@client_config_option
@click.option("--dry-run", is_flag=True, help="Show the moves without making them.")
@click.option(
    "--remove-server",
    "remove_servers",
    multiple=True,
    type=int,
    metavar="ID",
    help="Drain this tablet server before it is retired (tags it PERMANENT_OFFLINE; repeatable).",
)
@click.option(
    "--goal",
    "goals",
    multiple=True,
    type=click.Choice(_GOALS, case_sensitive=False),
    help="Goals by priority (default: REPLICA_DISTRIBUTION then LEADER_DISTRIBUTION).",
)
@click.option("--no-wait", is_flag=True, help="Start the rebalance and return at once.")
@click.option("--cancel", is_flag=True, help="Cancel the rebalance in progress.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan or the final progress as JSON.")
def rebalance(
    bootstrap: str,
    config_pairs: tuple[str, ...],
    dry_run: bool,
    remove_servers: tuple[int, ...],
    goals: tuple[str, ...],
    no_wait: bool,
    cancel: bool,
    as_json: bool,
) -> None:
    """Move replicas and leaders so that every tablet server holds a fair share."""
    goal_types = [GoalType[g.upper()] for g in goals] or [
        GoalType.REPLICA_DISTRIBUTION,
        GoalType.LEADER_DISTRIBUTION,
    ]
    properties = client_properties(bootstrap, config_pairs)

    if cancel:

        async def cancel_body(connection: Any) -> None:
            await connection.get_admin().cancel_rebalance()

        run_with_connection(properties, cancel_body)
        click.echo("rebalance cancelled (buckets in the middle of a move finish it)")
        return

    if dry_run:

        async def describe(connection: Any) -> ClusterStatus:
            return await connection.get_admin().describe_cluster()

        cluster = run_with_connection(properties, describe)
        try:
            plan = dry_run_plan(cluster, set(remove_servers), goal_types)
        except RebalanceImpossible as e:
            raise click.ClickException(f"cannot rebalance: {e}") from None
        if as_json:
            click.echo(json.dumps([asdict(b) for b in plan.buckets], indent=2))
        else:
            print_plan(cluster, plan)
        return

    async def run(connection: Any) -> RebalanceProgress | None:
        admin = connection.get_admin()
        if remove_servers:
            await admin.add_server_tag(remove_servers, ServerTag.PERMANENT_OFFLINE)
        rebalance_id = await admin.rebalance(goal_types)
        progress = await admin.list_rebalance_progress(rebalance_id)
        if no_wait or progress is None or progress.finished:
            return progress
        from rich.progress import Progress

        with Progress(transient=as_json) as bar:
            task = bar.add_task(f"rebalance {rebalance_id[:8]}", total=max(1, len(progress.buckets)))
            while not progress.finished:
                await asyncio.sleep(POLL_SECONDS)
                progress = await admin.list_rebalance_progress(rebalance_id)
                assert progress is not None
                bar.update(task, completed=progress.done)
        return progress

    progress = run_with_connection(properties, run)
    if progress is None:
        raise click.ClickException("the coordinator reported no rebalance")
    if as_json:
        click.echo(json.dumps({"rebalance_id": progress.rebalance_id, "status": progress.status,
                               "buckets": [asdict(b) for b in progress.buckets]}, indent=2))  # fmt: skip
    else:
        click.echo(rebalance_summary(progress))
    if progress.status in (RebalanceStatus.FAILED.name, RebalanceStatus.TIMEOUT.name):
        raise SystemExit(1)
