import pyarrow as pa
import pytest

from strom.common.types import (
    ARRAY,
    BIGINT,
    BINARY,
    BOOLEAN,
    BYTES,
    CHAR,
    DATE,
    DECIMAL,
    DOUBLE,
    FLOAT,
    INT,
    MAP,
    ROW,
    SMALLINT,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_LTZ,
    TINYINT,
    DataField,
    DataType,
    DataTypeRoot,
    row_type_to_arrow_schema,
)

ALL_SIMPLE = [
    BOOLEAN(),
    TINYINT(),
    SMALLINT(),
    INT(),
    BIGINT(),
    FLOAT(),
    DOUBLE(),
    CHAR(3),
    STRING(),
    DECIMAL(10, 2),
    DATE(),
    TIME(),
    TIME(3),
    TIMESTAMP(),
    TIMESTAMP(9),
    TIMESTAMP_LTZ(),
    TIMESTAMP_LTZ(0),
    BYTES(),
    BINARY(16),
]


def test_json_of_simple_types_matches_fluss() -> None:
    assert INT().to_json() == {"type": "INTEGER"}
    assert INT().copy(False).to_json() == {"type": "INTEGER", "nullable": False}
    assert STRING().to_json() == {"type": "STRING"}
    assert CHAR(5).to_json() == {"type": "CHAR", "length": 5}
    assert BINARY(4).copy(False).to_json() == {"type": "BINARY", "nullable": False, "length": 4}
    assert DECIMAL(10, 2).to_json() == {"type": "DECIMAL", "precision": 10, "scale": 2}
    assert TIME().to_json() == {"type": "TIME_WITHOUT_TIME_ZONE", "precision": 0}
    assert TIMESTAMP().to_json() == {"type": "TIMESTAMP_WITHOUT_TIME_ZONE", "precision": 6}
    assert TIMESTAMP_LTZ(3).to_json() == {"type": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision": 3}


@pytest.mark.parametrize("t", ALL_SIMPLE, ids=str)
def test_json_round_trip_simple(t: DataType) -> None:
    assert DataType.from_json(t.to_json()) == t
    not_null = t.copy(False)
    assert DataType.from_json(not_null.to_json()) == not_null
    assert not_null.to_json()["nullable"] is False


def test_json_round_trip_nested() -> None:
    t = ROW(
        [
            DataField("a", INT().copy(False), 1),
            DataField("b", MAP(STRING().copy(False), ARRAY(TIMESTAMP_LTZ(3))), 2, "a map"),
            DataField("c", ROW([DataField("x", DECIMAL(38, 10), 4)]).copy(False), 3),
        ]
    )
    obj = t.to_json()
    assert obj["fields"][1] == {
        "name": "b",
        "field_type": {
            "type": "MAP",
            "key_type": {"type": "STRING", "nullable": False},
            "value_type": {
                "type": "ARRAY",
                "element_type": {"type": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision": 3},
            },
        },
        "description": "a map",
        "field_id": 2,
    }
    assert DataType.from_json(obj) == t


def test_json_missing_field_id_reads_as_unknown() -> None:
    t = DataType.from_json({"type": "ROW", "fields": [{"name": "a", "field_type": {"type": "INTEGER"}}]})
    assert t.fields[0].field_id == -1


def test_json_rejects_unknown_root_and_missing_params() -> None:
    with pytest.raises(ValueError, match="VARCHAR"):
        DataType.from_json({"type": "VARCHAR"})
    with pytest.raises(ValueError, match="precision"):
        DataType.from_json({"type": "DECIMAL", "scale": 2})


def test_parameter_limits() -> None:
    with pytest.raises(ValueError):
        DECIMAL(39, 0)
    with pytest.raises(ValueError):
        DECIMAL(5, 6)
    with pytest.raises(ValueError):
        TIMESTAMP(10)
    with pytest.raises(ValueError):
        CHAR(0)
    with pytest.raises(ValueError, match="duplicates"):
        ROW([DataField("a", INT()), DataField("a", STRING())])


@pytest.mark.parametrize(
    ("fluss", "arrow"),
    [
        (BOOLEAN(), pa.bool_()),
        (TINYINT(), pa.int8()),
        (SMALLINT(), pa.int16()),
        (INT(), pa.int32()),
        (BIGINT(), pa.int64()),
        (FLOAT(), pa.float32()),
        (DOUBLE(), pa.float64()),
        (CHAR(2), pa.utf8()),
        (STRING(), pa.utf8()),
        (DECIMAL(10, 2), pa.decimal128(10, 2)),
        (DATE(), pa.date32()),
        (TIME(0), pa.time32("s")),
        (TIME(2), pa.time32("ms")),
        (TIME(3), pa.time32("ms")),
        (TIME(5), pa.time64("us")),
        (TIME(9), pa.time64("ns")),
        (TIMESTAMP(0), pa.timestamp("s")),
        (TIMESTAMP(3), pa.timestamp("ms")),
        (TIMESTAMP(6), pa.timestamp("us")),
        (TIMESTAMP(7), pa.timestamp("ns")),
        (TIMESTAMP_LTZ(6), pa.timestamp("us", tz="UTC")),
        (TIMESTAMP_LTZ(1), pa.timestamp("ms", tz="UTC")),
        (BYTES(), pa.binary()),
        (BINARY(8), pa.binary(8)),
        (ARRAY(INT().copy(False)), pa.list_(pa.field("item", pa.int32(), nullable=False))),
        (
            MAP(STRING(), BIGINT()),
            pa.map_(pa.field("key", pa.utf8(), nullable=False), pa.field("value", pa.int64())),
        ),
        (
            ROW([DataField("a", INT().copy(False)), DataField("b", STRING())]),
            pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.utf8())]),
        ),
    ],
    ids=lambda v: str(v),
)
def test_to_arrow_matches_reference_table(fluss: DataType, arrow: pa.DataType) -> None:
    assert fluss.to_arrow() == arrow
    # strict equality including nested field names/nullability
    assert str(fluss.to_arrow()) == str(arrow)


def test_map_arrow_names_entries_key_value() -> None:
    t = MAP(INT(), STRING()).to_arrow()
    assert isinstance(t, pa.MapType)
    assert t.key_field.name == "key" and t.item_field.name == "value"
    assert t.field(0).name == "entries" and not t.field(0).nullable
    assert t.item_type == pa.utf8()


@pytest.mark.parametrize(
    ("arrow", "fluss"),
    [
        (pa.uint8(), TINYINT()),
        (pa.uint16(), SMALLINT()),
        (pa.uint32(), INT()),
        (pa.uint64(), BIGINT()),
        (pa.large_string(), STRING()),
        (pa.string_view(), STRING()),
        (pa.large_binary(), BYTES()),
        (pa.binary(5), BINARY(5)),
        (pa.date64(), DATE()),
        (pa.time32("ms"), TIME(3)),
        (pa.time64("us"), TIME(6)),
        (pa.timestamp("ms"), TIMESTAMP(3)),
        (pa.timestamp("ns", tz="Asia/Shanghai"), TIMESTAMP_LTZ(9)),
        (pa.timestamp("s", tz="UTC"), TIMESTAMP_LTZ(0)),
        (pa.large_list(pa.string()), ARRAY(STRING())),
        (pa.map_(pa.string(), pa.int64()), MAP(STRING().copy(False), BIGINT())),
        (pa.dictionary(pa.int32(), pa.string()), STRING()),
    ],
    ids=lambda v: str(v),
)
def test_from_arrow_as_pyfluss_maps(arrow: pa.DataType, fluss: DataType) -> None:
    assert DataType.from_arrow(arrow) == fluss


def test_from_arrow_struct_keeps_field_nullability() -> None:
    t = DataType.from_arrow(pa.struct([("a", pa.int32()), pa.field("b", pa.string(), nullable=False)]), False)
    assert not t.nullable
    assert [str(f.type) for f in t.fields] == ["INT", "STRING NOT NULL"]


@pytest.mark.parametrize("arrow", [pa.float16(), pa.null(), pa.decimal256(40, 2), pa.duration("s")], ids=str)
def test_from_arrow_rejects_unsupported(arrow: pa.DataType) -> None:
    with pytest.raises(ValueError, match="Arrow type"):
        DataType.from_arrow(arrow)


def test_from_arrow_rejects_negative_decimal_scale() -> None:
    with pytest.raises(ValueError, match="scale"):
        DataType.from_arrow(pa.decimal128(5, -1))


@pytest.mark.parametrize("t", ALL_SIMPLE, ids=str)
def test_arrow_round_trip_where_lossless(t: DataType) -> None:
    back = DataType.from_arrow(t.to_arrow())
    if t.root is DataTypeRoot.CHAR:
        assert back == STRING()
    elif t.root in (DataTypeRoot.TIME_WITHOUT_TIME_ZONE,) and t.precision not in (0, 3, 6, 9):
        # the precision rounds to the Arrow unit, which itself survives the round trip
        assert back.root is t.root and back.to_arrow() == t.to_arrow()
    else:
        assert back == t


def test_str_is_sql_like() -> None:
    assert str(INT().copy(False)) == "INT NOT NULL"
    assert str(DECIMAL(10, 2)) == "DECIMAL(10, 2)"
    assert str(TIMESTAMP_LTZ(3)) == "TIMESTAMP_LTZ(3)"
    assert str(MAP(STRING(), ARRAY(INT()))) == "MAP<STRING, ARRAY<INT>>"
    assert str(ROW([DataField("a", INT()), DataField("b", STRING(), description="it's")])) == (
        "ROW<`a` INT, `b` STRING 'it''s'>"
    )


def test_row_type_to_arrow_schema() -> None:
    schema = row_type_to_arrow_schema(["k", "v"], [INT().copy(False), STRING()])
    assert schema == pa.schema([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.utf8())])
