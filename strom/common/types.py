"""Fluss data types: their JSON form (as stored in table_json / schema_json) and their Arrow mapping.

A single frozen `DataType` value covers every type root; which optional attributes are meaningful
depends on the root (see the field comments). Constructors named after Fluss's `DataTypes.*`
(``INT()``, ``DECIMAL(10, 2)``, ...) build valid values with Fluss's defaults.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa


class DataTypeRoot(enum.StrEnum):
    """Type roots; each value is the ``type`` string Fluss writes in its JSON."""

    BOOLEAN = "BOOLEAN"
    TINYINT = "TINYINT"
    SMALLINT = "SMALLINT"
    INTEGER = "INTEGER"
    BIGINT = "BIGINT"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    CHAR = "CHAR"
    STRING = "STRING"
    DECIMAL = "DECIMAL"
    DATE = "DATE"
    TIME_WITHOUT_TIME_ZONE = "TIME_WITHOUT_TIME_ZONE"
    TIMESTAMP_WITHOUT_TIME_ZONE = "TIMESTAMP_WITHOUT_TIME_ZONE"
    TIMESTAMP_WITH_LOCAL_TIME_ZONE = "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
    BYTES = "BYTES"
    BINARY = "BINARY"
    ARRAY = "ARRAY"
    MAP = "MAP"
    ROW = "ROW"


# Limits and defaults from Fluss's type classes.
MIN_TIME_PRECISION = 0
MAX_TIME_PRECISION = 9
DEFAULT_TIME_PRECISION = 0
DEFAULT_TIMESTAMP_PRECISION = 6
MIN_DECIMAL_PRECISION = 1
MAX_DECIMAL_PRECISION = 38
DEFAULT_DECIMAL_PRECISION = 10
DEFAULT_DECIMAL_SCALE = 0
# A ROW field whose id was never assigned (Java's DataField default).
UNKNOWN_FIELD_ID = -1

_NO_PARAMS = frozenset(
    {
        DataTypeRoot.BOOLEAN,
        DataTypeRoot.TINYINT,
        DataTypeRoot.SMALLINT,
        DataTypeRoot.INTEGER,
        DataTypeRoot.BIGINT,
        DataTypeRoot.FLOAT,
        DataTypeRoot.DOUBLE,
        DataTypeRoot.STRING,
        DataTypeRoot.BYTES,
        DataTypeRoot.DATE,
    }
)
_TIME_LIKE = frozenset(
    {
        DataTypeRoot.TIME_WITHOUT_TIME_ZONE,
        DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE,
        DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
    }
)
_SIMPLE_SQL_NAMES: dict[DataTypeRoot, str] = {
    DataTypeRoot.BOOLEAN: "BOOLEAN",
    DataTypeRoot.TINYINT: "TINYINT",
    DataTypeRoot.SMALLINT: "SMALLINT",
    DataTypeRoot.INTEGER: "INT",
    DataTypeRoot.BIGINT: "BIGINT",
    DataTypeRoot.FLOAT: "FLOAT",
    DataTypeRoot.DOUBLE: "DOUBLE",
    DataTypeRoot.STRING: "STRING",
    DataTypeRoot.BYTES: "BYTES",
    DataTypeRoot.DATE: "DATE",
}


@dataclass(frozen=True, slots=True)
class DataField:
    """One field of a ROW type."""

    name: str
    type: DataType
    field_id: int = UNKNOWN_FIELD_ID
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"name": self.name, "field_type": self.type.to_json()}
        if self.description is not None:
            obj["description"] = self.description
        obj["field_id"] = self.field_id
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DataField:
        return cls(
            name=str(obj["name"]),
            type=DataType.from_json(obj["field_type"]),
            field_id=int(obj.get("field_id", UNKNOWN_FIELD_ID)),
            description=obj.get("description"),
        )

    def __str__(self) -> str:
        text = f"{_escape_identifier(self.name)} {self.type}"
        if self.description is not None:
            text += " '" + self.description.replace("'", "''") + "'"
        return text


@dataclass(frozen=True, slots=True)
class DataType:
    """A Fluss data type. Build it with the constructors below rather than directly."""

    root: DataTypeRoot
    nullable: bool = True
    length: int | None = None  # CHAR, BINARY
    precision: int | None = None  # DECIMAL, TIME, TIMESTAMP, TIMESTAMP_LTZ
    scale: int | None = None  # DECIMAL
    element_type: DataType | None = None  # ARRAY
    key_type: DataType | None = None  # MAP
    value_type: DataType | None = None  # MAP
    fields: tuple[DataField, ...] = ()  # ROW

    def __post_init__(self) -> None:
        _check_params(self)

    def copy(self, nullable: bool) -> DataType:
        """The same type with other nullability (only the outer type changes, as in Java)."""
        return replace(self, nullable=nullable)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def field_types(self) -> list[DataType]:
        return [f.type for f in self.fields]

    # ---------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        """Fluss's DataTypeJsonSerde form; ``nullable`` appears only as ``false``."""
        obj: dict[str, Any] = {"type": self.root.value}
        if not self.nullable:
            obj["nullable"] = False
        root = self.root
        if root in (DataTypeRoot.CHAR, DataTypeRoot.BINARY):
            obj["length"] = self.length
        elif root is DataTypeRoot.DECIMAL:
            obj["precision"] = self.precision
            obj["scale"] = self.scale
        elif root in _TIME_LIKE:
            obj["precision"] = self.precision
        elif root is DataTypeRoot.ARRAY:
            assert self.element_type is not None
            obj["element_type"] = self.element_type.to_json()
        elif root is DataTypeRoot.MAP:
            assert self.key_type is not None and self.value_type is not None
            obj["key_type"] = self.key_type.to_json()
            obj["value_type"] = self.value_type.to_json()
        elif root is DataTypeRoot.ROW:
            obj["fields"] = [f.to_json() for f in self.fields]
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DataType:
        try:
            root = DataTypeRoot(obj["type"])
        except KeyError as e:
            raise ValueError(f"data type JSON has no 'type': {obj!r}") from e
        except ValueError as e:
            raise ValueError(f"unsupported data type root: {obj.get('type')!r}") from e
        # Java: absent "nullable" means nullable.
        nullable = bool(obj.get("nullable", True))
        try:
            if root in _NO_PARAMS:
                return cls(root, nullable)
            if root in (DataTypeRoot.CHAR, DataTypeRoot.BINARY):
                return cls(root, nullable, length=int(obj["length"]))
            if root is DataTypeRoot.DECIMAL:
                return cls(root, nullable, precision=int(obj["precision"]), scale=int(obj["scale"]))
            if root in _TIME_LIKE:
                return cls(root, nullable, precision=int(obj["precision"]))
            if root is DataTypeRoot.ARRAY:
                return cls(root, nullable, element_type=cls.from_json(obj["element_type"]))
            if root is DataTypeRoot.MAP:
                return cls(
                    root,
                    nullable,
                    key_type=cls.from_json(obj["key_type"]),
                    value_type=cls.from_json(obj["value_type"]),
                )
            fields = tuple(DataField.from_json(f) for f in obj["fields"])
            return cls(root, nullable, fields=fields)
        except KeyError as e:
            raise ValueError(f"{root.value} type JSON lacks {e.args[0]!r}: {obj!r}") from e

    # ---------------------------------------------------------------- Arrow

    def to_arrow(self) -> pa.DataType:
        """The Arrow type Fluss clients use for this type in ARROW log batches."""
        root = self.root
        if root is DataTypeRoot.BOOLEAN:
            return pa.bool_()
        if root is DataTypeRoot.TINYINT:
            return pa.int8()
        if root is DataTypeRoot.SMALLINT:
            return pa.int16()
        if root is DataTypeRoot.INTEGER:
            return pa.int32()
        if root is DataTypeRoot.BIGINT:
            return pa.int64()
        if root is DataTypeRoot.FLOAT:
            return pa.float32()
        if root is DataTypeRoot.DOUBLE:
            return pa.float64()
        if root in (DataTypeRoot.CHAR, DataTypeRoot.STRING):
            return pa.utf8()
        if root is DataTypeRoot.DECIMAL:
            assert self.precision is not None and self.scale is not None
            return pa.decimal128(self.precision, self.scale)
        if root is DataTypeRoot.DATE:
            return pa.date32()
        if root is DataTypeRoot.TIME_WITHOUT_TIME_ZONE:
            unit = _unit_for_precision(self.precision)
            return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
        if root is DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE:
            return pa.timestamp(_unit_for_precision(self.precision))
        if root is DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE:
            return pa.timestamp(_unit_for_precision(self.precision), tz="UTC")
        if root is DataTypeRoot.BYTES:
            return pa.binary()
        if root is DataTypeRoot.BINARY:
            assert self.length is not None
            return pa.binary(self.length)
        if root is DataTypeRoot.ARRAY:
            assert self.element_type is not None
            return pa.list_(pa.field("item", self.element_type.to_arrow(), self.element_type.nullable))
        if root is DataTypeRoot.MAP:
            assert self.key_type is not None and self.value_type is not None
            # Arrow requires non-null map keys, whatever the Fluss key type says.
            return pa.map_(
                pa.field("key", self.key_type.to_arrow(), nullable=False),
                pa.field("value", self.value_type.to_arrow(), self.value_type.nullable),
            )
        return pa.struct([pa.field(f.name, f.type.to_arrow(), f.type.nullable) for f in self.fields])

    def to_arrow_field(self, name: str) -> pa.Field:
        return pa.field(name, self.to_arrow(), nullable=self.nullable)

    @classmethod
    def from_arrow(cls, t: pa.DataType, nullable: bool = True) -> DataType:
        """The Fluss type for an Arrow type, as the Fluss Rust client (pyfluss) maps it.

        Unsigned integers map to the signed type of the same width; large and view strings and
        binaries to STRING / BYTES; dictionaries to their value type; date64 to DATE; time and
        timestamp units to precision 0/3/6/9; zoned timestamps to TIMESTAMP_LTZ whatever the zone;
        large lists to ARRAY. Checked against pyfluss 1.0.0's ``Schema(pa.schema)``.
        """
        pt = pa.types
        result: DataType
        if pt.is_boolean(t):
            result = BOOLEAN()
        elif pt.is_int8(t) or pt.is_uint8(t):
            result = TINYINT()
        elif pt.is_int16(t) or pt.is_uint16(t):
            result = SMALLINT()
        elif pt.is_int32(t) or pt.is_uint32(t):
            result = INT()
        elif pt.is_int64(t) or pt.is_uint64(t):
            result = BIGINT()
        elif pt.is_float32(t):
            result = FLOAT()
        elif pt.is_float64(t):
            result = DOUBLE()
        elif pt.is_string(t) or pt.is_large_string(t) or pt.is_string_view(t):
            result = STRING()
        elif pt.is_binary(t) or pt.is_large_binary(t) or pt.is_binary_view(t):
            result = BYTES()
        elif pt.is_dictionary(t):
            # The wheel maps a dictionary-encoded column to its value type.
            result = cls.from_arrow(t.value_type)
        elif pt.is_fixed_size_binary(t):
            result = BINARY(t.byte_width)
        elif pt.is_date32(t) or pt.is_date64(t):
            result = DATE()
        elif pt.is_decimal128(t):
            if t.scale < 0:
                raise ValueError(f"decimal scale must be >= 0, got {t.scale}")
            result = DECIMAL(t.precision, t.scale)
        elif pt.is_time32(t) or pt.is_time64(t):
            result = TIME(_precision_for_unit(t.unit))
        elif pt.is_timestamp(t):
            precision = _precision_for_unit(t.unit)
            result = TIMESTAMP_LTZ(precision) if t.tz is not None else TIMESTAMP(precision)
        elif pt.is_list(t) or pt.is_large_list(t):
            result = ARRAY(cls.from_arrow_field(t.value_field))
        elif pt.is_map(t):
            result = MAP(cls.from_arrow_field(t.key_field), cls.from_arrow_field(t.item_field))
        elif pt.is_struct(t):
            result = ROW(
                [DataField(t.field(i).name, cls.from_arrow_field(t.field(i))) for i in range(t.num_fields)]
            )
        else:
            raise ValueError(f"cannot convert Arrow type {t} to a Fluss type")
        return result if nullable else result.copy(False)

    @classmethod
    def from_arrow_field(cls, field: pa.Field) -> DataType:
        return cls.from_arrow(field.type, field.nullable)

    # ---------------------------------------------------------------- text

    def __str__(self) -> str:
        root = self.root
        if root in _SIMPLE_SQL_NAMES:
            text = _SIMPLE_SQL_NAMES[root]
        elif root is DataTypeRoot.CHAR:
            text = f"CHAR({self.length})"
        elif root is DataTypeRoot.BINARY:
            text = f"BINARY({self.length})"
        elif root is DataTypeRoot.DECIMAL:
            text = f"DECIMAL({self.precision}, {self.scale})"
        elif root is DataTypeRoot.TIME_WITHOUT_TIME_ZONE:
            text = f"TIME({self.precision})"
        elif root is DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE:
            text = f"TIMESTAMP({self.precision})"
        elif root is DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE:
            text = f"TIMESTAMP_LTZ({self.precision})"
        elif root is DataTypeRoot.ARRAY:
            text = f"ARRAY<{self.element_type}>"
        elif root is DataTypeRoot.MAP:
            text = f"MAP<{self.key_type}, {self.value_type}>"
        else:
            text = "ROW<" + ", ".join(str(f) for f in self.fields) + ">"
        return text if self.nullable else text + " NOT NULL"


def _escape_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _unit_for_precision(precision: int | None) -> str:
    p = DEFAULT_TIME_PRECISION if precision is None else precision
    if p == 0:
        return "s"
    if p <= 3:
        return "ms"
    if p <= 6:
        return "us"
    return "ns"


def _precision_for_unit(unit: str) -> int:
    return {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]


MAX_LENGTH = 2**31 - 1  # Fluss's CHAR/BINARY limit (Java's Integer.MAX_VALUE)


def _check_params(t: DataType) -> None:
    """Reject parameter values Fluss's type constructors reject."""
    root = t.root
    if root in (DataTypeRoot.CHAR, DataTypeRoot.BINARY):
        if t.length is None or not 1 <= t.length <= MAX_LENGTH:
            raise ValueError(f"{root.value} length must be between 1 and {MAX_LENGTH}, got {t.length}")
    elif root is DataTypeRoot.DECIMAL:
        if t.precision is None or not MIN_DECIMAL_PRECISION <= t.precision <= MAX_DECIMAL_PRECISION:
            raise ValueError(
                f"DECIMAL precision must be between {MIN_DECIMAL_PRECISION} and "
                f"{MAX_DECIMAL_PRECISION} (both inclusive), got {t.precision}"
            )
        if t.scale is None or not 0 <= t.scale <= t.precision:
            raise ValueError(
                f"DECIMAL scale must be between 0 and the precision {t.precision} "
                f"(both inclusive), got {t.scale}"
            )
    elif root in _TIME_LIKE:
        if t.precision is None or not MIN_TIME_PRECISION <= t.precision <= MAX_TIME_PRECISION:
            raise ValueError(
                f"{root.value} precision must be between {MIN_TIME_PRECISION} and "
                f"{MAX_TIME_PRECISION} (both inclusive), got {t.precision}"
            )
    elif root is DataTypeRoot.ARRAY:
        if t.element_type is None:
            raise ValueError("ARRAY needs an element type")
    elif root is DataTypeRoot.MAP:
        if t.key_type is None or t.value_type is None:
            raise ValueError("MAP needs a key type and a value type")
    elif root is DataTypeRoot.ROW:
        names = [f.name for f in t.fields]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Field names must be unique. Found duplicates: {duplicates}")


# ---------------------------------------------- constructors (named after Fluss's DataTypes)


def BOOLEAN() -> DataType:
    return DataType(DataTypeRoot.BOOLEAN)


def TINYINT() -> DataType:
    return DataType(DataTypeRoot.TINYINT)


def SMALLINT() -> DataType:
    return DataType(DataTypeRoot.SMALLINT)


def INT() -> DataType:
    return DataType(DataTypeRoot.INTEGER)


def BIGINT() -> DataType:
    return DataType(DataTypeRoot.BIGINT)


def FLOAT() -> DataType:
    return DataType(DataTypeRoot.FLOAT)


def DOUBLE() -> DataType:
    return DataType(DataTypeRoot.DOUBLE)


def CHAR(length: int) -> DataType:
    return DataType(DataTypeRoot.CHAR, length=length)


def STRING() -> DataType:
    return DataType(DataTypeRoot.STRING)


def DECIMAL(precision: int, scale: int = DEFAULT_DECIMAL_SCALE) -> DataType:
    return DataType(DataTypeRoot.DECIMAL, precision=precision, scale=scale)


def DATE() -> DataType:
    return DataType(DataTypeRoot.DATE)


def TIME(p: int = DEFAULT_TIME_PRECISION) -> DataType:
    return DataType(DataTypeRoot.TIME_WITHOUT_TIME_ZONE, precision=p)


def TIMESTAMP(p: int = DEFAULT_TIMESTAMP_PRECISION) -> DataType:
    return DataType(DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE, precision=p)


def TIMESTAMP_LTZ(p: int = DEFAULT_TIMESTAMP_PRECISION) -> DataType:
    return DataType(DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE, precision=p)


def BYTES() -> DataType:
    return DataType(DataTypeRoot.BYTES)


def BINARY(length: int) -> DataType:
    return DataType(DataTypeRoot.BINARY, length=length)


def ARRAY(element_type: DataType) -> DataType:
    return DataType(DataTypeRoot.ARRAY, element_type=element_type)


def MAP(key_type: DataType, value_type: DataType) -> DataType:
    return DataType(DataTypeRoot.MAP, key_type=key_type, value_type=value_type)


def ROW(fields: Iterable[DataField]) -> DataType:
    return DataType(DataTypeRoot.ROW, fields=tuple(fields))


# -------------------------------------------------------------------- helpers


def row_type_to_arrow_schema(names: Iterable[str], types: Iterable[DataType]) -> pa.Schema:
    """An Arrow schema for columns given as parallel name and type sequences."""
    return pa.schema([t.to_arrow_field(n) for n, t in zip(names, types, strict=True)])


def is_integral(t: DataType) -> bool:
    return t.root in (DataTypeRoot.TINYINT, DataTypeRoot.SMALLINT, DataTypeRoot.INTEGER, DataTypeRoot.BIGINT)
