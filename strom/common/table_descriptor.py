"""What a table (or database) is: its descriptor as clients send it and as it is stored.

`TableDescriptor.to_json` / `from_json` produce and read the ``table_json`` of CreateTable,
GetTableInfo and Metadata exactly as Fluss writes it::

    {"version": 1, "schema": {...}, "comment"?: "...", "partition_key": [...],
     "bucket_key": [...], "bucket_count"?: n, "properties": {...}, "custom_properties": {...}}

``bucket_key``/``bucket_count`` appear only when the table has a distribution (a bucket count,
bucket keys, or a primary key). `TableInfo` is a created table: descriptor plus id, schema id and
times. `DatabaseDescriptor` / `DatabaseInfo` are the same for databases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from strom.common import config as cfg
from strom.common.config import (
    ArrowCompressionType,
    ChangelogImage,
    Configuration,
    DataLakeFormat,
    DeleteBehavior,
    KvFormat,
    LogFormat,
    MergeEngineType,
)
from strom.common.json_limits import json_int
from strom.common.lake_enablement import table_lake_enabled
from strom.common.schema import Schema
from strom.common.table_path import TablePath

TABLE_JSON_VERSION = 1
DATABASE_JSON_VERSION = 1
UNKNOWN_TABLE_ID = -1
# Before table.kv.format-version existed every primary-key table used version 1.
DEFAULT_KV_FORMAT_VERSION = cfg.KV_FORMAT_VERSION_1


def _as_text(value: Any) -> str:
    """Jackson's JsonNode.asText() for property values that arrive as non-strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _properties_from_json(obj: Any, name: str) -> dict[str, str]:
    if obj is None:
        raise ValueError(f"table JSON has no '{name}'")
    if not isinstance(obj, dict):
        raise ValueError(f"'{name}' must be a JSON object")
    return {str(k): _as_text(v) for k, v in obj.items()}


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class TableDescriptor:
    """Schema, partitioning, distribution, properties (``table.*``) and custom properties.

    Construction normalizes the distribution like Fluss: a primary-key table without bucket keys
    gets the default ones (primary key minus partition keys). Inconsistent keys raise ValueError.
    """

    schema: Schema
    partition_keys: list[str] = field(default_factory=list)
    bucket_keys: list[str] = field(default_factory=list)
    bucket_count: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    custom_properties: dict[str, str] = field(default_factory=dict)
    comment: str | None = None

    def __post_init__(self) -> None:
        partition_keys = list(self.partition_keys)
        bucket_keys = list(self.bucket_keys)
        schema = self.schema
        overlap = [k for k in bucket_keys if k in partition_keys]
        if overlap:
            raise ValueError(
                f"Bucket key {bucket_keys} shouldn't include any column in partition keys {partition_keys}."
            )
        pk = schema.primary_key
        columns = set(schema.column_names)
        if pk is not None:
            if not bucket_keys:
                bucket_keys = _default_bucket_keys(pk, partition_keys)
            elif not set(bucket_keys) <= set(pk):
                raise ValueError(
                    "Bucket keys must be a subset of primary keys excluding partition keys for "
                    f"primary-key tables. The primary keys are {pk}, the partition keys are "
                    f"{partition_keys}, but the user-defined bucket keys are {bucket_keys}."
                )
            for key in partition_keys:
                if key not in pk:
                    raise ValueError(
                        f"Partitioned Primary Key Table requires partition key {partition_keys} is a "
                        f"subset of the primary key {pk}."
                    )
        else:
            for key in partition_keys:
                if key not in columns:
                    raise ValueError(f"Partition key '{key}' does not exist in the schema.")
        for key in bucket_keys:
            if key not in columns:
                raise ValueError(f"Bucket key '{key}' does not exist in the schema.")
        object.__setattr__(self, "partition_keys", partition_keys)
        object.__setattr__(self, "bucket_keys", bucket_keys)
        object.__setattr__(self, "properties", {str(k): str(v) for k, v in self.properties.items()})
        object.__setattr__(
            self, "custom_properties", {str(k): str(v) for k, v in self.custom_properties.items()}
        )

    # ------------------------------------------------------------------ facts

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_keys)

    @property
    def has_primary_key(self) -> bool:
        return self.schema.primary_key is not None

    @property
    def has_distribution(self) -> bool:
        return self.bucket_count is not None or bool(self.bucket_keys) or self.has_primary_key

    def default_bucket_keys(self) -> list[str]:
        """Primary key minus partition keys for PK tables; none for log tables."""
        if self.schema.primary_key is None:
            return []
        return _default_bucket_keys(self.schema.primary_key, self.partition_keys)

    def is_default_bucket_key(self) -> bool:
        return self.bucket_keys == self.default_bucket_keys()

    @property
    def table_config(self) -> Configuration:
        return Configuration(self.properties)

    def replication_factor(self) -> int:
        value = self.table_config.get(cfg.TABLE_REPLICATION_FACTOR)
        if value is None:
            raise ValueError(f"{cfg.TABLE_REPLICATION_FACTOR.key} is not set.")
        return value

    # ------------------------------------------------------------------ copies

    def with_bucket_count(self, bucket_count: int) -> TableDescriptor:
        return replace(self, bucket_count=bucket_count)

    def with_properties(
        self, properties: dict[str, str], custom_properties: dict[str, str] | None = None
    ) -> TableDescriptor:
        return replace(
            self,
            properties=dict(properties),
            custom_properties=dict(
                self.custom_properties if custom_properties is None else custom_properties
            ),
        )

    def with_property(self, key: str, value: str) -> TableDescriptor:
        return self.with_properties({**self.properties, key: value})

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"version": TABLE_JSON_VERSION, "schema": self.schema.to_json()}
        if self.comment is not None:
            obj["comment"] = self.comment
        obj["partition_key"] = list(self.partition_keys)
        if self.has_distribution:
            obj["bucket_key"] = list(self.bucket_keys)
            if self.bucket_count is not None:
                obj["bucket_count"] = self.bucket_count
        obj["properties"] = dict(self.properties)
        obj["custom_properties"] = dict(self.custom_properties)
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TableDescriptor:
        """Read a table_json object; malformed or inconsistent input raises ValueError."""
        if not isinstance(obj, dict):
            raise ValueError("table JSON must be an object")
        if "schema" not in obj:
            raise ValueError("table JSON has no 'schema'")
        schema = Schema.from_json(obj["schema"])
        if "partition_key" not in obj:
            raise ValueError("table JSON has no 'partition_key'")
        bucket_count = obj.get("bucket_count")
        comment = obj.get("comment")
        return cls(
            schema=schema,
            partition_keys=[str(k) for k in obj["partition_key"]],
            bucket_keys=[str(k) for k in obj.get("bucket_key") or []],
            bucket_count=None if bucket_count is None else json_int(bucket_count, "bucket_count"),
            properties=_properties_from_json(obj.get("properties"), "properties"),
            custom_properties=_properties_from_json(obj.get("custom_properties"), "custom_properties"),
            comment=None if comment is None else _as_text(comment),
        )

    def to_json_bytes(self) -> bytes:
        return _dumps(self.to_json())

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> TableDescriptor:
        return cls.from_json(json.loads(data))


def _default_bucket_keys(primary_key: Sequence[str], partition_keys: Sequence[str]) -> list[str]:
    keys = [k for k in primary_key if k not in partition_keys]
    if not keys:
        raise ValueError(
            f"Primary Key constraint {list(primary_key)} should not be same with partition fields "
            f"{list(partition_keys)}."
        )
    return keys


@dataclass(frozen=True)
class TableInfo:
    """A created table: its identity, current schema id, descriptor (with defaults applied) and times."""

    table_path: TablePath
    table_id: int
    schema_id: int
    descriptor: TableDescriptor
    created_time: int  # epoch milliseconds
    modified_time: int  # epoch milliseconds
    remote_data_dir: str | None = None

    def __post_init__(self) -> None:
        if self.descriptor.bucket_count is None:
            raise ValueError("Bucket count is required for creating table info.")

    # ------------------------------------------------------------------ shape

    @property
    def schema(self) -> Schema:
        return self.descriptor.schema

    @property
    def bucket_count(self) -> int:
        count = self.descriptor.bucket_count
        assert count is not None  # checked in __post_init__
        return count

    @property
    def bucket_keys(self) -> list[str]:
        return self.descriptor.bucket_keys

    @property
    def has_bucket_key(self) -> bool:
        return bool(self.descriptor.bucket_keys)

    @property
    def partition_keys(self) -> list[str]:
        return self.descriptor.partition_keys

    @property
    def is_partitioned(self) -> bool:
        return self.descriptor.is_partitioned

    @property
    def primary_key(self) -> list[str]:
        return self.schema.primary_key_names

    @property
    def has_primary_key(self) -> bool:
        return self.descriptor.has_primary_key

    @property
    def physical_primary_key(self) -> list[str]:
        """The primary key without partition keys: what identifies a row inside one partition."""
        return [k for k in self.primary_key if k not in self.partition_keys]

    @property
    def comment(self) -> str | None:
        return self.descriptor.comment

    @property
    def properties(self) -> Configuration:
        return self.descriptor.table_config

    @property
    def custom_properties(self) -> dict[str, str]:
        return self.descriptor.custom_properties

    # ------------------------------------------------------------------ table options

    @property
    def replication_factor(self) -> int:
        return self.descriptor.replication_factor()

    @property
    def log_format(self) -> LogFormat:
        return self.properties.get(cfg.TABLE_LOG_FORMAT)

    @property
    def kv_format(self) -> KvFormat:
        return self.properties.get(cfg.TABLE_KV_FORMAT)

    @property
    def kv_format_version(self) -> int:
        value = self.properties.get(cfg.TABLE_KV_FORMAT_VERSION)
        return DEFAULT_KV_FORMAT_VERSION if value is None else value

    @property
    def arrow_compression_type(self) -> ArrowCompressionType:
        return self.properties.get(cfg.TABLE_LOG_ARROW_COMPRESSION_TYPE)

    @property
    def arrow_compression_zstd_level(self) -> int:
        return self.properties.get(cfg.TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL)

    @property
    def merge_engine(self) -> MergeEngineType | None:
        return self.properties.get(cfg.TABLE_MERGE_ENGINE)

    @property
    def merge_engine_version_column(self) -> str | None:
        return self.properties.get(cfg.TABLE_MERGE_ENGINE_VERSION_COLUMN)

    @property
    def delete_behavior(self) -> DeleteBehavior:
        return self.properties.get(cfg.TABLE_DELETE_BEHAVIOR)

    @property
    def changelog_image(self) -> ChangelogImage:
        return self.properties.get(cfg.TABLE_CHANGELOG_IMAGE)

    @property
    def log_ttl(self) -> timedelta:
        return self.properties.get(cfg.TABLE_LOG_TTL)

    @property
    def log_local_ttl(self) -> timedelta:
        """`table.log.local-ttl`, inheriting `table.log.ttl` when unset."""
        local: timedelta | None = self.properties.get(cfg.TABLE_LOG_LOCAL_TTL)
        return self.log_ttl if local is None else local

    @property
    def tiered_log_local_segments(self) -> int:
        return self.properties.get(cfg.TABLE_TIERED_LOG_LOCAL_SEGMENTS)

    @property
    def is_auto_partitioned(self) -> bool:
        return self.is_partitioned and bool(self.properties.get(cfg.TABLE_AUTO_PARTITION_ENABLED))

    @property
    def datalake_enabled(self) -> bool:
        return table_lake_enabled(self.properties)

    @property
    def datalake_format(self) -> DataLakeFormat | None:
        return self.properties.get(cfg.TABLE_DATALAKE_FORMAT)

    @property
    def datalake_freshness(self) -> timedelta:
        return self.properties.get(cfg.TABLE_DATALAKE_FRESHNESS)

    @property
    def statistics_enabled(self) -> bool:
        return self.properties.contains(cfg.TABLE_STATISTICS_COLUMNS)

    def to_table_json(self) -> dict[str, Any]:
        return self.descriptor.to_json()

    def to_table_json_bytes(self) -> bytes:
        return self.descriptor.to_json_bytes()


@dataclass(frozen=True)
class DatabaseDescriptor:
    comment: str | None = None
    custom_properties: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"version": DATABASE_JSON_VERSION}
        if self.comment is not None:
            obj["comment"] = self.comment
        obj["custom_properties"] = dict(self.custom_properties)
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DatabaseDescriptor:
        if not isinstance(obj, dict):
            raise ValueError("database JSON must be an object")
        comment = obj.get("comment")
        return cls(
            comment=None if comment is None else _as_text(comment),
            custom_properties=_properties_from_json(obj.get("custom_properties", {}), "custom_properties"),
        )

    def to_json_bytes(self) -> bytes:
        return _dumps(self.to_json())

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> DatabaseDescriptor:
        return cls.from_json(json.loads(data))


@dataclass(frozen=True)
class DatabaseInfo:
    database_name: str
    descriptor: DatabaseDescriptor
    created_time: int  # epoch milliseconds
    modified_time: int  # epoch milliseconds
