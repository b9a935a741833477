"""`strom table alter|schema`: change a table as Fluss's AlterTable does (add nullable columns at the
end, set or reset options) and show every version of its schema."""

from __future__ import annotations

import re
from typing import Any

import click

from strom.commands.cluster_client import (
    bootstrap_option,
    client_config_option,
    client_properties,
    run_with_connection,
)

_COLUMN = re.compile(r"^\s*(\S+)\s+(.+?)(?:\s+COMMENT\s+'((?:[^']|'')*)')?\s*$", re.IGNORECASE | re.DOTALL)


def _add_column(text: str) -> Any:
    from strom.client import TableChange

    match = _COLUMN.match(text)
    if match is None:
        raise click.BadParameter(
            f"expected \"NAME TYPE [COMMENT 'text']\", got {text!r}", param_hint="--add-column"
        )
    name, type_text, comment = match.groups()
    try:
        return TableChange.add_column(
            name, type_text, None if comment is None else comment.replace("''", "'")
        )
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--add-column") from None


@click.group()
def table() -> None:
    """Change tables and show their schemas."""


@table.command("alter")
@click.argument("table_path", metavar="DATABASE.TABLE")
@click.option(
    "--add-column",
    "add_columns",
    multiple=True,
    metavar="\"NAME TYPE [COMMENT 'text']\"",
    help='Add a nullable column at the end, e.g. "note STRING" (repeatable).',
)
@click.option(
    "--set", "set_pairs", multiple=True, metavar="KEY=VALUE", help="Set a table option (repeatable)."
)
@click.option(
    "--reset", "reset_keys", multiple=True, metavar="KEY", help="Reset a table option (repeatable)."
)
@click.option("--if-exists", is_flag=True, help="Do nothing when the table does not exist.")
@bootstrap_option
@client_config_option
def alter(
    table_path: str,
    add_columns: tuple[str, ...],
    set_pairs: tuple[str, ...],
    reset_keys: tuple[str, ...],
    if_exists: bool,
    bootstrap: str,
    config_pairs: tuple[str, ...],
) -> None:
    """Alter a table: all changes apply together, or none does."""
    from strom.client import TableChange

    changes: list[Any] = [_add_column(text) for text in add_columns]
    for pair in set_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--set")
        changes.append(TableChange.set_option(key.strip(), value.strip()))
    changes += [TableChange.reset_option(key) for key in reset_keys]
    if not changes:
        raise click.UsageError("nothing to change: give --add-column, --set or --reset")

    async def body(connection: Any) -> int:
        admin = connection.get_admin()
        await admin.alter_table(table_path, changes, ignore_if_not_exists=if_exists)
        return (
            (await admin.get_table_info(table_path)).schema_id if await admin.table_exists(table_path) else 0
        )

    schema_id = run_with_connection(client_properties(bootstrap, config_pairs), body)
    if schema_id:
        click.echo(f"altered {table_path} (schema id {schema_id})")
    else:
        click.echo(f"{table_path} does not exist; nothing altered")


@table.command("schema")
@click.argument("table_path", metavar="DATABASE.TABLE")
@click.option("--all-versions", is_flag=True, help="Every schema the table has had, oldest first.")
@bootstrap_option
@client_config_option
def schema(table_path: str, all_versions: bool, bootstrap: str, config_pairs: tuple[str, ...]) -> None:
    """Show a table's schema (with its id)."""

    async def body(connection: Any) -> list[Any]:
        admin = connection.get_admin()
        latest = await admin.get_table_schema(table_path)
        if not all_versions:
            return [latest]
        return [await admin.get_table_schema(table_path, i) for i in range(1, latest.schema_id + 1)]

    for info in run_with_connection(client_properties(bootstrap, config_pairs), body):
        click.echo(f"schema {info.schema_id}:")
        for column in info.schema.columns:
            key = " PRIMARY KEY" if column.name in (info.schema.primary_key or []) else ""
            click.echo(f"  {column}{key}")
