"""`strom acl add|list|remove`: manage the cluster's access control lists (CreateAcls, ListAcls,
DropAcls on the coordinator). The caller needs ALL on the resource (for a table: on its database), or
to be a super user."""

from __future__ import annotations

import json
from typing import Any

import click

from strom.commands.cluster_client import (
    bootstrap_option,
    client_config_option,
    client_properties,
    run_with_connection,
)
from strom.common.errors import FlussError
from strom.security.acl import (
    ANY_PRINCIPAL,
    WILDCARD,
    AclBinding,
    AclEntry,
    AclFilter,
    OperationType,
    PermissionType,
    Principal,
    Resource,
    ResourceType,
)

_OPERATIONS = [op.name for op in OperationType if op != OperationType.ANY]
_RESOURCE_TYPES = [t.name for t in ResourceType if t != ResourceType.ANY]


def _principal(text: str) -> Principal:
    return ANY_PRINCIPAL if text.strip() == WILDCARD else Principal.parse(text)


def _filter_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--principal", help="Type:name, e.g. User:alice ('*' for everyone)."),
            click.option("--operation", type=click.Choice(_OPERATIONS, case_sensitive=False)),
            click.option("--host", "acl_host", help="The client host the ACL applies to ('*' for any)."),
            click.option("--resource-type", type=click.Choice(_RESOURCE_TYPES, case_sensitive=False)),
            click.option(
                "--resource-name",
                help="A database name, database.table for a table, a Kafka consumer group's id for a group.",
            ),
        ]
    ):
        command = option(command)
    return command


def _acl_filter(
    principal: str | None,
    operation: str | None,
    acl_host: str | None,
    resource_type: str | None,
    resource_name: str | None,
) -> AclFilter:
    kind = ResourceType[resource_type.upper()] if resource_type else ResourceType.ANY
    name = resource_name
    if kind == ResourceType.CLUSTER:
        name = Resource.cluster().name
    return AclFilter(
        resource_type=kind,
        resource_name=name,
        principal=_principal(principal) if principal else None,
        host=acl_host,
        operation=OperationType[operation.upper()] if operation else OperationType.ANY,
        permission=PermissionType.ANY,
    )


def _rows(bindings: list[AclBinding]) -> list[dict[str, str]]:
    return [
        {
            "principal": str(b.entry.principal),
            "operation": b.entry.operation.name,
            "host": b.entry.host,
            "resource_type": b.resource.type.name,
            "resource_name": b.resource.name,
            "permission": b.entry.permission.name,
        }
        for b in bindings
    ]


def _print(bindings: list[AclBinding], as_json: bool, title: str) -> None:
    rows = _rows(bindings)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("principal", "operation", "host", "resource_type", "resource_name", "permission"):
        table.add_column(column.replace("_", " "))
    for row in rows:
        table.add_row(*row.values())
    Console().print(table)


@click.group()
def acl() -> None:
    """Grant, list and revoke access control lists."""


@acl.command("add")
@bootstrap_option
@client_config_option
@click.option("--principal", required=True, help="Type:name, e.g. User:alice ('*' for everyone).")
@click.option("--operation", required=True, type=click.Choice(_OPERATIONS, case_sensitive=False))
@click.option("--host", "acl_host", default=WILDCARD, show_default=True, help="Client host ('*' for any).")
@click.option("--resource-type", required=True, type=click.Choice(_RESOURCE_TYPES, case_sensitive=False))
@click.option("--resource-name", help="A database name, or database.table for a table (not for CLUSTER).")
def add(
    bootstrap: str,
    config_pairs: tuple[str, ...],
    principal: str,
    operation: str,
    acl_host: str,
    resource_type: str,
    resource_name: str | None,
) -> None:
    """Allow PRINCIPAL to do OPERATION on a resource."""
    try:
        binding = AclBinding(
            Resource.of(ResourceType[resource_type.upper()], resource_name),
            AclEntry(_principal(principal), acl_host, OperationType[operation.upper()]),
        )
        binding.validate()
    except FlussError as e:
        raise click.BadParameter(e.message) from None

    async def body(connection: Any) -> None:
        await connection.get_admin().create_acls([binding])

    run_with_connection(client_properties(bootstrap, config_pairs), body)
    _print([binding], False, "added")


@acl.command("list")
@bootstrap_option
@client_config_option
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_acls(
    bootstrap: str,
    config_pairs: tuple[str, ...],
    principal: str | None,
    operation: str | None,
    acl_host: str | None,
    resource_type: str | None,
    resource_name: str | None,
    as_json: bool,
) -> None:
    """List the ACLs matching the filters (all by default) that you may describe."""
    acl_filter = _acl_filter(principal, operation, acl_host, resource_type, resource_name)

    async def body(connection: Any) -> list[AclBinding]:
        return await connection.get_admin().list_acls(acl_filter)

    _print(run_with_connection(client_properties(bootstrap, config_pairs), body), as_json, "ACLs")


@acl.command("remove")
@bootstrap_option
@client_config_option
@_filter_options
def remove(
    bootstrap: str,
    config_pairs: tuple[str, ...],
    principal: str | None,
    operation: str | None,
    acl_host: str | None,
    resource_type: str | None,
    resource_name: str | None,
) -> None:
    """Revoke the ACLs matching the filters (give at least a principal or a resource)."""
    if not principal and not resource_type:
        raise click.UsageError(
            "give --principal or --resource-type (with --resource-name) to say what to remove"
        )
    acl_filter = _acl_filter(principal, operation, acl_host, resource_type, resource_name)

    async def body(connection: Any) -> list[AclBinding]:
        return await connection.get_admin().drop_acls([acl_filter])

    removed = run_with_connection(client_properties(bootstrap, config_pairs), body)
    _print(removed, False, f"removed {len(removed)}")
