import re

import pytest

from strom.common.config import Configuration, DataLakeFormat
from strom.common.errors import FlussError, InvalidConfigError, InvalidTableError, TooManyBucketsError
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import ARRAY, BIGINT, DATE, DOUBLE, INT, MAP, ROW, STRING, TIMESTAMP, DataField
from strom.server.coordinator.table_validation import (
    apply_table_defaults,
    parse_table_descriptor,
    validate_table_descriptor,
)

SERVER = Configuration()


def pk_table(props: dict[str, str] | None = None, **kwargs: object) -> TableDescriptor:
    schema = Schema(
        [Column("k", INT()), Column("dt", STRING()), Column("ver", BIGINT()), Column("v", STRING())],
        primary_key=["k", "dt"] if kwargs.get("partition_keys") else ["k"],
    )
    return TableDescriptor(schema, properties=props or {}, **kwargs)  # type: ignore[arg-type]


def log_table(props: dict[str, str] | None = None, **kwargs: object) -> TableDescriptor:
    schema = Schema([Column("a", INT()), Column("dt", STRING()), Column("d", DOUBLE())])
    return TableDescriptor(schema, properties=props or {}, **kwargs)  # type: ignore[arg-type]


def check(descriptor: TableDescriptor, max_buckets: int = 4096, lake: DataLakeFormat | None = None) -> None:
    validate_table_descriptor(apply_table_defaults(descriptor, SERVER), max_buckets, lake)


def expect(error: type[FlussError], match: str, descriptor: TableDescriptor, **kwargs: object) -> None:
    with pytest.raises(error, match=re.escape(match)) as e:
        check(descriptor, **kwargs)  # type: ignore[arg-type]
    assert e.value.code == error.code


# ----------------------------------------------------------------------------------- defaults


def test_defaults_for_pk_table() -> None:
    result = apply_table_defaults(pk_table(), Configuration({"default.bucket.number": "3"}))
    assert result.bucket_count == 3
    assert result.properties["table.replication.factor"] == "1"
    assert result.properties["table.kv.format-version"] == "2"
    obj = result.to_json()
    assert obj["bucket_count"] == 3 and obj["bucket_key"] == ["k"]


def test_defaults_for_log_table_keep_explicit_values() -> None:
    result = apply_table_defaults(
        log_table({"table.replication.factor": "2"}, bucket_count=5),
        Configuration({"default.replication.factor": "3"}),
    )
    assert result.bucket_count == 5
    assert result.properties == {"table.replication.factor": "2"}
    assert result.to_json()["bucket_key"] == []


def test_defaults_merge_engine_sets_delete_behavior_ignore() -> None:
    result = apply_table_defaults(pk_table({"table.merge-engine": "first_row"}), SERVER)
    assert result.properties["table.delete.behavior"] == "IGNORE"


def test_defaults_cluster_lake_format_and_enabled_check() -> None:
    lake_cluster = Configuration({"datalake.format": "paimon"})
    result = apply_table_defaults(log_table({"table.datalake.enabled": "true"}), lake_cluster)
    assert result.properties["table.datalake.format"] == "paimon"
    with pytest.raises(InvalidTableError, match="doesn't enable datalake"):
        apply_table_defaults(log_table({"table.datalake.enabled": "true"}), SERVER)


def test_defaults_multi_key_auto_partition_disables_precreate() -> None:
    schema = Schema([Column("a", INT()), Column("dt", STRING()), Column("r", STRING())])
    descriptor = TableDescriptor(
        schema,
        partition_keys=["dt", "r"],
        properties={"table.auto-partition.enabled": "true", "table.auto-partition.key": "dt"},
    )
    result = apply_table_defaults(descriptor, SERVER)
    assert result.properties["table.auto-partition.num-precreate"] == "0"
    validate_table_descriptor(result, 4096)


def test_defaults_reject_future_kv_format_version() -> None:
    with pytest.raises(InvalidConfigError, match="Unsupported kv format version 3"):
        apply_table_defaults(pk_table({"table.kv.format-version": "3"}), SERVER)


# ----------------------------------------------------------------------------------- validation


def test_valid_tables_pass() -> None:
    check(pk_table())
    check(log_table())
    check(
        log_table({"table.log.format": "indexed", "table.log.ttl": "1 d"}, bucket_count=8, bucket_keys=["a"])
    )
    check(pk_table({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"}))
    check(log_table({"table.statistics.columns": "a, d"}))


def test_unknown_table_option_is_invalid_config() -> None:
    expect(
        InvalidConfigError,
        "'table.no-such-thing' is not a recognized Fluss table property",
        pk_table({"table.no-such-thing": "1"}),
    )
    expect(InvalidConfigError, "'bucket.num' is not a Fluss table property", pk_table({"bucket.num": "2"}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("table.log.format", "parquet"),
        ("table.log.ttl", "7"),
        ("table.replication.factor", "x"),
        ("table.datalake.enabled", "yes"),
        ("table.kv.format", "rows"),
    ],
)
def test_bad_option_value_names_the_option(key: str, value: str) -> None:
    expect(InvalidConfigError, f"Invalid value for config '{key}'", pk_table({key: value}))


def test_bucket_count_limits() -> None:
    expect(
        TooManyBucketsError,
        "Bucket count 10 exceeds the maximum limit 8",
        log_table(bucket_count=10),
        max_buckets=8,
    )
    expect(InvalidTableError, "larger than 0", log_table(bucket_count=0))


def test_key_types() -> None:
    schema = Schema([Column("k", ARRAY(INT())), Column("v", STRING())], primary_key=["k"])
    expect(
        InvalidTableError,
        "Bucket key column 'k' has unsupported data type ARRAY<INT> NOT NULL",
        TableDescriptor(schema),
    )
    schema = Schema([Column("m", MAP(STRING(), INT())), Column("v", STRING())])
    expect(
        InvalidTableError,
        "Bucket key column 'm' has unsupported data type MAP",
        TableDescriptor(schema, bucket_keys=["m"]),
    )
    schema = Schema([Column("r", ROW([DataField("x", INT())])), Column("v", STRING())])
    expect(InvalidTableError, "partition key 'r'", TableDescriptor(schema, partition_keys=["r"]))


def test_replication_factor_must_be_positive() -> None:
    expect(
        InvalidConfigError,
        "'table.replication.factor' must be greater than 0",
        pk_table({"table.replication.factor": "0"}),
    )


def test_pk_table_log_format() -> None:
    expect(InvalidConfigError, "ARROW or COMPACTED log format", pk_table({"table.log.format": "INDEXED"}))
    check(pk_table({"table.log.format": "COMPACTED"}))


def test_zstd_level_range() -> None:
    expect(
        InvalidConfigError,
        "Invalid ZSTD compression level: 23",
        log_table({"table.log.arrow.compression.zstd.level": "23"}),
    )


def test_merge_engine_rules() -> None:
    expect(
        InvalidConfigError,
        "only supported in primary key table",
        log_table({"table.merge-engine": "first_row"}),
    )
    expect(
        InvalidConfigError,
        "must be set for versioned merge engine",
        pk_table({"table.merge-engine": "versioned"}),
    )
    expect(
        InvalidConfigError,
        "'nope' for versioned merge engine doesn't exist",
        pk_table({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "nope"}),
    )
    expect(
        InvalidConfigError,
        "must be one type of",
        pk_table({"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v"}),
    )
    expect(
        InvalidConfigError,
        "does not support delete operations",
        pk_table({"table.merge-engine": "first_row", "table.delete.behavior": "allow"}),
    )
    expect(
        InvalidConfigError,
        "does not support 'WAL'",
        pk_table({"table.merge-engine": "aggregation", "table.changelog.image": "wal"}),
    )
    expect(
        InvalidConfigError,
        "only supported for primary key tables",
        log_table({"table.delete.behavior": "IGNORE"}),
    )


def test_tiered_log_rules() -> None:
    expect(
        InvalidConfigError,
        "local-segments' must be greater than 0",
        log_table({"table.log.tiered.local-segments": "0"}),
    )
    expect(
        InvalidConfigError,
        "'table.log.local-ttl' must be less than or equal to 'table.log.ttl'",
        log_table({"table.log.local-ttl": "8 d"}),
    )
    check(log_table({"table.log.local-ttl": "1 d"}))


def test_auto_partition_rules() -> None:
    expect(
        InvalidConfigError,
        "only supported for partitioned table",
        log_table({"table.auto-partition.enabled": "true"}),
    )
    check(
        log_table(
            {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "hour"},
            partition_keys=["dt"],
        )
    )
    schema = Schema([Column("a", INT()), Column("dt", STRING()), Column("r", STRING())])
    expect(
        InvalidTableError,
        "must set one auto partition key",
        TableDescriptor(
            schema, partition_keys=["dt", "r"], properties={"table.auto-partition.enabled": "true"}
        ),
    )
    expect(
        InvalidTableError,
        "Your key 'a' is not in key list",
        TableDescriptor(
            schema,
            partition_keys=["dt", "r"],
            properties={"table.auto-partition.enabled": "true", "table.auto-partition.key": "a"},
        ),
    )
    expect(
        InvalidTableError,
        "auto pre-create is unsupported",
        TableDescriptor(
            schema,
            partition_keys=["dt", "r"],
            properties={
                "table.auto-partition.enabled": "true",
                "table.auto-partition.key": "dt",
                "table.auto-partition.num-precreate": "2",
            },
        ),
    )
    expect(
        InvalidTableError,
        "Invalid table property 'table.auto-partition.time-format'",
        log_table({"table.auto-partition.time-format": "yyyy/MM/dd"}, partition_keys=["dt"]),
    )


def test_date_auto_partition_key_needs_day_and_dashed_format() -> None:
    schema = Schema([Column("a", INT()), Column("day", DATE())])
    props = {"table.auto-partition.enabled": "true"}
    expect(
        InvalidTableError,
        "must be 'yyyy-MM-dd'",
        TableDescriptor(schema, partition_keys=["day"], properties=props),
    )
    expect(
        InvalidTableError,
        "must be 'DAY'",
        TableDescriptor(
            schema, partition_keys=["day"], properties={**props, "table.auto-partition.time-unit": "MONTH"}
        ),
    )
    check(
        TableDescriptor(
            schema,
            partition_keys=["day"],
            properties={**props, "table.auto-partition.time-format": "yyyy-MM-dd"},
        )
    )


def test_system_column_names_are_reserved() -> None:
    schema = Schema([Column("__offset", BIGINT()), Column("v", STRING())])
    expect(InvalidTableError, "__offset cannot be used as column names", TableDescriptor(schema))


def test_statistics_rules() -> None:
    expect(
        InvalidConfigError,
        "not supported for primary key tables",
        pk_table({"table.statistics.columns": "*"}),
    )
    expect(
        InvalidConfigError,
        "Column 'zz' specified in statistics",
        log_table({"table.statistics.columns": "zz"}),
    )
    expect(InvalidConfigError, "cannot be empty", log_table({"table.statistics.columns": " , "}))
    schema = Schema([Column("a", INT()), Column("arr", ARRAY(INT()))])
    expect(
        InvalidConfigError,
        "'arr' of type 'ARRAY<INT>' is not supported",
        TableDescriptor(schema, properties={"table.statistics.columns": "arr"}),
    )


def test_historical_partition_requirements() -> None:
    expect(
        InvalidConfigError,
        "has unmet requirements: 'table.auto-partition.enabled' must be set to true",
        pk_table({"table.datalake.historical-partition.enabled": "true"}),
    )


def test_lake_format_must_match_cluster() -> None:
    lake_cluster = Configuration({"datalake.format": "paimon"})
    descriptor = apply_table_defaults(
        log_table({"table.datalake.enabled": "true", "table.datalake.format": "iceberg"}), lake_cluster
    )
    with pytest.raises(InvalidConfigError, match=r"must match cluster 'datalake\.format'"):
        validate_table_descriptor(descriptor, 4096, DataLakeFormat.PAIMON)


def test_timestamp_version_column_allowed() -> None:
    schema = Schema([Column("k", INT()), Column("ts", TIMESTAMP())], primary_key=["k"])
    check(
        TableDescriptor(
            schema,
            properties={"table.merge-engine": "VERSIONED", "table.merge-engine.versioned.ver-column": "ts"},
        )
    )


# ----------------------------------------------------------------------------------- parsing


def test_parse_table_descriptor_wraps_errors_as_invalid_table() -> None:
    with pytest.raises(InvalidTableError, match="Failed to parse table descriptor"):
        parse_table_descriptor(b"{not json")
    with pytest.raises(InvalidTableError, match="partition_key"):
        parse_table_descriptor(
            b'{"version":1,"schema":{"columns":[]},"properties":{},"custom_properties":{}}'
        )
    bad_pk = (
        b'{"version":1,"schema":{"columns":[{"name":"a","data_type":{"type":"INTEGER"},"id":0}],'
        b'"primary_key":["zz"]},"partition_key":[],"properties":{},"custom_properties":{}}'
    )
    with pytest.raises(InvalidTableError, match="primary key"):
        parse_table_descriptor(bad_pk)
    ok = parse_table_descriptor(pk_table().to_json_bytes())
    assert ok.schema.primary_key == ["k"]


def test_delta_is_not_stamped_and_may_not_be_named() -> None:
    """Fluss clients fail on a table.datalake.format they do not know: Delta tables carry none."""
    server = Configuration({"datalake.format": "delta", "datalake.delta.warehouse": "/w"})
    lake = {"table.datalake.enabled": "true"}
    plain = TableDescriptor(Schema([Column("id", BIGINT())]), bucket_count=1, properties=lake)
    applied = apply_table_defaults(plain, server)
    assert "table.datalake.format" not in applied.properties
    validate_table_descriptor(applied, 128, DataLakeFormat.DELTA)
    named = TableDescriptor(
        Schema([Column("id", BIGINT())]),
        bucket_count=1,
        properties={**lake, "table.datalake.format": "delta"},
    )
    with pytest.raises(InvalidConfigError, match="Fluss clients refuse"):
        validate_table_descriptor(apply_table_defaults(named, server), 128, DataLakeFormat.DELTA)
