"""Creating Paimon lake tables: layout, types, options, validation, and the catalog settings."""

from __future__ import annotations

import os
import pathlib

import pytest
from lake_helpers import Change, insert
from paimon_helpers import PaimonTiering, paimon_info, paimon_storage

from strom.common import types as T
from strom.common.errors import InvalidConfigError, InvalidTableError, LakeTableAlreadyExistError
from strom.common.table_path import TablePath
from strom.lake import lake_storage_from_config, load_lake_storage
from strom.lake.paimon.catalog import catalog_options
from strom.lake.paimon.schema import paimon_layout
from strom.lake.paimon.storage import PaimonLakeStorage

ORDERS = [
    ("order_id", T.BIGINT()),
    ("customer", T.STRING()),
    ("total", T.DECIMAL(15, 2)),
    ("dt", T.STRING()),
]


@pytest.fixture
def paimon(tmp_path: pathlib.Path) -> PaimonLakeStorage:
    return paimon_storage(tmp_path)


def _columns(storage: PaimonLakeStorage, path: TablePath) -> list[tuple[str, str]]:
    schema = storage.catalog().load_table(path).table_schema
    return [(f.name, str(f.type)) for f in schema.fields]


def test_primary_key_table_layout(paimon: PaimonLakeStorage) -> None:
    info = paimon_info(
        "orders",
        ORDERS,
        primary_key=["order_id", "dt"],
        bucket_keys=["order_id"],
        partition_keys=["dt"],
        buckets=5,
        properties={
            "table.datalake.freshness": "30s",
            "paimon.file.format": "orc",
            "paimon.snapshot.num-retained.max": "20",
            "table.datalake.paimon.ignored": "x",
        },
        custom_properties={"owner": "ops"},
    )
    paimon.catalog().create_table(info)
    assert paimon.catalog().table_exists(info.table_path)
    assert _columns(paimon, info.table_path) == [
        ("order_id", "BIGINT NOT NULL"),
        ("customer", "STRING"),
        ("total", "DECIMAL(15, 2)"),
        ("dt", "STRING NOT NULL"),
        ("__bucket", "INT"),
        ("__offset", "BIGINT"),
        ("__timestamp", "TIMESTAMP(3) WITH LOCAL TIME ZONE"),
        ("__row_kind", "STRING"),
    ]
    table = paimon.catalog().load_table(info.table_path)
    schema = table.table_schema
    assert schema.primary_keys == ["order_id", "dt"] and schema.partition_keys == ["dt"]
    options = schema.options
    assert options["bucket"] == "5" and options["bucket-key"] == "order_id"
    assert options["changelog-producer"] == "input" and options["rowkind.field"] == "__row_kind"
    assert options["partition.legacy-name"] == "false"
    assert options["file.format"] == "orc" and options["snapshot.num-retained.max"] == "20"
    assert options["fluss.table.datalake.freshness"] == "30s"
    assert options["fluss.table.datalake.enabled"] == "true"
    assert options["fluss.owner"] == "ops"
    assert not any("ignored" in k for k in options)
    assert table.bucket_mode().name == "HASH_FIXED"


def test_log_table_layouts(paimon: PaimonLakeStorage) -> None:
    keyed = paimon_info("keyed", ORDERS, bucket_keys=["customer", "order_id"], buckets=3, table_id=1)
    unkeyed = paimon_info("unkeyed", ORDERS, buckets=3, table_id=2)
    for info in (keyed, unkeyed):
        paimon.catalog().create_table(info)
    keyed_options = paimon.catalog().load_table(keyed.table_path).table_schema.options
    assert keyed_options["bucket"] == "3" and keyed_options["bucket-key"] == "customer,order_id"
    unkeyed_table = paimon.catalog().load_table(unkeyed.table_path)
    assert unkeyed_table.table_schema.options["bucket"] == "-1"
    assert "bucket-key" not in unkeyed_table.table_schema.options
    assert unkeyed_table.bucket_mode().name == "BUCKET_UNAWARE"
    for info in (keyed, unkeyed):
        options = paimon.catalog().load_table(info.table_path).table_schema.options
        assert "rowkind.field" not in options and "changelog-producer" not in options
        names = [name for name, _ in _columns(paimon, info.table_path)]
        assert names == ["order_id", "customer", "total", "dt", "__bucket", "__offset", "__timestamp"]


def test_nested_types_and_comments(paimon: PaimonLakeStorage) -> None:
    point = T.ROW([T.DataField("x", T.DOUBLE()), T.DataField("y", T.DOUBLE(), description="north")])
    info = paimon_info(
        "nested",
        [
            ("id", T.INT()),
            ("code", T.CHAR(4)),
            ("raw", T.BINARY(8)),
            ("at", T.TIME(0)),
            ("ts", T.TIMESTAMP(9)),
            ("ltz", T.TIMESTAMP_LTZ(6)),
            ("tags", T.ARRAY(T.INT().copy(False))),
            ("attrs", T.MAP(T.STRING(), T.ARRAY(point))),
            ("point", point),
        ],
    )
    paimon.catalog().create_table(info)
    assert _columns(paimon, info.table_path)[:9] == [
        ("id", "INT"),
        ("code", "CHAR(4)"),
        ("raw", "BINARY(8)"),
        ("at", "TIME(0)"),
        ("ts", "TIMESTAMP(9)"),
        ("ltz", "TIMESTAMP(6) WITH LOCAL TIME ZONE"),
        ("tags", "ARRAY<INT NOT NULL>"),
        ("attrs", "MAP<STRING NOT NULL, ARRAY<ROW<x: DOUBLE, y: DOUBLE COMMENT north>>>"),
        ("point", "ROW<x: DOUBLE, y: DOUBLE COMMENT north>"),
    ]
    # Field ids are unique across nested rows, as Paimon requires.
    schema = paimon.catalog().load_table(info.table_path).table_schema
    ids: list[int] = []

    def collect(fields: list) -> None:  # type: ignore[type-arg]
        for f in fields:
            ids.append(f.id)
            for inner in (
                getattr(f.type, "fields", None),
                getattr(getattr(f.type, "element", None), "fields", None),
            ):
                if inner:
                    collect(inner)

    collect(schema.fields)
    assert len(ids) == len(set(ids))


def test_invalid_tables_and_options_are_refused(paimon: PaimonLakeStorage) -> None:
    with pytest.raises(InvalidTableError, match="__offset"):
        paimon.catalog().create_table(paimon_info("sys", [("__offset", T.BIGINT())]))
    with pytest.raises(InvalidTableError, match="__row_kind"):
        paimon.catalog().create_table(
            paimon_info("rk", [("id", T.INT()), ("__row_kind", T.STRING())], primary_key=["id"])
        )
    # Log tables have no row kind column, so the name is free there.
    paimon.catalog().create_table(paimon_info("rk_log", [("id", T.INT()), ("__row_kind", T.STRING())]))
    for key in ("paimon.bucket", "paimon.bucket-key", "bucket", "paimon.partition.legacy-name"):
        with pytest.raises(InvalidConfigError, match="set automatically"):
            paimon.catalog().create_table(paimon_info("opt", ORDERS, properties={key: "2"}))
    pk = {"primary_key": ["order_id"], "bucket_keys": ["order_id"]}
    with pytest.raises(InvalidConfigError, match=r"file\.format"):
        paimon.catalog().create_table(
            paimon_info("avro", ORDERS, properties={"paimon.file.format": "avro"}, **pk)
        )
    with pytest.raises(InvalidConfigError, match="deletion-vectors"):
        paimon.catalog().create_table(
            paimon_info("dv", ORDERS, properties={"paimon.deletion-vectors.enabled": "true"}, **pk)
        )
    # Log tables may use any format pypaimon writes.
    paimon.catalog().create_table(paimon_info("avro_log", ORDERS, properties={"paimon.file.format": "avro"}))
    assert not paimon.catalog().table_exists(TablePath("fluss", "avro"))


def test_create_is_idempotent_but_refuses_other_layouts_and_foreign_data(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("users", [("id", T.INT()), ("name", T.STRING())], primary_key=["id"], buckets=2)
    catalog = paimon.catalog()
    catalog.create_table(info)
    catalog.create_table(info)  # same layout, empty: fine
    other_buckets = paimon_info(
        "users", [("id", T.INT()), ("name", T.STRING())], primary_key=["id"], buckets=3
    )
    with pytest.raises(LakeTableAlreadyExistError, match="bucket"):
        catalog.create_table(other_buckets)
    other_columns = paimon_info(
        "users", [("id", T.INT()), ("nick", T.STRING())], primary_key=["id"], buckets=2
    )
    with pytest.raises(LakeTableAlreadyExistError, match="columns differ"):
        catalog.create_table(other_columns)
    tiering = PaimonTiering(paimon, info)
    tiering.append([insert(id=1, name="a")])
    tiering.round()
    with pytest.raises(LakeTableAlreadyExistError, match="not empty"):
        catalog.create_table(info)
    catalog.create_table(info, creating_fluss_table=False)  # enabling the lake on an existing table
    assert catalog.drop_table(info.table_path, purge=True)
    assert not catalog.table_exists(info.table_path)
    assert not catalog.drop_table(info.table_path)


def test_log_table_data_survives_recreate_check(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("log", [("k", T.STRING())], bucket_keys=["k"], buckets=2)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append([Change({"k": "a"})])
    tiering.round()
    with pytest.raises(LakeTableAlreadyExistError):
        paimon.catalog().create_table(info)


def test_layout_is_computed_without_a_catalog() -> None:
    info = paimon_info("plain", [("id", T.INT())], primary_key=["id"], buckets=4)
    layout = paimon_layout(info)
    assert [f.name for f in layout.fields] == ["id", "__bucket", "__offset", "__timestamp", "__row_kind"]
    assert [f.id for f in layout.fields] == [0, 1, 2, 3, 4]
    assert layout.options["bucket-key"] == "id"  # the default bucket key: the primary key


def test_catalog_settings(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidConfigError, match="warehouse"):
        catalog_options({"metastore": "filesystem"})
    monkeypatch.chdir(tmp_path)
    options = catalog_options({"warehouse": "relative/lake"})
    assert options == {"metastore": "filesystem", "warehouse": str(tmp_path / "relative" / "lake")}
    assert os.path.isdir(tmp_path / "relative" / "lake")
    url = catalog_options({"warehouse": f"file://{tmp_path}/url-lake"})
    assert url["warehouse"] == f"file://{tmp_path}/url-lake" and os.path.isdir(tmp_path / "url-lake")
    storage = lake_storage_from_config(
        {
            "datalake.format": "paimon",
            "datalake.paimon.metastore": "filesystem",
            "datalake.paimon.warehouse": str(tmp_path / "wh"),
            "datalake.iceberg.uri": "ignored",
        }
    )
    assert isinstance(storage, PaimonLakeStorage)
    assert storage.properties == {"metastore": "filesystem", "warehouse": str(tmp_path / "wh")}
    assert isinstance(load_lake_storage("paimon", {"warehouse": str(tmp_path / "wh")}), PaimonLakeStorage)
    info = paimon_info("t", [("id", T.INT())])
    storage.catalog().create_table(info)
    assert (tmp_path / "wh" / "fluss.db" / "t" / "schema" / "schema-0").is_file()
