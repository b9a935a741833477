"""How administrative commands reach a cluster: `--bootstrap HOST:PORT` plus `--config client.KEY=VALUE`
options (the same `client.*` options the Strom client and the Spark connector take, so
`--config client.security.protocol=SASL --config client.security.sasl.username=admin ...` logs in)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from strom.common.errors import FlussError

T = TypeVar("T")

bootstrap_option = click.option(
    "--bootstrap", "bootstrap", required=True, metavar="HOST:PORT", help="The cluster's bootstrap.servers."
)
client_config_option = click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="client.KEY=VALUE",
    help="A client option, e.g. client.security.protocol=SASL (repeatable).",
)


def client_properties(bootstrap: str, config_pairs: tuple[str, ...]) -> dict[str, str]:
    properties = {"bootstrap.servers": bootstrap}
    for pair in config_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--config")
        properties[key.strip()] = value.strip()
    return properties


def run_with_connection(properties: dict[str, str], body: Callable[[Any], Awaitable[T]]) -> T:
    """Runs `body(connection)`; a Fluss error becomes a one-line message and exit code 1."""
    from strom.client import Connection

    async def main() -> T:
        connection = await Connection.create(properties)
        try:
            return await body(connection)
        finally:
            await connection.close()

    try:
        return asyncio.run(main())
    except FlussError as e:
        raise click.ClickException(f"{type(e).__name__} ({e.code}): {e.message}") from None
