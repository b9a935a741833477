"""`strom config get|set|delete`: the cluster's dynamic configs (Fluss 1.0 Describe/AlterClusterConfigs).
`get` lists the coordinator's options and where each value comes from; `set KEY=VALUE` and `delete KEY`
change a dynamic option on the live servers (refused for options that are not dynamic)."""

from __future__ import annotations

from typing import Any

import click

from strom.commands.cluster_client import (
    bootstrap_option,
    client_config_option,
    client_properties,
    run_with_connection,
)


@click.group()
def config() -> None:
    """Dynamic cluster configs."""


@config.command("get")
@bootstrap_option
@client_config_option
@click.argument("key", required=False)
def get(bootstrap: str, config_pairs: tuple[str, ...], key: str | None) -> None:
    """Print the cluster's configs (or one KEY) with their source."""

    async def body(connection: Any) -> Any:
        return await connection.get_admin().describe_cluster_configs()

    entries = run_with_connection(client_properties(bootstrap, config_pairs), body)
    shown = [e for e in entries if key is None or e.key == key]
    if key is not None and not shown:
        raise click.ClickException(f"{key} is not set on the cluster (its default applies)")
    for entry in sorted(shown, key=lambda e: e.key):
        click.echo(f"{entry.key}={entry.value if entry.value is not None else ''}\t{entry.source}")


@config.command("set")
@bootstrap_option
@client_config_option
@click.argument("pairs", nargs=-1, required=True, metavar="KEY=VALUE...")
def set_(bootstrap: str, config_pairs: tuple[str, ...], pairs: tuple[str, ...]) -> None:
    """Set dynamic configs on the live cluster."""
    from strom.client.admin import AlterConfig

    changes = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        changes.append(AlterConfig(name.strip(), value.strip()))
    _alter(bootstrap, config_pairs, changes)


@config.command("delete")
@bootstrap_option
@client_config_option
@click.argument("keys", nargs=-1, required=True)
def delete(bootstrap: str, config_pairs: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """Drop dynamic configs: the servers' own values apply again."""
    from strom.client.admin import AlterConfig

    _alter(bootstrap, config_pairs, [AlterConfig(k, None) for k in keys])


def _alter(bootstrap: str, config_pairs: tuple[str, ...], changes: list[Any]) -> None:
    async def body(connection: Any) -> None:
        await connection.get_admin().alter_cluster_configs(changes)

    run_with_connection(client_properties(bootstrap, config_pairs), body)
    click.echo(f"altered {', '.join(c.key for c in changes)}")
