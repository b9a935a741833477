import json
from datetime import timedelta
from typing import Any

import pytest

from strom.common.config import ArrowCompressionType, KvFormat, LogFormat
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import DatabaseDescriptor, TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.common.types import DOUBLE, INT, STRING

# The PK table example: (k INT, s STRING, d DOUBLE), primary key k, as a client sends it
# (bucket key filled in, no bucket_count).
PK_TABLE_JSON = (
    '{"version":1,"schema":{"version":1,"columns":['
    '{"name":"k","data_type":{"type":"INTEGER","nullable":false},"id":0},'
    '{"name":"s","data_type":{"type":"STRING"},"id":1},'
    '{"name":"d","data_type":{"type":"DOUBLE"},"id":2}],'
    '"primary_key":["k"],"highest_field_id":2},'
    '"partition_key":[],"bucket_key":["k"],"properties":{},"custom_properties":{}}'
)


def pk_schema() -> Schema:
    return Schema([Column("k", INT()), Column("s", STRING()), Column("d", DOUBLE())], primary_key=["k"])


def test_pk_table_json_round_trip_byte_exact() -> None:
    descriptor = TableDescriptor.from_json_bytes(PK_TABLE_JSON)
    assert descriptor.bucket_keys == ["k"]
    assert descriptor.bucket_count is None
    assert descriptor.schema.primary_key == ["k"]
    assert descriptor.schema.columns[0].data_type.nullable is False
    assert descriptor.to_json_bytes().decode() == PK_TABLE_JSON


def test_pk_table_gets_default_bucket_key() -> None:
    descriptor = TableDescriptor(pk_schema())
    obj = descriptor.to_json()
    assert obj["bucket_key"] == ["k"]
    assert obj["schema"]["primary_key"] == ["k"]
    assert obj["schema"]["columns"][0]["data_type"] == {"type": "INTEGER", "nullable": False}
    assert "bucket_count" not in obj
    assert list(obj) == [
        "version",
        "schema",
        "partition_key",
        "bucket_key",
        "properties",
        "custom_properties",
    ]


def test_full_descriptor_json_keys_and_order() -> None:
    descriptor = TableDescriptor(
        pk_schema(),
        bucket_count=4,
        properties={"table.log.format": "ARROW"},
        custom_properties={"owner": "me"},
        comment="a table",
    )
    obj = json.loads(descriptor.to_json_bytes())
    assert list(obj) == [
        "version",
        "schema",
        "comment",
        "partition_key",
        "bucket_key",
        "bucket_count",
        "properties",
        "custom_properties",
    ]
    assert obj["bucket_count"] == 4 and obj["comment"] == "a table"
    assert TableDescriptor.from_json(obj) == descriptor


def test_log_table_without_distribution_has_no_bucket_fields() -> None:
    descriptor = TableDescriptor(Schema([Column("a", INT())]))
    obj = descriptor.to_json()
    assert "bucket_key" not in obj and "bucket_count" not in obj
    with_count = descriptor.with_bucket_count(3).to_json()
    assert with_count["bucket_key"] == [] and with_count["bucket_count"] == 3


def test_partitioned_pk_table_default_bucket_keys_exclude_partition_keys() -> None:
    schema = Schema(
        [Column("k", INT()), Column("dt", STRING()), Column("v", STRING())], primary_key=["k", "dt"]
    )
    descriptor = TableDescriptor(schema, partition_keys=["dt"])
    assert descriptor.bucket_keys == ["k"]
    assert descriptor.default_bucket_keys() == ["k"] and descriptor.is_default_bucket_key()
    assert descriptor.is_partitioned and descriptor.has_primary_key


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"partition_keys": ["s"]}, "subset of the primary key"),
        ({"bucket_keys": ["s"]}, "subset of primary keys"),
        ({"bucket_keys": ["zz"]}, "subset of primary keys"),
        ({"partition_keys": ["k"]}, "should not be same with partition fields"),
    ],
)
def test_pk_table_key_consistency(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TableDescriptor(pk_schema(), **kwargs)


def test_log_table_key_consistency() -> None:
    schema = Schema([Column("a", INT()), Column("b", STRING())])
    with pytest.raises(ValueError, match="Partition key 'x' does not exist"):
        TableDescriptor(schema, partition_keys=["x"])
    with pytest.raises(ValueError, match="Bucket key 'x' does not exist"):
        TableDescriptor(schema, bucket_keys=["x"])
    with pytest.raises(ValueError, match="shouldn't include any column in partition keys"):
        TableDescriptor(schema, partition_keys=["b"], bucket_keys=["b"])


def test_from_json_rejects_missing_required_parts() -> None:
    obj = json.loads(PK_TABLE_JSON)
    for key in ("schema", "partition_key", "properties", "custom_properties"):
        broken = {k: v for k, v in obj.items() if k != key}
        with pytest.raises(ValueError, match=key):
            TableDescriptor.from_json(broken)


def test_non_string_property_values_read_as_text() -> None:
    obj = json.loads(PK_TABLE_JSON)
    obj["properties"] = {"table.replication.factor": 3, "table.datalake.enabled": True}
    descriptor = TableDescriptor.from_json(obj)
    assert descriptor.properties == {"table.replication.factor": "3", "table.datalake.enabled": "true"}


def test_table_info_convenience_properties() -> None:
    descriptor = TableDescriptor(
        pk_schema(),
        bucket_count=3,
        properties={
            "table.replication.factor": "1",
            "table.kv.format-version": "2",
            "table.log.arrow.compression.type": "NONE",
        },
    )
    info = TableInfo(TablePath("db", "t"), 7, 1, descriptor, 1000, 2000)
    assert info.bucket_count == 3 and info.bucket_keys == ["k"] and info.primary_key == ["k"]
    assert info.physical_primary_key == ["k"] and info.partition_keys == [] and not info.is_partitioned
    assert info.log_format is LogFormat.ARROW and info.kv_format is KvFormat.COMPACTED
    assert info.kv_format_version == 2 and info.replication_factor == 1
    assert info.arrow_compression_type is ArrowCompressionType.NONE
    assert info.log_ttl == timedelta(days=7) and info.merge_engine is None
    assert info.to_table_json()["bucket_count"] == 3


def test_table_info_requires_bucket_count() -> None:
    with pytest.raises(ValueError, match="Bucket count"):
        TableInfo(TablePath("db", "t"), 1, 1, TableDescriptor(pk_schema()), 0, 0)


def test_database_json() -> None:
    assert DatabaseDescriptor().to_json() == {"version": 1, "custom_properties": {}}
    d = DatabaseDescriptor(comment="c", custom_properties={"a": "b"})
    assert d.to_json_bytes() == b'{"version":1,"comment":"c","custom_properties":{"a":"b"}}'
    assert DatabaseDescriptor.from_json_bytes(d.to_json_bytes()) == d
