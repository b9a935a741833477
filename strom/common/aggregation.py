"""Aggregate functions of the AGGREGATION merge engine: names, parameters, accepted types, options.

A column's function lives in the schema (`Column.agg_function`, Fluss's JSON
``{"type": "sum", "parameters": {"delimiter": ";"}}``), which is where Fluss's Java client puts it.
Clients without a schema API for it (pyfluss, Spark, SQL users) give it as table options, as Fluss's
Flink connector does: ``fields.<column>.agg = <function>`` and
``fields.<column>.<function>.<parameter> = <value>`` (e.g. ``fields.tags.listagg.delimiter = ;``).
At CreateTable the coordinator folds those options into the schema (`fold_agg_options`), so the
servers read one source of truth. A non-key column without a function uses
``last_value_ignore_nulls``; primary-key columns keep their value.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from strom.common.schema import Schema
from strom.common.types import DataType, DataTypeRoot

__all__ = [
    "AGG_OPTION_PREFIX",
    "UNSUPPORTED_AGG_FUNCTIONS",
    "AggFunction",
    "AggFunctionType",
    "agg_functions",
    "fold_agg_options",
    "is_agg_option",
]

AGG_OPTION_PREFIX = "fields."
_AGG_SUFFIX = ".agg"
PARAM_DELIMITER = "delimiter"
DEFAULT_LISTAGG_DELIMITER = ","

_R = DataTypeRoot


class AggFunctionType(enum.StrEnum):
    """Fluss's AggFunctionType; the value is the name written in JSON and options."""

    SUM = "sum"
    PRODUCT = "product"
    MAX = "max"
    MIN = "min"
    LAST_VALUE = "last_value"
    LAST_VALUE_IGNORE_NULLS = "last_value_ignore_nulls"
    FIRST_VALUE = "first_value"
    FIRST_VALUE_IGNORE_NULLS = "first_value_ignore_nulls"
    LISTAGG = "listagg"
    STRING_AGG = "string_agg"  # an alias of listagg
    BOOL_AND = "bool_and"
    BOOL_OR = "bool_or"
    RBM32 = "rbm32"
    RBM64 = "rbm64"

    @classmethod
    def parse(cls, name: str) -> AggFunctionType | None:
        """Like Fluss: case-insensitive, '-' taken as '_'; None for an unknown name."""
        try:
            return cls(name.strip().replace("-", "_").lower())
        except ValueError:
            return None

    @property
    def supported_roots(self) -> tuple[DataTypeRoot, ...]:
        return _SUPPORTED_ROOTS.get(self, tuple(DataTypeRoot))

    @property
    def supported_parameters(self) -> frozenset[str]:
        return frozenset({PARAM_DELIMITER}) if self in (self.LISTAGG, self.STRING_AGG) else frozenset()


# Fluss's RoaringBitmap unions, which Strom does not implement yet (refused at CreateTable).
UNSUPPORTED_AGG_FUNCTIONS = frozenset({AggFunctionType.RBM32, AggFunctionType.RBM64})

_NUMERIC = (_R.TINYINT, _R.SMALLINT, _R.INTEGER, _R.BIGINT, _R.FLOAT, _R.DOUBLE, _R.DECIMAL)
_COMPARABLE = (
    _R.CHAR,
    _R.STRING,
    *_NUMERIC,
    _R.DATE,
    _R.TIME_WITHOUT_TIME_ZONE,
    _R.TIMESTAMP_WITHOUT_TIME_ZONE,
    _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
)
_SUPPORTED_ROOTS: dict[AggFunctionType, tuple[DataTypeRoot, ...]] = {
    AggFunctionType.SUM: _NUMERIC,
    AggFunctionType.PRODUCT: _NUMERIC,
    AggFunctionType.MAX: _COMPARABLE,
    AggFunctionType.MIN: _COMPARABLE,
    AggFunctionType.LISTAGG: (_R.STRING, _R.CHAR),
    AggFunctionType.STRING_AGG: (_R.STRING, _R.CHAR),
    AggFunctionType.BOOL_AND: (_R.BOOLEAN,),
    AggFunctionType.BOOL_OR: (_R.BOOLEAN,),
    AggFunctionType.RBM32: (_R.BYTES,),
    AggFunctionType.RBM64: (_R.BYTES,),
}


@dataclass(frozen=True, slots=True)
class AggFunction:
    type: AggFunctionType
    parameters: dict[str, str] = field(default_factory=dict)

    @property
    def delimiter(self) -> str:
        return self.parameters.get(PARAM_DELIMITER, DEFAULT_LISTAGG_DELIMITER)

    def check(self, column: str, data_type: DataType) -> None:
        """ValueError naming the column for a parameter or a type the function does not take."""
        for name, value in self.parameters.items():
            if name not in self.type.supported_parameters:
                supported = sorted(self.type.supported_parameters) or "none"
                raise ValueError(
                    f"Invalid aggregation function for column '{column}': Parameter '{name}' is not "
                    f"supported for aggregation function '{self.type}'. Supported parameters: {supported}"
                )
            if name == PARAM_DELIMITER and not value:
                raise ValueError(
                    f"Invalid aggregation function for column '{column}': Parameter '{name}' for "
                    f"aggregation function '{self.type}' must be a non-empty string"
                )
        roots = self.type.supported_roots
        if data_type.root not in roots:
            raise ValueError(
                f"Invalid aggregation function for column '{column}': Data type for {self.type} column "
                f"must be part of [{', '.join(r.value for r in roots)}] but was '{data_type}'."
            )

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"type": self.type.value}
        if self.parameters:
            obj["parameters"] = dict(self.parameters)
        return obj

    @classmethod
    def from_json(cls, column: str, obj: Mapping[str, Any]) -> AggFunction:
        name = str(obj.get("type", ""))
        agg_type = AggFunctionType.parse(name)
        if agg_type is None:
            raise ValueError(f"Unknown aggregation function '{name}' for column '{column}'.")
        params = obj.get("parameters") or {}
        return cls(agg_type, {str(k): str(v) for k, v in dict(params).items()})


_PRIMARY_KEY = AggFunction(AggFunctionType.LAST_VALUE)
_DEFAULT = AggFunction(AggFunctionType.LAST_VALUE_IGNORE_NULLS)


def agg_functions(schema: Schema) -> list[AggFunction]:
    """Each column's function: key columns keep the last value, others default to last non-null."""
    pk = set(schema.primary_key or ())
    out = []
    for column in schema.columns:
        if column.name in pk:
            out.append(_PRIMARY_KEY)
        elif column.agg_function is None:
            out.append(_DEFAULT)
        else:
            out.append(AggFunction.from_json(column.name, column.agg_function))
    return out


def is_agg_option(key: str) -> bool:
    return key.startswith(AGG_OPTION_PREFIX)


def _column_options(schema: Schema, options: Mapping[str, str]) -> Iterator[tuple[str, str, str]]:
    """(column, rest, value) for every ``fields.<column>.<rest>`` option; ValueError for unknown columns."""
    names = schema.column_names
    # Longest names first, so a column named "a.b" wins over a column "a".
    by_length = sorted(names, key=len, reverse=True)
    for key, value in options.items():
        if not is_agg_option(key):
            continue
        tail = key[len(AGG_OPTION_PREFIX) :]
        column = next((n for n in by_length if tail.startswith(n + ".")), None)
        if column is None:
            raise ValueError(f"Option '{key}' names a column that does not exist in the schema {names}.")
        yield column, tail[len(column) + 1 :], value


def fold_agg_options(schema: Schema, options: Mapping[str, str]) -> Schema:
    """The schema with the functions given as ``fields.*`` options set on its columns.

    ValueError (naming the option or column) for an unknown function or column, a parameter without
    its function, or a function that contradicts one the schema already carries.
    """
    functions: dict[str, AggFunctionType] = {}
    params: dict[str, dict[str, str]] = {}
    param_function: dict[str, str] = {}  # column -> the function its parameters were given for
    for name, rest, value in _column_options(schema, options):
        if rest == _AGG_SUFFIX[1:]:
            agg_type = AggFunctionType.parse(value)
            if agg_type is None:
                known = ", ".join(t.value for t in AggFunctionType)
                raise ValueError(
                    f"Unknown aggregation function '{value}' in 'fields.{name}.agg'. Supported: {known}."
                )
            functions[name] = agg_type
        else:
            given_function, _, param = rest.partition(".")
            if not param:
                raise ValueError(f"Option 'fields.{name}.{rest}' is not an aggregation option.")
            params.setdefault(name, {})[param] = value
            param_function[name] = given_function
    if not functions and not params:
        return schema
    columns = []
    for column in schema.columns:
        agg_type = functions.get(column.name)
        given = params.get(column.name, {})
        function = param_function.get(column.name)
        if function is not None and (agg_type is None or AggFunctionType.parse(function) is not agg_type):
            raise ValueError(
                f"Option 'fields.{column.name}.{function}.*' is given, but column '{column.name}' does "
                f"not use the '{function}' aggregation function."
            )
        if agg_type is not None:
            folded = AggFunction(agg_type, given).to_json()
            if column.agg_function is not None and column.agg_function != folded:
                raise ValueError(
                    f"Column '{column.name}' has aggregation function {column.agg_function} in its schema "
                    f"and {folded} in its options."
                )
            column = replace(column, agg_function=folded)
        columns.append(column)
    return replace(schema, columns=columns)
