import json

import pyarrow as pa
import pytest

from strom.common.schema import DEFAULT_SCHEMA_ID, Column, Schema
from strom.common.types import ARRAY, BIGINT, DOUBLE, INT, MAP, ROW, STRING, DataField


def test_ids_assigned_in_order_and_pk_not_null() -> None:
    schema = Schema([Column("k", INT()), Column("s", STRING()), Column("d", DOUBLE())], primary_key=["k"])
    assert schema.column_ids == [0, 1, 2]
    assert schema.highest_field_id == 2
    assert schema.columns[0].data_type.nullable is False
    assert schema.columns[1].data_type.nullable is True
    assert schema.primary_key_indexes == [0]
    assert schema.column_names == ["k", "s", "d"]
    assert [str(t) for t in schema.row_type] == ["INT NOT NULL", "STRING", "DOUBLE"]
    assert DEFAULT_SCHEMA_ID == 1


def test_nested_ids_depth_first_like_fluss() -> None:
    # id(a)=0, id(nested)=1, x=2, label=3, id(arr)=4, inner n=5
    schema = Schema(
        [
            Column("a", INT()),
            Column("nested", ROW([DataField("x", INT()), DataField("label", STRING())])),
            Column("arr", ARRAY(ROW([DataField("n", BIGINT())]))),
        ]
    )
    assert schema.column_ids == [0, 1, 4]
    assert [f.field_id for f in schema.columns[1].data_type.fields] == [2, 3]
    arr_element = schema.columns[2].data_type.element_type
    assert arr_element is not None and arr_element.fields[0].field_id == 5
    assert schema.highest_field_id == 5


def test_json_matches_fluss_schema_serde() -> None:
    schema = Schema([Column("k", INT(), comment="key"), Column("v", STRING())], primary_key=["k"])
    assert schema.to_json() == {
        "version": 1,
        "columns": [
            {"name": "k", "data_type": {"type": "INTEGER", "nullable": False}, "comment": "key", "id": 0},
            {"name": "v", "data_type": {"type": "STRING"}, "id": 1},
        ],
        "primary_key": ["k"],
        "highest_field_id": 1,
    }
    # Jackson writes compact JSON with keys in this order
    assert schema.to_json_bytes().startswith(b'{"version":1,"columns":[{"name":"k","data_type":')
    assert Schema.from_json_bytes(schema.to_json_bytes()) == schema


def test_log_table_json_has_no_primary_key() -> None:
    obj = Schema([Column("a", INT())]).to_json()
    assert "primary_key" not in obj


def test_from_json_keeps_given_ids_and_highest() -> None:
    obj = {
        "version": 1,
        "columns": [
            {"name": "a", "data_type": {"type": "INTEGER"}, "id": 3},
            {"name": "b", "data_type": {"type": "STRING"}, "id": 7},
        ],
        "highest_field_id": 9,
    }
    schema = Schema.from_json(obj)
    assert schema.column_ids == [3, 7] and schema.highest_field_id == 9
    assert schema.to_json() == obj


def test_from_json_without_ids_numbers_columns() -> None:
    schema = Schema.from_json({"columns": [{"name": "a", "data_type": {"type": "INTEGER"}}]})
    assert schema.column_ids == [0] and schema.highest_field_id == 0


def test_agg_function_round_trips() -> None:
    obj = {
        "version": 1,
        "columns": [
            {"name": "k", "data_type": {"type": "INTEGER", "nullable": False}, "id": 0},
            {"name": "v", "data_type": {"type": "BIGINT"}, "agg_function": {"type": "sum"}, "id": 1},
        ],
        "primary_key": ["k"],
        "highest_field_id": 1,
    }
    assert Schema.from_json(json.loads(json.dumps(obj))).to_json() == obj


@pytest.mark.parametrize(
    ("columns", "pk", "match"),
    [
        ([Column("a", INT()), Column("a", STRING())], None, "duplicate"),
        ([Column("a", INT())], ["b"], "should include all primary key"),
        ([Column("a", INT())], ["a", "a"], "duplicate"),
        ([Column("a", INT(), column_id=0), Column("b", INT())], None, "All columns must have columnId"),
        ([Column("a", INT(), column_id=0), Column("b", INT(), column_id=0)], None, "unique"),
    ],
)
def test_structural_errors(columns: list[Column], pk: list[str] | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Schema(columns, pk)


def test_highest_field_id_below_ids_is_rejected() -> None:
    with pytest.raises(ValueError, match="Highest field ID"):
        Schema([Column("a", INT(), column_id=5)], highest_field_id=2)


def test_arrow_schema_round_trip() -> None:
    schema = Schema(
        [Column("k", BIGINT()), Column("m", MAP(STRING(), INT())), Column("s", STRING())], primary_key=["k"]
    )
    arrow = schema.to_arrow_schema()
    assert arrow.field("k").nullable is False
    assert arrow.field("s").type == pa.utf8()
    back = Schema.from_arrow_schema(arrow, primary_key=["k"])
    assert back.column_names == schema.column_names
    assert back.columns[0].data_type == schema.columns[0].data_type
    # Arrow map keys are never null, so the key type comes back NOT NULL
    assert str(back.columns[1].data_type) == "MAP<STRING NOT NULL, INT>"


def test_from_arrow_schema_assigns_ids() -> None:
    schema = Schema.from_arrow_schema(
        pa.schema([("a", pa.int32()), ("r", pa.struct([("x", pa.int64()), ("y", pa.string())]))])
    )
    assert schema.column_ids == [0, 1]
    assert [f.field_id for f in schema.columns[1].data_type.fields] == [2, 3]
    assert schema.highest_field_id == 3
