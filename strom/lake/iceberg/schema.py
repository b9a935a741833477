"""How a Fluss table looks in Iceberg: schema, partition spec, sort order and properties.

Follows Fluss's Iceberg integration (its Iceberg design document and its Iceberg docs):

* Columns keep their names and order; types map as Fluss's FlussDataTypeToIcebergDataType does
  (TINYINT/SMALLINT widen to int, CHAR to string, BINARY/BYTES to binary, TIMESTAMP_LTZ to
  timestamptz). Three required system columns follow: ``__bucket`` int, ``__offset`` long,
  ``__timestamp`` timestamptz. Primary-key columns are the identifier fields.
* Partitioning: identity on each Fluss partition key (string columns only, as in Fluss), then
  ``bucket(n)`` on the single bucket key, or identity on ``__bucket`` for log tables without one.
  Fluss buckets tables of an Iceberg cluster with Iceberg's bucket function, so Fluss bucket N is
  Iceberg bucket N. Several bucket keys cannot be expressed (Iceberg has no multi-argument
  transform yet) and are refused.
* Sort order ``__offset ASC NULLS FIRST``.
* Properties: ``iceberg.x`` table properties become ``x``; all other Fluss properties (and custom
  properties) become ``fluss.<key>``. Primary-key tables are merge-on-read; format version 2.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema as IcebergSchema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform, Transform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from strom.common.errors import InvalidConfigError, InvalidTableError
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType, DataTypeRoot
from strom.lake.system_columns import BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN

__all__ = [
    "BUCKET_COLUMN",
    "OFFSET_COLUMN",
    "SYSTEM_COLUMNS",
    "TIMESTAMP_COLUMN",
    "IcebergLayout",
    "iceberg_layout",
    "iceberg_properties",
    "to_iceberg_type",
]

SYSTEM_COLUMNS: dict[str, IcebergType] = {
    BUCKET_COLUMN: IntegerType(),
    OFFSET_COLUMN: LongType(),
    TIMESTAMP_COLUMN: TimestamptzType(),
}

FLUSS_PROPERTY_PREFIX = "fluss."
ICEBERG_PROPERTY_PREFIX = "iceberg."
FORMAT_VERSION = "2"  # positional delete files are a v2 feature (v3 replaced them with deletion vectors)
_MERGE_ON_READ = {
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
# First id pyiceberg hands to partition fields.
_PARTITION_FIELD_ID_START = 1000

_R = DataTypeRoot
# Types Iceberg's bucket transform accepts (per Fluss's Iceberg design document); others cannot be
# a Fluss bucket key here.
_BUCKETABLE = frozenset(
    {
        _R.TINYINT,
        _R.SMALLINT,
        _R.INTEGER,
        _R.BIGINT,
        _R.DECIMAL,
        _R.DATE,
        _R.TIME_WITHOUT_TIME_ZONE,
        _R.TIMESTAMP_WITHOUT_TIME_ZONE,
        _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
        _R.STRING,
        _R.CHAR,
        _R.BINARY,
        _R.BYTES,
    }
)
_SIMPLE: dict[DataTypeRoot, Callable[[], IcebergType]] = {
    _R.BOOLEAN: BooleanType,
    _R.TINYINT: IntegerType,
    _R.SMALLINT: IntegerType,
    _R.INTEGER: IntegerType,
    _R.BIGINT: LongType,
    _R.FLOAT: FloatType,
    _R.DOUBLE: DoubleType,
    _R.CHAR: StringType,
    _R.STRING: StringType,
    _R.BINARY: BinaryType,
    _R.BYTES: BinaryType,
    _R.DATE: DateType,
    _R.TIME_WITHOUT_TIME_ZONE: TimeType,
    _R.TIMESTAMP_WITHOUT_TIME_ZONE: TimestampType,
    _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE: TimestamptzType,
}


def to_iceberg_type(data_type: DataType, next_id: Callable[[], int]) -> IcebergType:
    """The Iceberg type of a Fluss type; nested fields take ids from `next_id`."""
    root = data_type.root
    simple = _SIMPLE.get(root)
    if simple is not None:
        return simple()
    if root is _R.DECIMAL:
        assert data_type.precision is not None and data_type.scale is not None
        return DecimalType(data_type.precision, data_type.scale)
    if root is _R.ARRAY:
        assert data_type.element_type is not None
        element = data_type.element_type
        return ListType(next_id(), to_iceberg_type(element, next_id), element_required=not element.nullable)
    if root is _R.MAP:
        assert data_type.key_type is not None and data_type.value_type is not None
        key_id, value_id = next_id(), next_id()  # consecutive, as the spec asks
        return MapType(
            key_id,
            to_iceberg_type(data_type.key_type, next_id),
            value_id,
            to_iceberg_type(data_type.value_type, next_id),
            value_required=not data_type.value_type.nullable,
        )
    if root is _R.ROW:
        return StructType(
            *(
                NestedField(
                    next_id(),
                    f.name,
                    to_iceberg_type(f.type, next_id),
                    required=not f.type.nullable,
                    doc=f.description,
                )
                for f in data_type.fields
            )
        )
    raise InvalidTableError(f"Fluss type {data_type} has no Iceberg counterpart.")


@dataclass(frozen=True)
class IcebergLayout:
    """The Iceberg table a Fluss table maps to (ids as we assign them; catalogs may renumber)."""

    schema: IcebergSchema
    spec: PartitionSpec
    sort_order: SortOrder
    properties: dict[str, str]


def iceberg_properties(table_info: TableInfo) -> dict[str, str]:
    """Fluss table and custom properties forwarded to Iceberg, plus what tiering relies on."""
    props: dict[str, str] = {}
    for source in (table_info.descriptor.properties, table_info.custom_properties):
        for key, value in source.items():
            if key.startswith(ICEBERG_PROPERTY_PREFIX):
                props[key[len(ICEBERG_PROPERTY_PREFIX) :]] = value
            else:
                props[FLUSS_PROPERTY_PREFIX + key] = value
    version = props.get("format-version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise InvalidConfigError(
            f"iceberg.format-version={version} is not supported: Strom writes positional delete "
            f"files, which need Iceberg format version {FORMAT_VERSION}."
        )
    props["format-version"] = FORMAT_VERSION
    if table_info.has_primary_key:
        # The writer only produces merge-on-read deletes, so these are not the user's choice.
        props.update(_MERGE_ON_READ)
    return props


def _check_columns(table_info: TableInfo) -> None:
    for name in table_info.schema.column_names:
        if name in SYSTEM_COLUMNS:
            raise InvalidTableError(f"Column '{name}' conflicts with a reserved system column name.")
    bucket_keys = table_info.bucket_keys
    if len(bucket_keys) > 1:
        raise InvalidTableError(
            f"Iceberg format supports at most one bucket key, but got: {bucket_keys}. Iceberg has no "
            "multi-argument bucket transform yet, so the Fluss buckets could not be mirrored."
        )
    if table_info.has_primary_key and not bucket_keys:
        raise InvalidTableError("Bucket key must be set for primary key Iceberg tables.")
    for key in bucket_keys:
        data_type = table_info.schema.get_column(key).data_type
        if data_type.root not in _BUCKETABLE:
            raise InvalidTableError(
                f"Bucket key '{key}' has type {data_type}, which Iceberg's bucket transform does not "
                "support (supported: int, long, decimal, date, time, timestamp, timestamp_ltz, string, "
                "binary)."
            )
    for key in table_info.partition_keys:
        data_type = table_info.schema.get_column(key).data_type
        if data_type.root not in (_R.STRING, _R.CHAR):
            raise InvalidTableError(
                f"Partition key only support string type for iceberg currently. Column `{key}` is not "
                "string type."
            )


def iceberg_layout(table_info: TableInfo) -> IcebergLayout:
    """The expected Iceberg schema, spec, sort order and properties; InvalidTableError if the
    Fluss table cannot be mirrored."""
    _check_columns(table_info)
    columns = table_info.schema.columns
    top_ids = itertools.count(1)
    # Nested ids come after all top-level ids, as in Fluss.
    nested_ids: Iterator[int] = itertools.count(len(columns) + len(SYSTEM_COLUMNS) + 1)
    fields: list[NestedField] = []
    for column in columns:
        fields.append(
            NestedField(
                next(top_ids),
                column.name,
                to_iceberg_type(column.data_type, lambda: next(nested_ids)),
                required=not column.data_type.nullable,
                doc=column.comment,
            )
        )
    for name, iceberg_type in SYSTEM_COLUMNS.items():
        fields.append(NestedField(next(top_ids), name, iceberg_type, required=True))
    ids = {f.name: f.field_id for f in fields}
    identifier_ids = [ids[k] for k in table_info.primary_key]
    schema = IcebergSchema(*fields, identifier_field_ids=identifier_ids)

    partition_fields: list[PartitionField] = []
    part_ids = itertools.count(_PARTITION_FIELD_ID_START)
    for key in table_info.partition_keys:
        partition_fields.append(PartitionField(ids[key], next(part_ids), IdentityTransform(), key))
    transform: Transform[Any, Any]
    if table_info.bucket_keys:
        key = table_info.bucket_keys[0]
        transform = BucketTransform(table_info.bucket_count)
        partition_fields.append(PartitionField(ids[key], next(part_ids), transform, f"{key}_bucket"))
    else:
        transform = IdentityTransform()
        partition_fields.append(PartitionField(ids[BUCKET_COLUMN], next(part_ids), transform, BUCKET_COLUMN))
    spec = PartitionSpec(*partition_fields)
    sort_order = SortOrder(
        SortField(
            source_id=ids[OFFSET_COLUMN],
            transform=IdentityTransform(),
            direction=SortDirection.ASC,
            null_order=NullOrder.NULLS_FIRST,
        )
    )
    return IcebergLayout(schema, spec, sort_order, iceberg_properties(table_info))


def _describe_columns(schema: IcebergSchema) -> list[tuple[str, str, bool]]:
    # Names, types (without field ids) and requiredness; ids differ between catalogs.
    return [(f.name, _type_text(f.field_type), f.required) for f in schema.columns]


def _type_text(t: IcebergType) -> str:
    if isinstance(t, ListType):
        return f"list<{_type_text(t.element_type)},{t.element_required}>"
    if isinstance(t, MapType):
        return f"map<{_type_text(t.key_type)},{_type_text(t.value_type)},{t.value_required}>"
    if isinstance(t, StructType):
        inner = ",".join(f"{f.name}:{_type_text(f.field_type)}:{f.required}" for f in t.fields)
        return f"struct<{inner}>"
    return str(t)


def _identifier_names(schema: IcebergSchema) -> set[str]:
    return {schema.find_column_name(i) or "" for i in schema.identifier_field_ids}


def layout_mismatch(
    schema: IcebergSchema,
    spec: PartitionSpec,
    sort_order: SortOrder,
    properties: dict[str, str],
    expected: IcebergLayout,
) -> str | None:
    """Why an existing Iceberg table does not match `expected`, or None when it does."""
    if _describe_columns(schema) != _describe_columns(expected.schema):
        return f"the schema differs: existing {schema}, expected {expected.schema}"
    if _identifier_names(schema) != _identifier_names(expected.schema):
        return "the identifier fields (primary key) differ"

    def spec_text(s: PartitionSpec, sch: IcebergSchema) -> list[tuple[str | None, str, str]]:
        return [(sch.find_column_name(f.source_id), f.name, str(f.transform)) for f in s.fields]

    if spec_text(spec, schema) != spec_text(expected.spec, expected.schema):
        return f"the partition spec differs: existing {spec}, expected {expected.spec}"

    def order_text(o: SortOrder, sch: IcebergSchema) -> list[tuple[str | None, str, str, str]]:
        return [
            (sch.find_column_name(f.source_id), str(f.transform), str(f.direction), str(f.null_order))
            for f in o.fields
        ]

    if order_text(sort_order, schema) != order_text(expected.sort_order, expected.schema):
        return f"the sort order differs: existing {sort_order}, expected {expected.sort_order}"
    for key, value in expected.properties.items():
        if properties.get(key) != value:
            return f"property '{key}' is {properties.get(key)!r}, expected {value!r}"
    return None
