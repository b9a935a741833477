"""The AGGREGATION merge engine on a real KvTablet: every function, nulls, changelog, deletes, partial
updates, replay; and the CreateTable rules for `fields.<col>.agg` options."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

import pytest
from kv_table_maker import KvTable, make_info

from strom.common.aggregation import fold_agg_options
from strom.common.config import Configuration
from strom.common.errors import DeletionDisabledError, InvalidConfigError, InvalidTargetColumnError
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor
from strom.common.types import (
    BIGINT,
    BOOLEAN,
    BYTES,
    DECIMAL,
    DOUBLE,
    FLOAT,
    INT,
    STRING,
    TIMESTAMP,
    TINYINT,
)
from strom.server.coordinator.table_validation import apply_table_defaults, validate_table_descriptor
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.recovery import recover

AGG = {"table.merge-engine": "aggregation"}


def agg_table(tmp_path: Path, columns: list[Column], options: dict[str, str], **props: str) -> KvTable:
    schema = fold_agg_options(Schema([Column("k", INT()), *columns], primary_key=["k"]), options)
    return KvTable(tmp_path, make_info(schema, {**AGG, **props}))


def test_numeric_functions_ignore_nulls_and_wrap_like_java(tmp_path: Path) -> None:
    t = agg_table(
        tmp_path,
        [
            Column("total", BIGINT()),
            Column("small", TINYINT()),
            Column("amount", DECIMAL(5, 2)),
            Column("factor", DOUBLE()),
            Column("f32", FLOAT()),
            Column("hi", INT()),
            Column("lo", DOUBLE()),
        ],
        {
            "fields.total.agg": "sum",
            "fields.small.agg": "sum",
            "fields.amount.agg": "sum",
            "fields.factor.agg": "product",
            "fields.f32.agg": "sum",
            "fields.hi.agg": "max",
            "fields.lo.agg": "MIN",  # names are case-insensitive, as in Fluss
        },
    )
    t.put([(1, None, 100, Decimal("1.50"), None, 0.5, None, 3.0)])
    t.put([(1, 5, 100, Decimal("2.25"), 0.9, 0.25, 7, None)])
    t.put([(1, 2**63 - 1, None, None, 0.8, None, -3, -1.5)])
    assert t.lookup(1) == (1, 2**63 + 4 - 2**64, -56, Decimal("3.75"), pytest.approx(0.72), 0.75, 7, -1.5)
    # DECIMAL(5, 2) holds at most 999.99: an overflowing sum becomes null, as Fluss's Decimal does
    t.put([(1, 0, 0, Decimal("999.99"), 1.0, 0.0, 0, 0.0)])
    row = t.lookup(1)
    assert row is not None and row[3] is None


def test_value_functions_and_nulls(tmp_path: Path) -> None:
    t = agg_table(
        tmp_path,
        [
            Column("last", STRING()),
            Column("last_nn", STRING()),  # no function: last_value_ignore_nulls
            Column("first", STRING()),
            Column("first_nn", STRING()),
        ],
        {
            "fields.last.agg": "last_value",
            "fields.first.agg": "first_value",
            "fields.first_nn.agg": "first-value-ignore-nulls",
        },
    )
    t.put([(1, "a", "a", None, None)])
    t.put([(1, None, None, "b", "b")])
    t.put([(1, "c", "c", "c", "c")])
    assert t.lookup(1) == (1, "c", "c", "b", "b")
    t.put([(1, None, None, None, None)])
    assert t.lookup(1) == (1, None, "c", "b", "b")


def test_listagg_bool_and_comparisons_keep_exact_values(tmp_path: Path) -> None:
    t = agg_table(
        tmp_path,
        [
            Column("tags", STRING()),
            Column("path", STRING()),
            Column("all_ok", BOOLEAN()),
            Column("any_alert", BOOLEAN()),
            Column("latest", TIMESTAMP(9)),
            Column("name", STRING()),
        ],
        {
            "fields.tags.agg": "listagg",
            "fields.path.agg": "string_agg",
            "fields.path.string_agg.delimiter": " > ",
            "fields.all_ok.agg": "bool_and",
            "fields.any_alert.agg": "bool_or",
            "fields.latest.agg": "max",
            "fields.name.agg": "min",
        },
    )
    base = dt.datetime(2026, 1, 1, 10, 0, 0, 123456)
    t.put([(1, "dev", "a", True, False, base, "émile")])
    t.put([(1, None, "b", None, None, None, "zoë")])
    t.put([(1, "java", "c", False, True, base - dt.timedelta(seconds=1), "Zed")])
    t.put([(1, "flink", None, True, False, base + dt.timedelta(microseconds=1), None)])
    assert t.lookup(1) == (
        1,
        "dev,java,flink",
        "a > b > c",
        False,
        True,
        base + dt.timedelta(microseconds=1),
        "Zed",
    )


def test_changelog_shows_the_aggregated_rows_and_replay_rebuilds_them(tmp_path: Path) -> None:
    t = agg_table(
        tmp_path / "t",
        [Column("n", BIGINT()), Column("m", DOUBLE()), Column("tags", STRING())],
        {"fields.n.agg": "sum", "fields.m.agg": "max", "fields.tags.agg": "listagg"},
    )
    assert t.put([(1, 1, 2.0, "x"), (1, 2, 1.0, "y")]) == [
        ("+I", (1, 1, 2.0, "x")),
        ("-U", (1, 1, 2.0, "x")),
        ("+U", (1, 3, 2.0, "x,y")),
    ]
    assert t.put([(1, 4, 9.5, None), (2, 7, None, None)]) == [
        ("-U", (1, 3, 2.0, "x,y")),
        ("+U", (1, 7, 9.5, "x,y")),
        ("+I", (2, 7, None, None)),
    ]
    # the changelog carries whole aggregated rows, so replaying it rebuilds the state without re-aggregating
    kv = KvTablet.open(tmp_path / "replayed", t.info, t.log, flushed_offset=0, row_count=0)
    recover(kv, t.log, 0, 0)
    assert t.state(kv) == t.state()
    assert sorted(t.rows(kv)) == [(1, 7, 9.5, "x,y"), (2, 7, None, None)]


def test_deletes_ignored_by_default_allowed_remove_the_row_disabled_refused(tmp_path: Path) -> None:
    columns = [Column("n", BIGINT())]
    ignoring = agg_table(tmp_path / "i", columns, {"fields.n.agg": "sum"})
    ignoring.put([(1, 5)])
    assert ignoring.put([("-", 1)]) == []
    assert ignoring.lookup(1) == (1, 5)

    allowing = agg_table(
        tmp_path / "a", columns, {"fields.n.agg": "sum"}, **{"table.delete.behavior": "allow"}
    )
    allowing.put([(1, 5), (1, 6)])
    assert allowing.put([("-", 1)]) == [("-D", (1, 11))]
    assert allowing.put([(1, 2)]) == [("+I", (1, 2))]  # aggregation starts over: no retraction

    disabled = agg_table(
        tmp_path / "d", columns, {"fields.n.agg": "sum"}, **{"table.delete.behavior": "disable"}
    )
    disabled.put([(1, 5)])
    with pytest.raises(DeletionDisabledError):
        disabled.put([("-", 1)])


def test_partial_updates_aggregate_only_the_target_columns(tmp_path: Path) -> None:
    t = agg_table(
        tmp_path,
        [Column("a", BIGINT()), Column("b", BIGINT()), Column("tags", STRING())],
        {"fields.a.agg": "sum", "fields.b.agg": "sum", "fields.tags.agg": "listagg"},
        **{"table.delete.behavior": "allow"},
    )
    assert t.put([(1, 10, 99, "x")], target_columns=[0, 1]) == [("+I", (1, 10, None, None))]
    t.put([(1, 5, 100, "y")], target_columns=[0, 1, 3])
    t.put([(1, 1, 1, "z")], target_columns=[0, 2])
    assert t.lookup(1) == (1, 15, 1, "y")
    # a partial delete nulls the target columns; the row goes when nothing else is left
    assert t.put([("-", 1)], target_columns=[0, 1, 3]) == [
        ("-U", (1, 15, 1, "y")),
        ("+U", (1, None, 1, None)),
    ]
    assert t.put([("-", 1)], target_columns=[0, 2]) == [("-D", (1, None, 1, None))]
    with pytest.raises(InvalidTargetColumnError, match="primary key"):
        t.put([(1, 1, 1, "z")], target_columns=[1])


# ------------------------------------------------------------------------------ CreateTable rules


def created(
    columns: list[Column], props: dict[str, str], custom: dict[str, str] | None = None
) -> TableDescriptor:
    schema = Schema([Column("k", INT()), *columns], primary_key=["k"])
    descriptor = TableDescriptor(schema, properties={**AGG, **props}, custom_properties=custom or {})
    result = apply_table_defaults(descriptor, Configuration())
    validate_table_descriptor(result, 4096)
    return result


def test_options_fold_into_the_schema_from_properties_or_custom_properties() -> None:
    result = created(
        [Column("n", BIGINT()), Column("tags", STRING()), Column("s", STRING())],
        {"fields.n.agg": "sum", "fields.tags.agg": "listagg", "fields.tags.listagg.delimiter": ";"},
        {"fields.s.agg": "max"},
    )
    assert [c.agg_function for c in result.schema.columns] == [
        None,
        {"type": "sum"},
        {"type": "listagg", "parameters": {"delimiter": ";"}},
        {"type": "max"},
    ]
    assert not any(k.startswith("fields.") for k in result.properties)
    assert result.custom_properties["fields.tags.listagg.delimiter"] == ";"
    # the schema JSON round trip keeps them (it is what GetTableInfo serves)
    again = Schema.from_json(result.schema.to_json())
    assert [c.agg_function for c in again.columns] == [c.agg_function for c in result.schema.columns]


@pytest.mark.parametrize(
    ("columns", "props", "match"),
    [
        ([Column("s", STRING())], {"fields.s.agg": "sum"}, "Invalid aggregation function for column 's'"),
        ([Column("b", BIGINT())], {"fields.b.agg": "bool_or"}, "column 'b': Data type for bool_or"),
        ([Column("b", BIGINT())], {"fields.b.agg": "listagg"}, "column 'b'"),
        ([Column("x", BYTES())], {"fields.x.agg": "max"}, "column 'x'"),
        ([Column("b", BIGINT())], {"fields.b.agg": "average"}, "Unknown aggregation function 'average'"),
        (
            [Column("b", BIGINT())],
            {"fields.nope.agg": "sum"},
            "'fields.nope.agg' names a column that does not",
        ),
        ([Column("s", STRING())], {"fields.s.agg": "listagg", "fields.s.listagg.delimiter": ""}, "non-empty"),
        (
            [Column("b", BIGINT())],
            {"fields.b.agg": "sum", "fields.b.sum.delimiter": ";"},
            "not supported for",
        ),
        ([Column("s", STRING())], {"fields.s.listagg.delimiter": ";"}, "does not use the 'listagg'"),
        ([Column("b", BIGINT())], {"fields.k.agg": "sum"}, "primary key column 'k'"),
        ([Column("x", BYTES())], {"fields.x.agg": "rbm32"}, "does not support the 'rbm32'"),
    ],
)
def test_bad_functions_are_refused_naming_the_column(
    columns: list[Column], props: dict[str, str], match: str
) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(match)) as e:
        created(columns, props)
    assert e.value.code == InvalidConfigError.code


def test_agg_options_without_the_aggregation_engine_are_not_table_properties() -> None:
    schema = Schema([Column("k", INT()), Column("n", BIGINT())], primary_key=["k"])
    descriptor = TableDescriptor(schema, properties={"fields.n.agg": "sum"})
    with pytest.raises(InvalidConfigError, match="not a Fluss table property"):
        validate_table_descriptor(apply_table_defaults(descriptor, Configuration()), 4096)
