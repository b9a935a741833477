"""Creating Iceberg lake tables for Fluss tables: schema, partitioning, sort order, properties."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import Tiering, insert, table_info
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from strom.common import types as T
from strom.common.errors import (
    InvalidConfigError,
    InvalidTableError,
    LakeStorageNotConfiguredError,
    LakeTableAlreadyExistError,
)
from strom.common.types import DataField, DataType, DataTypeRoot
from strom.lake import lake_storage_from_config, load_lake_storage, maintenance_plan
from strom.lake.iceberg.storage import IcebergLakeStorage


def _spec(table: Any) -> list[tuple[Any, ...]]:  # (source column, transform, name) per partition field
    schema = table.schema()
    return [(schema.find_column_name(f.source_id), f.transform, f.name) for f in table.spec().fields]


def _columns(table: Any) -> list[tuple[Any, ...]]:
    return [(f.name, f.field_type, f.required) for f in table.schema().columns]


def test_log_table_without_bucket_key_is_partitioned_by_bucket_column(storage: IcebergLakeStorage) -> None:
    info = table_info(
        "access_logs",
        [("ts", T.TIMESTAMP(6)), ("user_id", T.BIGINT()), ("action", T.STRING())],
        properties={"table.datalake.freshness": "30s", "iceberg.commit.retry.num-retries": "5"},
        custom_properties={"owner": "ops"},
    )
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    assert table.name() == ("fluss", "access_logs")
    assert _columns(table) == [
        ("ts", TimestampType(), False),
        ("user_id", LongType(), False),
        ("action", StringType(), False),
        ("__bucket", IntegerType(), True),
        ("__offset", LongType(), True),
        ("__timestamp", TimestamptzType(), True),
    ]
    assert _spec(table) == [("__bucket", IdentityTransform(), "__bucket")]
    [sort_field] = table.sort_order().fields
    assert table.schema().find_column_name(sort_field.source_id) == "__offset"
    assert str(sort_field.direction) == "ASC" or sort_field.direction.name == "ASC"
    assert sort_field.null_order.name == "NULLS_FIRST"
    assert table.schema().identifier_field_ids == []
    props = table.properties
    assert props["fluss.table.datalake.freshness"] == "30s"
    assert props["fluss.table.datalake.enabled"] == "true"
    assert props["commit.retry.num-retries"] == "5"
    assert props["fluss.owner"] == "ops"
    assert "write.delete.mode" not in props
    assert table.metadata.format_version == 2


def test_log_table_with_bucket_key_uses_iceberg_bucket_transform(storage: IcebergLakeStorage) -> None:
    info = table_info(
        "order_events",
        [("order_id", T.BIGINT()), ("item_id", T.BIGINT()), ("amount", T.INT())],
        bucket_keys=["order_id"],
        buckets=5,
    )
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    assert _spec(table) == [("order_id", BucketTransform(5), "order_id_bucket")]


def test_partitioned_primary_key_table(storage: IcebergLakeStorage) -> None:
    info = table_info(
        "daily_sales",
        [("sale_id", T.BIGINT()), ("amount", T.DECIMAL(10, 2)), ("sale_date", T.STRING())],
        primary_key=["sale_id", "sale_date"],
        partition_keys=["sale_date"],
        buckets=4,
    )
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    assert _spec(table) == [
        ("sale_date", IdentityTransform(), "sale_date"),
        ("sale_id", BucketTransform(4), "sale_id_bucket"),
    ]
    schema = table.schema()
    assert {schema.find_column_name(i) for i in schema.identifier_field_ids} == {"sale_id", "sale_date"}
    assert schema.find_field("amount").field_type == DecimalType(10, 2)
    props = table.properties
    assert (
        props["write.delete.mode"]
        == props["write.update.mode"]
        == props["write.merge.mode"]
        == "merge-on-read"
    )


def test_partitioned_log_table_without_bucket_key(storage: IcebergLakeStorage) -> None:
    info = table_info(
        "logs",
        [("id", T.BIGINT()), ("event_date", T.STRING())],
        partition_keys=["event_date"],
    )
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    assert _spec(table) == [
        ("event_date", IdentityTransform(), "event_date"),
        ("__bucket", IdentityTransform(), "__bucket"),
    ]


def test_type_mapping(storage: IcebergLakeStorage) -> None:
    row_type = DataType(
        DataTypeRoot.ROW, fields=(DataField("x", T.INT()), DataField("y", T.STRING().copy(False)))
    )
    columns = [
        ("c_bool", T.BOOLEAN()),
        ("c_tiny", T.TINYINT()),
        ("c_small", T.SMALLINT()),
        ("c_int", T.INT().copy(False)),
        ("c_big", T.BIGINT()),
        ("c_float", T.FLOAT()),
        ("c_double", T.DOUBLE()),
        ("c_dec", T.DECIMAL(20, 3)),
        ("c_char", T.CHAR(3)),
        ("c_str", T.STRING()),
        ("c_bin", T.BINARY(4)),
        ("c_bytes", T.BYTES()),
        ("c_date", T.DATE()),
        ("c_time", T.TIME()),
        ("c_ts", T.TIMESTAMP(3)),
        ("c_ltz", T.TIMESTAMP_LTZ(6)),
        ("c_arr", T.ARRAY(T.STRING())),
        ("c_map", T.MAP(T.STRING(), T.BIGINT())),
        ("c_row", row_type),
    ]
    info = table_info("all_types", columns)
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    by_name = {f.name: f for f in table.schema().columns}
    expected = {
        "c_bool": BooleanType(),
        "c_tiny": IntegerType(),
        "c_small": IntegerType(),
        "c_int": IntegerType(),
        "c_big": LongType(),
        "c_float": FloatType(),
        "c_double": DoubleType(),
        "c_dec": DecimalType(20, 3),
        "c_char": StringType(),
        "c_str": StringType(),
        "c_bin": BinaryType(),
        "c_bytes": BinaryType(),
        "c_date": DateType(),
        "c_time": TimeType(),
        "c_ts": TimestampType(),
        "c_ltz": TimestamptzType(),
    }
    for name, iceberg_type in expected.items():
        assert by_name[name].field_type == iceberg_type, name
    assert by_name["c_int"].required and not by_name["c_big"].required
    assert isinstance(by_name["c_arr"].field_type, ListType)
    assert by_name["c_arr"].field_type.element_type == StringType()
    assert isinstance(by_name["c_map"].field_type, MapType)
    assert by_name["c_map"].field_type.value_type == LongType()
    struct = by_name["c_row"].field_type
    assert isinstance(struct, StructType)
    assert [(f.name, f.field_type, f.required) for f in struct.fields] == [
        ("x", IntegerType(), False),
        ("y", StringType(), True),
    ]


def test_create_is_idempotent_and_refuses_a_different_table(storage: IcebergLakeStorage) -> None:
    info = table_info("t", [("id", T.BIGINT()), ("v", T.STRING())], primary_key=["id"])
    catalog = storage.catalog()
    catalog.create_table(info)
    catalog.create_table(info)  # same layout: accepted
    other = table_info("t", [("id", T.BIGINT()), ("v", T.INT())], primary_key=["id"])
    with pytest.raises(LakeTableAlreadyExistError, match="schema differs"):
        catalog.create_table(other)
    more_buckets = table_info("t", [("id", T.BIGINT()), ("v", T.STRING())], primary_key=["id"], buckets=7)
    with pytest.raises(LakeTableAlreadyExistError, match="partition spec differs"):
        catalog.create_table(more_buckets)


def test_create_refuses_an_existing_non_empty_table_for_a_new_fluss_table(
    storage: IcebergLakeStorage,
) -> None:
    info = table_info("t", [("id", T.BIGINT()), ("v", T.STRING())], primary_key=["id"])
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append([insert(id=1, v="a")])
    tiering.round()
    with pytest.raises(LakeTableAlreadyExistError, match="not empty"):
        storage.catalog().create_table(info)
    # Enabling the lake on an existing Fluss table may reuse it.
    storage.catalog().create_table(info, creating_fluss_table=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket_keys": ["a", "b"]}, "at most one bucket key"),
        ({"primary_key": ["a", "b"]}, "at most one bucket key"),
        ({"bucket_keys": ["d"]}, "bucket transform does not support"),
        ({"partition_keys": ["a"]}, "only support string type"),
    ],
)
def test_unsupported_tables_are_refused(
    storage: IcebergLakeStorage, kwargs: dict[str, Any], message: str
) -> None:
    info = table_info("bad", [("a", T.BIGINT()), ("b", T.STRING()), ("d", T.DOUBLE())], **kwargs)
    with pytest.raises(InvalidTableError, match=message):
        storage.catalog().create_table(info)
    assert not storage.catalog().table_exists(info.table_path)


def test_system_column_names_are_reserved(storage: IcebergLakeStorage) -> None:
    info = table_info("bad", [("a", T.BIGINT()), ("__offset", T.BIGINT())])
    with pytest.raises(InvalidTableError, match="reserved system column"):
        storage.catalog().create_table(info)


def test_other_format_versions_are_refused(storage: IcebergLakeStorage) -> None:
    info = table_info("v3", [("a", T.BIGINT())], properties={"iceberg.format-version": "3"})
    with pytest.raises(InvalidConfigError, match="format-version"):
        storage.catalog().create_table(info)


def test_drop_table(storage: IcebergLakeStorage) -> None:
    info = table_info("t", [("a", T.BIGINT())])
    catalog = storage.catalog()
    catalog.create_table(info)
    assert catalog.table_exists(info.table_path)
    assert catalog.drop_table(info.table_path)
    assert not catalog.table_exists(info.table_path)
    assert not catalog.drop_table(info.table_path)


def test_storage_from_cluster_config_and_registry(tmp_path: Path) -> None:
    config = {
        "datalake.format": "iceberg",
        "datalake.iceberg.warehouse": str(tmp_path / "wh"),
        "datalake.paimon.warehouse": "ignored",
    }
    storage = lake_storage_from_config(config)
    assert isinstance(storage, IcebergLakeStorage)
    assert storage.properties == {"warehouse": str(tmp_path / "wh")}
    # The embedded default: a SQLite catalog file inside the local warehouse.
    info = table_info("t", [("a", T.BIGINT())])
    storage.catalog().create_table(info)
    assert (tmp_path / "wh" / "iceberg_catalog.db").exists()
    assert storage.catalog().load_table(info.table_path).location().startswith("file://")
    # Storage pickles to executors without its catalog connection.
    clone = pickle.loads(pickle.dumps(storage))
    assert clone.catalog().table_exists(info.table_path)
    with pytest.raises(LakeStorageNotConfiguredError):
        lake_storage_from_config({})
    with pytest.raises(InvalidConfigError, match="Unknown datalake format"):
        load_lake_storage("hudi", {})
    with pytest.raises(InvalidConfigError, match=r"datalake\.delta\.warehouse"):
        load_lake_storage("delta", {})
    with pytest.raises(InvalidConfigError, match="hadoop"):
        load_lake_storage("iceberg", {"type": "hadoop", "warehouse": "/x"}).catalog()


def test_maintenance_plan_options() -> None:
    columns = [("a", T.BIGINT())]
    assert not maintenance_plan(table_info("t", columns)).compact
    on = maintenance_plan(table_info("t", columns, properties={"table.datalake.auto-maintenance": "true"}))
    assert on.compact and on.expire_snapshots
    fluss = maintenance_plan(table_info("t", columns, properties={"table.datalake.auto-compaction": "true"}))
    assert fluss.compact and not fluss.expire_snapshots
    off = maintenance_plan(
        table_info(
            "t",
            columns,
            properties={"table.datalake.auto-maintenance": "false", "table.datalake.auto-compaction": "true"},
        )
    )
    assert not off.compact
