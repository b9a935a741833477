"""What the coordinator checks and fills in when a table is created.

`parse_table_descriptor` reads CreateTable's table_json, `apply_table_defaults` fills what the
client may leave out (bucket count, replication factor, kv format version...), and
`validate_table_descriptor` rejects what Fluss rejects, with Fluss's error codes: unknown or
malformed ``table.*`` options and inconsistent option combinations → InvalidConfigError (39);
bad keys, types or bucket counts → InvalidTableError (15) / TooManyBucketsError (49).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from strom.common import config as cfg
from strom.common.aggregation import (
    UNSUPPORTED_AGG_FUNCTIONS,
    AggFunction,
    fold_agg_options,
    is_agg_option,
)
from strom.common.config import (
    AutoPartitionTimeUnit,
    ChangelogImage,
    Configuration,
    DataLakeFormat,
    DeleteBehavior,
    KvFormat,
    LogFormat,
    MergeEngineType,
)
from strom.common.errors import InvalidConfigError, InvalidTableError, TooManyBucketsError
from strom.common.json_limits import check_json_bounds
from strom.common.lake_enablement import cluster_lake_enabled, cluster_lake_format, table_lake_enabled
from strom.common.partition import PARTITION_KEY_SUPPORTED_TYPES, validate_time_format
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import DataType, DataTypeRoot

# Names of the virtual columns Fluss exposes ($changelog / $binlog tables, metadata columns).
SYSTEM_COLUMNS: tuple[str, ...] = (
    "__offset",
    "__timestamp",
    "__bucket",
    "_change_type",
    "_log_offset",
    "_commit_timestamp",
)
KEY_UNSUPPORTED_TYPES: tuple[DataTypeRoot, ...] = (DataTypeRoot.ARRAY, DataTypeRoot.MAP, DataTypeRoot.ROW)
VERSION_COLUMN_TYPES: tuple[DataTypeRoot, ...] = (
    DataTypeRoot.INTEGER,
    DataTypeRoot.BIGINT,
    DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE,
    DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
)
STATISTICS_SUPPORTED_TYPES: tuple[DataTypeRoot, ...] = (
    DataTypeRoot.BOOLEAN,
    DataTypeRoot.TINYINT,
    DataTypeRoot.SMALLINT,
    DataTypeRoot.INTEGER,
    DataTypeRoot.BIGINT,
    DataTypeRoot.FLOAT,
    DataTypeRoot.DOUBLE,
    DataTypeRoot.STRING,
    DataTypeRoot.CHAR,
    DataTypeRoot.DECIMAL,
    DataTypeRoot.DATE,
    DataTypeRoot.TIME_WITHOUT_TIME_ZONE,
    DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE,
    DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
)
DATE_AUTO_PARTITION_TIME_FORMAT = "yyyy-MM-dd"


def _roots_text(roots: tuple[DataTypeRoot, ...]) -> str:
    return "[" + ", ".join(r.value for r in roots) + "]"


# ------------------------------------------------------------------------------------------ parsing


def parse_table_descriptor(table_json: bytes | str) -> TableDescriptor:
    """CreateTable's table_json → descriptor; anything wrong is an InvalidTableError."""
    try:
        check_json_bounds(table_json, "table descriptor")
        obj = json.loads(table_json)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidTableError(f"Failed to parse table descriptor: {e}") from e
    try:
        return TableDescriptor.from_json(obj)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise InvalidTableError(f"Failed to parse table descriptor: {e}") from e


# ------------------------------------------------------------------------------------------ defaults


# Lake formats no Fluss release knows. Fluss clients parse `table.datalake.format` into their own
# enum when they write or look up, and fail on any other value (pyfluss 1.0: "Matching variant not
# found"), so tables of such a cluster are not stamped with it, and may not name it: the cluster's
# `datalake.format` alone decides where they are tiered. Delta buckets and encodes keys as a table
# without a lake format does, so nothing else changes.
CLIENT_UNKNOWN_FORMATS = frozenset({DataLakeFormat.DELTA})


def apply_table_defaults(descriptor: TableDescriptor, server_config: Configuration) -> TableDescriptor:
    """Fill in what the coordinator fills in at CreateTable, before validation.

    - ``bucket_count`` from ``default.bucket.number`` (clients omit it when the user gave none);
    - ``table.replication.factor`` from ``default.replication.factor``;
    - ``table.auto-partition.num-precreate`` = 0 for auto-partitioned tables with several
      partition keys;
    - ``table.datalake.format`` from the cluster's ``datalake.format`` (not ``delta``: see
      `CLIENT_UNKNOWN_FORMATS`);
    - ``table.delete.behavior`` = IGNORE for FIRST_ROW / VERSIONED / AGGREGATION merge engines;
    - ``table.kv.format-version`` = 2 for primary-key tables.

    Raises InvalidTableError when the table enables the lake but the cluster does not, and
    InvalidConfigError for a kv format version newer than this server knows.
    """
    result = descriptor
    if result.bucket_count is None:
        result = result.with_bucket_count(server_config.get(cfg.DEFAULT_BUCKET_NUMBER))

    props = dict(result.properties)
    if cfg.TABLE_REPLICATION_FACTOR.key not in props:
        props[cfg.TABLE_REPLICATION_FACTOR.key] = str(server_config.get(cfg.DEFAULT_REPLICATION_FACTOR))

    original = descriptor.properties
    if (
        len(result.partition_keys) > 1
        and original.get(cfg.TABLE_AUTO_PARTITION_ENABLED.key) == "true"
        and cfg.TABLE_AUTO_PARTITION_NUM_PRECREATE.key not in original
    ):
        # Several partition keys cannot be pre-created: only the time key is known ahead.
        props[cfg.TABLE_AUTO_PARTITION_NUM_PRECREATE.key] = "0"

    cluster_format = cluster_lake_format(server_config)
    if (
        cluster_format is not None
        and cluster_format not in CLIENT_UNKNOWN_FORMATS
        and cfg.TABLE_DATALAKE_FORMAT.key not in original
    ):
        props[cfg.TABLE_DATALAKE_FORMAT.key] = cluster_format.value

    if table_lake_enabled(original) and not cluster_lake_enabled(server_config):
        raise InvalidTableError(
            f"'{cfg.TABLE_DATALAKE_ENABLED.key}' is enabled for the table, but the Fluss cluster "
            "doesn't enable datalake tables."
        )

    table_conf = Configuration(original)
    merge_engine = _option(table_conf, cfg.TABLE_MERGE_ENGINE)
    if (
        merge_engine in (MergeEngineType.FIRST_ROW, MergeEngineType.VERSIONED, MergeEngineType.AGGREGATION)
        and descriptor.has_primary_key
        and not table_conf.contains(cfg.TABLE_DELETE_BEHAVIOR)
    ):
        props[cfg.TABLE_DELETE_BEHAVIOR.key] = DeleteBehavior.IGNORE.value
    if merge_engine is MergeEngineType.AGGREGATION:
        result = _fold_aggregation_options(result, props)

    if result.has_primary_key:
        version = _option(Configuration(props), cfg.TABLE_KV_FORMAT_VERSION)
        if version is None:
            props[cfg.TABLE_KV_FORMAT_VERSION.key] = str(cfg.CURRENT_KV_FORMAT_VERSION)
        elif version > cfg.CURRENT_KV_FORMAT_VERSION:
            raise InvalidConfigError(
                f"Unsupported kv format version {version}. The maximum supported version is "
                f"{cfg.CURRENT_KV_FORMAT_VERSION}."
            )
    return result.with_properties(props)


def _fold_aggregation_options(descriptor: TableDescriptor, props: dict[str, str]) -> TableDescriptor:
    """Move ``fields.<col>.agg`` options (given as properties or custom properties) into the schema.

    The options stay in the custom properties, where Fluss keeps connector options, so the table
    shows them back; `props` loses them so that only ``table.*`` options remain.
    """
    custom = dict(descriptor.custom_properties)
    for key in [k for k in props if is_agg_option(k)]:
        custom[key] = props.pop(key)
    try:
        schema = fold_agg_options(descriptor.schema, custom)
    except ValueError as e:
        raise InvalidConfigError(str(e)) from e
    return replace(descriptor, schema=schema, custom_properties=custom)


def _option(conf: Configuration, option: cfg.ConfigOption[Any]) -> Any:
    """A table option's value; a malformed value is an InvalidConfigError naming the option."""
    try:
        return conf.get(option)
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value for config '{option.key}'. Reason: {e}") from e


# ------------------------------------------------------------------------------------------ validation


def validate_table_descriptor(
    descriptor: TableDescriptor,
    max_bucket_num: int,
    cluster_datalake_format: DataLakeFormat | None = None,
) -> None:
    """Reject a (defaults-applied) descriptor the way Fluss's coordinator does at CreateTable."""
    schema = descriptor.schema
    has_pk = descriptor.has_primary_key
    conf = Configuration(descriptor.properties)

    for key in conf:
        option = cfg.TABLE_OPTIONS.get(key)
        if option is None:
            if cfg.is_table_storage_option(key):
                raise InvalidConfigError(
                    f"'{key}' is not a recognized Fluss table property in the current cluster version. "
                    "You may be using an older Fluss cluster that does not support this property."
                )
            raise InvalidConfigError(
                f"'{key}' is not a Fluss table property. Please use '.customProperty(..)' to set custom "
                "properties."
            )
        _option(conf, option)

    _check_columns(schema)
    _check_distribution(descriptor, max_bucket_num)
    _check_primary_key(schema)
    _check_replication_factor(conf)
    _check_log_format(conf, has_pk)
    _check_arrow_compression(conf)
    _check_merge_engine(conf, has_pk, schema)
    _check_auto_increment(conf, schema)
    _check_delete_behavior(conf, has_pk)
    _check_tiered_log(conf)
    _check_historical_partition(descriptor, conf)
    _check_partition(conf, descriptor.partition_keys, schema)
    _check_system_columns(schema)
    _check_statistics(descriptor, conf)
    _check_lake_format_matches_cluster(conf, cluster_datalake_format)


def _check_columns(schema: Schema) -> None:
    if not schema.columns:
        raise InvalidTableError("The table schema must have at least one column.")
    if any(not name.strip() for name in schema.column_names):
        raise InvalidTableError("Column names must not be empty.")


def _column_type(schema: Schema, name: str) -> DataType:
    return schema.columns[schema.column_index(name)].data_type


def _check_distribution(descriptor: TableDescriptor, max_bucket_num: int) -> None:
    count = descriptor.bucket_count
    if count is None:
        raise InvalidTableError("Bucket number must be set.")
    if count < 1:
        raise InvalidTableError(f"Number of buckets must be larger than 0, but is {count}.")
    if count > max_bucket_num:
        raise TooManyBucketsError(
            f"Bucket count {count} exceeds the maximum limit {max_bucket_num} for a non-partitioned table "
            "or partition."
        )
    for key in descriptor.bucket_keys:
        key_type = _column_type(descriptor.schema, key)
        if key_type.root in KEY_UNSUPPORTED_TYPES:
            raise InvalidTableError(
                f"Bucket key column '{key}' has unsupported data type {key_type}. Currently, bucket key "
                f"column does not support types: {_roots_text(KEY_UNSUPPORTED_TYPES)}."
            )


def _check_primary_key(schema: Schema) -> None:
    for key in schema.primary_key or []:
        key_type = _column_type(schema, key)
        if key_type.root in KEY_UNSUPPORTED_TYPES:
            raise InvalidTableError(
                f"Primary key column '{key}' has unsupported data type {key_type}. Currently, primary key "
                f"column does not support types: {_roots_text(KEY_UNSUPPORTED_TYPES)}."
            )


def _check_replication_factor(conf: Configuration) -> None:
    key = cfg.TABLE_REPLICATION_FACTOR.key
    if not conf.contains(cfg.TABLE_REPLICATION_FACTOR):
        raise InvalidConfigError(f"Missing required table property '{key}'.")
    if _option(conf, cfg.TABLE_REPLICATION_FACTOR) <= 0:
        raise InvalidConfigError(f"'{key}' must be greater than 0.")


def _check_log_format(conf: Configuration, has_pk: bool) -> None:
    kv_format = _option(conf, cfg.TABLE_KV_FORMAT)
    log_format = _option(conf, cfg.TABLE_LOG_FORMAT)
    if (
        has_pk
        and kv_format is KvFormat.COMPACTED
        and log_format not in (LogFormat.ARROW, LogFormat.COMPACTED)
    ):
        raise InvalidConfigError(
            "Currently, Primary Key Table supports ARROW or COMPACTED log format when kv format is COMPACTED."
        )


def _check_arrow_compression(conf: Configuration) -> None:
    if conf.contains(cfg.TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL):
        level = _option(conf, cfg.TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL)
        if not 1 <= level <= 22:
            raise InvalidConfigError(
                f"Invalid ZSTD compression level: {level}. Expected a value between 1 and 22."
            )


def _check_merge_engine(conf: Configuration, has_pk: bool, schema: Schema) -> None:
    merge_engine = _option(conf, cfg.TABLE_MERGE_ENGINE)
    if merge_engine is not MergeEngineType.AGGREGATION:
        for column in schema.columns:
            if column.agg_function is not None:
                raise InvalidConfigError(
                    "Aggregation function is only supported for aggregation merge engine table, but column "
                    f"'{column.name}' has aggregation function '{column.agg_function.get('type')}'."
                )
    if merge_engine is None:
        return
    if not has_pk:
        raise InvalidConfigError("Merge engine is only supported in primary key table.")
    if merge_engine is MergeEngineType.VERSIONED:
        key = cfg.TABLE_MERGE_ENGINE_VERSION_COLUMN.key
        version_column = _option(conf, cfg.TABLE_MERGE_ENGINE_VERSION_COLUMN)
        if version_column is None:
            raise InvalidConfigError(f"'{key}' must be set for versioned merge engine.")
        index = schema.column_index(version_column)
        if index < 0:
            raise InvalidConfigError(
                f"The version column '{version_column}' for versioned merge engine doesn't exist in schema."
            )
        column_type = schema.columns[index].data_type
        if column_type.root not in VERSION_COLUMN_TYPES:
            raise InvalidConfigError(
                f"The version column '{version_column}' for versioned merge engine must be one type of "
                f"[INT, BIGINT, TIMESTAMP, TIMESTAMP_LTZ], but got {column_type}."
            )
    elif merge_engine is MergeEngineType.AGGREGATION:
        if _option(conf, cfg.TABLE_CHANGELOG_IMAGE) is ChangelogImage.WAL:
            raise InvalidConfigError(
                "Table with 'AGGREGATION' merge engine does not support 'WAL' changelog image mode. "
                "Aggregation merge engine tables require FULL changelog image mode for correct UNDO "
                f"recovery. Please set '{cfg.TABLE_CHANGELOG_IMAGE.key}' to 'FULL' or remove the setting."
            )
        _check_agg_functions(schema)


def _check_auto_increment(conf: Configuration, schema: Schema) -> None:
    columns = schema.auto_increment_columns
    if len(columns) > 1:
        raise InvalidTableError(
            f"Only support one auto increment column for a table, but got {len(columns)}: {columns}."
        )
    if _option(conf, cfg.TABLE_AUTO_INCREMENT_CACHE_SIZE) <= 0:
        raise InvalidConfigError(f"'{cfg.TABLE_AUTO_INCREMENT_CACHE_SIZE.key}' must be greater than 0.")


def _check_agg_functions(schema: Schema) -> None:
    pk = set(schema.primary_key or ())
    for column in schema.columns:
        if column.name in pk or column.agg_function is None:
            continue
        try:
            function = AggFunction.from_json(column.name, column.agg_function)
            function.check(column.name, column.data_type)
        except ValueError as e:
            raise InvalidConfigError(str(e)) from e
        if function.type in UNSUPPORTED_AGG_FUNCTIONS:
            raise InvalidConfigError(
                f"Invalid aggregation function for column '{column.name}': Strom does not support the "
                f"'{function.type}' aggregation function yet."
            )


def _check_delete_behavior(conf: Configuration, has_pk: bool) -> None:
    behavior = _option(conf, cfg.TABLE_DELETE_BEHAVIOR) if conf.contains(cfg.TABLE_DELETE_BEHAVIOR) else None
    if not has_pk and behavior is not None:
        raise InvalidConfigError(
            f"The '{cfg.TABLE_DELETE_BEHAVIOR.key}' configuration is only supported for primary key tables."
        )
    merge_engine = _option(conf, cfg.TABLE_MERGE_ENGINE)
    if (
        merge_engine in (MergeEngineType.FIRST_ROW, MergeEngineType.VERSIONED)
        and behavior is DeleteBehavior.ALLOW
    ):
        # AGGREGATION may allow deletes (they remove the whole row); these two cannot.
        raise InvalidConfigError(
            f"Table with '{merge_engine.value}' merge engine does not support delete operations. The "
            f"'{cfg.TABLE_DELETE_BEHAVIOR.key}' config must be set to 'ignore' or 'disable', but got 'allow'."
        )


def _check_tiered_log(conf: Configuration) -> None:
    if _option(conf, cfg.TABLE_TIERED_LOG_LOCAL_SEGMENTS) <= 0:
        raise InvalidConfigError(f"'{cfg.TABLE_TIERED_LOG_LOCAL_SEGMENTS.key}' must be greater than 0.")
    if not conf.contains(cfg.TABLE_LOG_LOCAL_TTL):
        return
    local_ttl: timedelta = _option(conf, cfg.TABLE_LOG_LOCAL_TTL)
    ttl: timedelta = _option(conf, cfg.TABLE_LOG_TTL)
    zero = timedelta(0)
    if local_ttl > zero and ttl > zero and local_ttl > ttl:
        raise InvalidConfigError(
            f"'{cfg.TABLE_LOG_LOCAL_TTL.key}' must be less than or equal to '{cfg.TABLE_LOG_TTL.key}'."
        )


def _check_historical_partition(descriptor: TableDescriptor, conf: Configuration) -> None:
    if not _option(conf, cfg.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED):
        return
    unmet: list[str] = []
    if not _option(conf, cfg.TABLE_AUTO_PARTITION_ENABLED):
        unmet.append(f"'{cfg.TABLE_AUTO_PARTITION_ENABLED.key}' must be set to true")
    if not _option(conf, cfg.TABLE_DATALAKE_ENABLED):
        unmet.append(f"'{cfg.TABLE_DATALAKE_ENABLED.key}' must be set to true")
    lake_format = _option(conf, cfg.TABLE_DATALAKE_FORMAT)
    format_key = cfg.TABLE_DATALAKE_FORMAT.key
    if lake_format is None:
        unmet.append(f"'{format_key}' must be set to 'paimon' (currently not set)")
    elif lake_format is not DataLakeFormat.PAIMON:
        unmet.append(f"'{format_key}' must be set to 'paimon' (currently '{lake_format.value}')")
    if not descriptor.has_primary_key:
        unmet.append("the table must define a primary key")
    if len(descriptor.partition_keys) != 1:
        unmet.append(
            f"the table must define exactly one partition key (found {len(descriptor.partition_keys)})"
        )
    if unmet:
        raise InvalidConfigError(
            f"'{cfg.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED.key}' has unmet requirements: "
            f"{'; '.join(unmet)}."
        )


def _check_partition(conf: Configuration, partition_keys: list[str], schema: Schema) -> None:
    enabled = bool(_option(conf, cfg.TABLE_AUTO_PARTITION_ENABLED))
    if not partition_keys:
        if enabled:
            raise InvalidConfigError(
                "Currently, auto partition is only supported for partitioned table, please set table "
                f"property '{cfg.TABLE_AUTO_PARTITION_ENABLED.key}' to false."
            )
        return
    for key in partition_keys:
        key_type = _column_type(schema, key)
        if key_type.root not in PARTITION_KEY_SUPPORTED_TYPES:
            raise InvalidTableError(
                "Currently, partitioned table supported partition key type are "
                f"{_roots_text(PARTITION_KEY_SUPPORTED_TYPES)}, but got partition key '{key}' with data "
                f"type {key_type}."
            )
    unit: AutoPartitionTimeUnit = _option(conf, cfg.TABLE_AUTO_PARTITION_TIME_UNIT)
    time_format: str | None = _option(conf, cfg.TABLE_AUTO_PARTITION_TIME_FORMAT)
    if time_format is not None:
        try:
            validate_time_format(time_format, unit)
        except ValueError as e:
            raise InvalidTableError(
                f"Invalid table property '{cfg.TABLE_AUTO_PARTITION_TIME_FORMAT.key}': {e}"
            ) from e
    if not enabled:
        return
    auto_key: str | None = _option(conf, cfg.TABLE_AUTO_PARTITION_KEY)
    if auto_key is not None and not auto_key.strip():
        auto_key = None
    if len(partition_keys) > 1:
        if auto_key is None:
            raise InvalidTableError(
                "Currently, auto partitioned table must set one auto partition key when it has multiple "
                f"partition keys. Please set table property '{cfg.TABLE_AUTO_PARTITION_KEY.key}'."
            )
        if auto_key not in partition_keys:
            raise InvalidTableError(
                "The specified key for auto partitioned table is not a partition key. Your key "
                f"'{auto_key}' is not in key list {partition_keys}"
            )
        precreate = _option(conf, cfg.TABLE_AUTO_PARTITION_NUM_PRECREATE)
        if precreate > 0:
            raise InvalidTableError(
                "For a partitioned table with multiple partition keys, auto pre-create is unsupported and "
                f"this value must be set to 0, but is {precreate}"
            )
    key = auto_key if auto_key is not None else partition_keys[0]
    if key not in schema.column_names:
        raise InvalidTableError(f"Auto partition key '{key}' does not exist in the schema.")
    if _column_type(schema, key).root is DataTypeRoot.DATE:
        # A DATE key holds days: only daily partitions named like dates fit it.
        if unit is not AutoPartitionTimeUnit.DAY:
            raise InvalidTableError(
                f"Table property '{cfg.TABLE_AUTO_PARTITION_TIME_UNIT.key}' must be 'DAY' when auto "
                f"partition key '{key}' has DATE type."
            )
        if time_format != DATE_AUTO_PARTITION_TIME_FORMAT:
            raise InvalidTableError(
                f"Table property '{cfg.TABLE_AUTO_PARTITION_TIME_FORMAT.key}' must be "
                f"'{DATE_AUTO_PARTITION_TIME_FORMAT}' when auto partition key '{key}' has DATE type."
            )


def _check_system_columns(schema: Schema) -> None:
    reserved = [n for n in schema.column_names if n in SYSTEM_COLUMNS]
    if reserved:
        raise InvalidTableError(
            f"{', '.join(reserved)} cannot be used as column names, because they are reserved system columns "
            "in Fluss. Please use other names for these columns. The reserved system columns are: "
            f"{', '.join(SYSTEM_COLUMNS)}"
        )


def _check_statistics(descriptor: TableDescriptor, conf: Configuration) -> None:
    value = descriptor.properties.get(cfg.TABLE_STATISTICS_COLUMNS.key)
    if value is None:
        return
    if descriptor.has_primary_key:
        raise InvalidConfigError(
            "Statistics columns are not supported for primary key tables. Please remove the "
            f"'{cfg.TABLE_STATISTICS_COLUMNS.key}' property."
        )
    if value.strip() == "*":
        return
    columns = [c.strip() for c in value.split(",") if c.strip()]
    if not columns:
        raise InvalidConfigError(
            "Statistics columns configuration cannot be empty. Use '*' to collect statistics for all "
            "supported columns, or remove the property to disable statistics collection."
        )
    schema = descriptor.schema
    for name in columns:
        index = schema.column_index(name)
        if index < 0:
            raise InvalidConfigError(
                f"Column '{name}' specified in statistics collection does not exist in table schema"
            )
        column_type = schema.columns[index].data_type
        if column_type.root not in STATISTICS_SUPPORTED_TYPES:
            raise InvalidConfigError(
                f"Column '{name}' of type '{column_type}' is not supported for statistics collection. "
                "Supported types are: BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT, DOUBLE, STRING, "
                "CHAR, DECIMAL, DATE, TIME, TIMESTAMP, and TIMESTAMP_LTZ."
            )


def _check_lake_format_matches_cluster(conf: Configuration, cluster_format: DataLakeFormat | None) -> None:
    table_format = _option(conf, cfg.TABLE_DATALAKE_FORMAT)
    if table_format in CLIENT_UNKNOWN_FORMATS:
        raise InvalidConfigError(
            f"'{cfg.TABLE_DATALAKE_FORMAT.key}' cannot be '{table_format.value}': Fluss clients refuse to "
            f"write to or look up tables that name it. Leave it unset: a cluster whose "
            f"'{cfg.DATALAKE_FORMAT.key}' is '{table_format.value}' tiers lake-enabled tables there."
        )
    if cluster_format is None or not _option(conf, cfg.TABLE_DATALAKE_ENABLED):
        return
    if table_format is not None and table_format is not cluster_format:
        raise InvalidConfigError(
            f"'{cfg.TABLE_DATALAKE_FORMAT.key}' ('{table_format.value}') must match cluster "
            f"'{cfg.DATALAKE_FORMAT.key}' ('{cluster_format.value}') when "
            f"'{cfg.TABLE_DATALAKE_ENABLED.key}' is enabled."
        )
