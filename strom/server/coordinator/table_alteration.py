"""AlterTable (1044): Fluss's table changes, validated before anything is stored.

Options: only the ones Fluss lists as alterable may be set or reset (`table.datalake.enabled`,
`table.datalake.freshness`, `table.log.ttl`, ...); `bucket.key` is refused (the table's bucket key is
fixed); setting `bucket.num` alone asks for an online rescale (`rescale.py`), which Fluss lacks; other
keys outside `table.*` are custom properties.
Columns: a nullable column may be added at the end; it gets the next field id and the table a new
schema id (every version stays readable through GetTableSchema). Primary key, bucket key, partition
keys and the types of existing columns never change: ModifyColumn, DropColumn and RenameColumn are
refused with INVALID_ALTER_TABLE and a message that names the rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from strom.common import config as cfg
from strom.common.alter_table import ALTER_CONFIG_DELETE, ALTER_CONFIG_SET, COLUMN_POSITION_LAST
from strom.common.errors import InvalidAlterTableError
from strom.common.rescale import RESERVED_PREFIX
from strom.common.schema import Column, Schema, assign_field_ids
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import DataType
from strom.rpc.gen import fluss_api_pb2 as pb

# Fluss's FlussConfigUtils.ALTERABLE_TABLE_OPTIONS
ALTERABLE_TABLE_OPTIONS: frozenset[str] = frozenset(
    option.key
    for option in (
        cfg.TABLE_DATALAKE_ENABLED,
        cfg.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED,
        cfg.TABLE_DATALAKE_FRESHNESS,
        cfg.TABLE_DATALAKE_AUTO_COMPACTION,
        # Strom's lifecycle-linked retention options
        cfg.TABLE_DATALAKE_RETENTION_HOLD_MAX_DURATION,
        cfg.TABLE_DATALAKE_REMOTE_LOG_DROP_TIERED,
        cfg.TABLE_LOG_TTL,
        cfg.TABLE_TIERED_LOG_LOCAL_SEGMENTS,
        cfg.TABLE_LOG_LOCAL_TTL,
        cfg.TABLE_AUTO_PARTITION_ENABLED,
        cfg.TABLE_AUTO_PARTITION_NUM_RETENTION,
        cfg.TABLE_AUTO_PARTITION_NUM_PRECREATE,
        cfg.TABLE_STATISTICS_COLUMNS,
        cfg.TABLE_KV_STANDBY_REPLICA_ENABLED,
        # Strom-only: an operator accepts the loss for a bucket waiting for an eligible leader
        cfg.TABLE_UNCLEAN_LEADER_ELECTION_ENABLED,
    )
)


@dataclass(frozen=True, slots=True)
class Alteration:
    """The table after the changes; `schema_changed` says whether it needs a new schema id."""

    descriptor: TableDescriptor
    schema_changed: bool
    # the bucket count asked for with `bucket.num` (None: not asked); `descriptor` keeps the old one
    rescale_to: int | None = None


def alter(table: str, descriptor: TableDescriptor, request: pb.AlterTableRequest) -> Alteration:
    """Apply the request's changes to `descriptor`, or raise InvalidAlterTableError changing nothing."""
    _refuse_column_rewrites(table, descriptor, request)
    schema = descriptor.schema
    log_format = descriptor.table_config.get(cfg.TABLE_LOG_FORMAT)
    if request.add_columns and not descriptor.has_primary_key and log_format is not cfg.LogFormat.ARROW:
        # old batches are read under the new schema by rebuilding their Arrow records
        raise InvalidAlterTableError(
            f"Cannot add columns to table '{table}': its log format is {log_format}, and columns can "
            "only be added to tables with the ARROW log format (or a primary key)."
        )
    for add in request.add_columns:
        schema = _add_column(table, schema, add)
    properties = dict(descriptor.properties)
    custom = dict(descriptor.custom_properties)
    rescale_to = _rescale_to(table, descriptor, request)
    for change in request.config_changes:
        key = change.config_key
        if key == cfg.BUCKET_NUM.key:
            continue
        if key.startswith(RESERVED_PREFIX):
            raise InvalidAlterTableError(
                f"The property '{key}' of table '{table}' is kept by bucket rescales; set 'bucket.num' "
                "instead."
            )
        if key == cfg.BUCKET_KEY.key:
            raise InvalidAlterTableError(
                f"The option '{key}' is not supported to alter yet: table '{table}' keeps the bucket key it "
                "was created with."
            )
        target = properties if cfg.is_table_storage_option(key) else custom
        if target is properties and key not in ALTERABLE_TABLE_OPTIONS:
            raise InvalidAlterTableError(
                f"The following options are not supported to alter yet: '{key}' (alterable table options: "
                f"{', '.join(sorted(ALTERABLE_TABLE_OPTIONS))})."
            )
        if change.op_type == ALTER_CONFIG_SET:
            if not change.HasField("config_value"):
                raise InvalidAlterTableError(f"Setting option '{key}' of table '{table}' needs a value.")
            target[key] = change.config_value
        elif change.op_type == ALTER_CONFIG_DELETE:
            target.pop(key, None)
        else:
            raise InvalidAlterTableError(
                f"Unsupported operation {change.op_type} on option '{key}' (tables take SET and DELETE)."
            )
    if key_standby_changed(request) and not descriptor.has_primary_key:
        raise InvalidAlterTableError(
            f"'{cfg.TABLE_KV_STANDBY_REPLICA_ENABLED.key}' can only be altered on primary key tables."
        )
    altered = replace(descriptor, schema=schema, properties=properties, custom_properties=custom)
    return Alteration(altered, schema is not descriptor.schema, rescale_to)


def _rescale_to(table: str, descriptor: TableDescriptor, request: pb.AlterTableRequest) -> int | None:
    """The new bucket count a request asks for: alone (a rescale seals the table while it moves data,
    so it is not mixed with other changes), as SET of a positive integer; None when it is the same."""
    changes = [c for c in request.config_changes if c.config_key == cfg.BUCKET_NUM.key]
    if not changes:
        return None
    change = changes[-1]
    if change.op_type != ALTER_CONFIG_SET or not change.HasField("config_value"):
        raise InvalidAlterTableError(
            f"'{cfg.BUCKET_NUM.key}' of table '{table}' can only be set to a new bucket count, not reset."
        )
    try:
        count = int(change.config_value)
    except ValueError:
        count = 0
    if count < 1:
        raise InvalidAlterTableError(
            f"'{cfg.BUCKET_NUM.key}' must be a positive integer, got '{change.config_value}'."
        )
    if count == descriptor.bucket_count:
        return None
    if len(request.config_changes) > len(changes) or request.add_columns:
        raise InvalidAlterTableError(
            f"Changing '{cfg.BUCKET_NUM.key}' of table '{table}' rescales it online: alter it alone, not "
            "together with other changes."
        )
    return count


def key_standby_changed(request: pb.AlterTableRequest) -> bool:
    return any(c.config_key == cfg.TABLE_KV_STANDBY_REPLICA_ENABLED.key for c in request.config_changes)


def _key_role(descriptor: TableDescriptor, column: str) -> str | None:
    if column in (descriptor.schema.primary_key or []):
        return "primary key"
    if column in descriptor.partition_keys:
        return "partition key"
    if column in descriptor.bucket_keys:
        return "bucket key"
    return None


def _refuse_column_rewrites(table: str, descriptor: TableDescriptor, request: pb.AlterTableRequest) -> None:
    """Fluss evolves schemas by adding columns only; say which rule a rewrite breaks."""
    names = set(descriptor.schema.column_names)
    rewrites = (
        [("drop", c.column_name) for c in request.drop_columns]
        + [("rename", c.old_column_name) for c in request.rename_columns]
        + [("modify", c.column_name) for c in request.modify_columns]
    )
    for verb, column in rewrites:
        if column not in names:
            raise InvalidAlterTableError(f"Column '{column}' does not exist in table '{table}'.")
        role = _key_role(descriptor, column)
        if role is not None:
            raise InvalidAlterTableError(
                f"Cannot {verb} column '{column}' of table '{table}': it is part of the {role}, and the "
                "primary key, bucket key and partition keys of a table never change."
            )
        if verb == "modify":
            raise InvalidAlterTableError(
                f"Cannot modify column '{column}' of table '{table}': the type of an existing column "
                "never changes (only nullable columns can be added, at the end)."
            )
        raise InvalidAlterTableError(
            f"Cannot {verb} column '{column}' of table '{table}': only adding nullable columns at the "
            "end is supported."
        )


def _add_column(table: str, schema: Schema, add: pb.PbAddColumn) -> Schema:
    name = add.column_name
    if name in schema.column_names:
        raise InvalidAlterTableError(f"Column {name} already exists.")
    if add.column_position_type != COLUMN_POSITION_LAST:
        raise InvalidAlterTableError(
            f"Column '{name}' can only be added at the end of table '{table}' (position LAST)."
        )
    try:
        data_type = DataType.from_json(json.loads(add.data_type_json))
    except (ValueError, TypeError) as e:
        raise InvalidAlterTableError(f"Column '{name}' has an unreadable data type: {e}") from None
    if not data_type.nullable:
        raise InvalidAlterTableError(f"Column {name} must be nullable.")
    agg: dict[str, object] | None = None
    if add.HasField("agg_function_type"):
        agg = {"type": add.agg_function_type}
        if add.agg_function_params:
            agg["parameters"] = {kv.key: kv.value for kv in add.agg_function_params}
    comment = add.comment if add.HasField("comment") else None
    # the new column (and the fields nested in it) take the ids after the highest ever handed out
    (column,), highest = assign_field_ids(
        [Column(name, data_type, comment, agg_function=agg)], schema.highest_field_id
    )
    try:
        evolved = Schema(
            [*schema.columns, column], schema.primary_key, highest, schema.auto_increment_columns
        )
    except ValueError as e:
        raise InvalidAlterTableError(f"Cannot add column '{name}' to table '{table}': {e}") from None
    return evolved
