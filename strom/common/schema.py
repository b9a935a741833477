"""Table schemas: columns with stable ids, the primary key, and their JSON and Arrow forms.

Column ids (and ids of nested ROW fields) never change once assigned, so later schema versions
can add columns without renumbering. When a schema is built from columns without ids, ids are
assigned the way Fluss's Schema.Builder does: in column order, each column's id first, then the
ids of the ROW fields nested in its type, depth first. `highest_field_id` is the largest id ever
handed out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from strom.common.types import UNKNOWN_FIELD_ID, DataField, DataType, DataTypeRoot

# The first schema of every table has id 1.
DEFAULT_SCHEMA_ID = 1
UNKNOWN_COLUMN_ID = -1
SCHEMA_JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    data_type: DataType
    comment: str | None = None
    column_id: int = UNKNOWN_COLUMN_ID
    # Aggregation function of an AGGREGATION merge-engine table, kept as Fluss's JSON
    # ({"type": ..., "parameters": {...}?}) so it survives a round trip.
    agg_function: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"name": self.name, "data_type": self.data_type.to_json()}
        if self.comment is not None:
            obj["comment"] = self.comment
        if self.agg_function is not None:
            obj["agg_function"] = self.agg_function
        obj["id"] = self.column_id
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Column:
        if "name" not in obj:
            raise ValueError(f"column JSON has no 'name': {obj!r}")
        if "data_type" not in obj:
            raise ValueError(f"column '{obj['name']}' has no 'data_type'")
        comment = obj.get("comment")
        agg = obj.get("agg_function")
        return cls(
            name=str(obj["name"]),
            data_type=DataType.from_json(obj["data_type"]),
            comment=None if comment is None else str(comment),
            column_id=int(obj.get("id", UNKNOWN_COLUMN_ID)),
            agg_function=agg if isinstance(agg, dict) else None,
        )

    def __str__(self) -> str:
        text = f"{self.name} {self.data_type}"
        if self.comment is not None:
            text += " COMMENT '" + self.comment.replace("'", "''") + "'"
        return text


@dataclass(frozen=True)
class Schema:
    """Columns, optional primary key and the highest field id.

    Primary-key columns are made NOT NULL. Columns without ids get ids assigned (see module doc);
    `highest_field_id` defaults to the largest id in use. Structural problems raise ValueError.
    """

    columns: list[Column]
    primary_key: list[str] | None = None
    highest_field_id: int = field(default=-1)
    auto_increment_columns: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        columns = list(self.columns)
        with_ids = sum(1 for c in columns if c.column_id != UNKNOWN_COLUMN_ID)
        highest = self.highest_field_id
        assigned = False
        if columns and with_ids == 0:
            # Like Java's Schema.Builder.fromColumns: numbering starts at 0 whatever the given
            # highest id; the larger of the two is kept.
            columns, last = assign_field_ids(columns, -1)
            highest, assigned = max(highest, last), True
        elif with_ids != len(columns):
            raise ValueError("All columns must have columnId or none of them must have columnId.")
        all_ids = _all_field_ids(columns)
        if len(set(all_ids)) != len(all_ids):
            raise ValueError(
                f"All field IDs (including nested fields) must be unique. Found {len(set(all_ids))} "
                f"unique IDs but expected {len(all_ids)}."
            )
        max_id = max(all_ids, default=-1)
        if highest == -1 or assigned:
            # Not given: the largest id in use is the highest handed out.
            highest = max(highest, max_id)
        elif highest < max_id:
            raise ValueError(
                f"Highest field ID ({highest}) must be greater than or equal to the maximum field ID "
                f"({max_id}) including nested fields."
            )
        names = [c.name for c in columns]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Table column {names} must not contain duplicate fields. Found: {duplicates}")
        pk = None if self.primary_key is None else list(self.primary_key)
        auto_inc = list(self.auto_increment_columns)
        if pk is not None:
            columns = _normalize_primary_key(columns, names, pk, auto_inc)
        elif auto_inc:
            raise ValueError("Auto increment column can only be used in primary-key table.")
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "primary_key", pk)
        object.__setattr__(self, "highest_field_id", highest)
        object.__setattr__(self, "auto_increment_columns", auto_inc)

    # ------------------------------------------------------------------ accessors

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def column_ids(self) -> list[int]:
        return [c.column_id for c in self.columns]

    @property
    def row_type(self) -> list[DataType]:
        return [c.data_type for c in self.columns]

    def row_type_as_row(self) -> DataType:
        """The schema as a ROW type whose field ids are the column ids."""
        return DataType(
            DataTypeRoot.ROW,
            nullable=True,
            fields=tuple(DataField(c.name, c.data_type, c.column_id) for c in self.columns),
        )

    @property
    def has_primary_key(self) -> bool:
        return self.primary_key is not None

    @property
    def primary_key_names(self) -> list[str]:
        return list(self.primary_key or [])

    @property
    def primary_key_indexes(self) -> list[int]:
        names = self.column_names
        return [names.index(k) for k in self.primary_key or []]

    def column_index(self, name: str) -> int:
        """Position of `name`, -1 if absent."""
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        return -1

    def column_indexes(self, names: Iterable[str]) -> list[int]:
        return [self.column_index(n) for n in names]

    def get_column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"Column {name} does not exist in schema.")

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "version": SCHEMA_JSON_VERSION,
            "columns": [c.to_json() for c in self.columns],
        }
        if self.primary_key is not None:
            obj["primary_key"] = list(self.primary_key)
        if self.auto_increment_columns:
            obj["auto_increment_column"] = list(self.auto_increment_columns)
        obj["highest_field_id"] = self.highest_field_id
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Schema:
        if not isinstance(obj, dict) or "columns" not in obj:
            raise ValueError("schema JSON has no 'columns'")
        columns = [Column.from_json(c) for c in obj["columns"]]
        pk = obj.get("primary_key")
        if pk is not None and not pk:
            raise ValueError("Primary key constraint must be defined for at least a single column.")
        return cls(
            columns=columns,
            primary_key=None if pk is None else [str(k) for k in pk],
            highest_field_id=int(obj.get("highest_field_id", -1)),
            auto_increment_columns=[str(c) for c in obj.get("auto_increment_column", [])],
        )

    def to_json_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> Schema:
        return cls.from_json(json.loads(data))

    # ------------------------------------------------------------------ Arrow

    def to_arrow_schema(self) -> pa.Schema:
        return pa.schema([c.data_type.to_arrow_field(c.name) for c in self.columns])

    @classmethod
    def from_arrow_schema(cls, schema: pa.Schema, primary_key: Sequence[str] | None = None) -> Schema:
        """Columns from an Arrow schema (mapped as pyfluss maps them); ids are assigned."""
        columns = [Column(f.name, DataType.from_arrow_field(f)) for f in schema]
        return cls(columns, None if primary_key is None else list(primary_key))

    def __str__(self) -> str:
        parts = [str(c) for c in self.columns]
        if self.primary_key:
            parts.append("PRIMARY KEY (" + ", ".join(self.primary_key) + ")")
        return "(" + ", ".join(parts) + ")"


# ---------------------------------------------------------------------- helpers


def assign_field_ids(columns: list[Column], highest: int) -> tuple[list[Column], int]:
    """Ids after `highest` for the columns and the fields nested in them, depth first; also returns the
    last id handed out."""
    counter = [highest]

    def next_id() -> int:
        counter[0] += 1
        return counter[0]

    def reassign(t: DataType) -> DataType:
        if t.root is DataTypeRoot.ARRAY:
            assert t.element_type is not None
            return replace(t, element_type=reassign(t.element_type))
        if t.root is DataTypeRoot.MAP:
            assert t.key_type is not None and t.value_type is not None
            key = reassign(t.key_type)
            return replace(t, key_type=key, value_type=reassign(t.value_type))
        if t.root is DataTypeRoot.ROW:
            fields = []
            for f in t.fields:
                fid = next_id()
                fields.append(DataField(f.name, reassign(f.type), fid, f.description))
            return replace(t, fields=tuple(fields))
        return t

    result = []
    for c in columns:
        cid = next_id()
        result.append(replace(c, data_type=reassign(c.data_type), column_id=cid))
    return result, counter[0]


def _all_field_ids(columns: Iterable[Column]) -> list[int]:
    ids: list[int] = []

    def visit(t: DataType) -> None:
        if t.root is DataTypeRoot.ROW:
            for f in t.fields:
                ids.append(f.field_id)
                visit(f.type)
        elif t.root is DataTypeRoot.ARRAY and t.element_type is not None:
            visit(t.element_type)
        elif t.root is DataTypeRoot.MAP and t.key_type is not None and t.value_type is not None:
            visit(t.key_type)
            visit(t.value_type)

    for c in columns:
        ids.append(c.column_id)
        visit(c.data_type)
    # Nested fields that were never numbered (-1) are not ids in use.
    return [i for i in ids if i != UNKNOWN_FIELD_ID]


def _normalize_primary_key(
    columns: list[Column], names: list[str], pk: list[str], auto_inc: list[str]
) -> list[Column]:
    if not pk:
        raise ValueError("Primary key constraint must be defined for at least a single column.")
    duplicates = sorted({n for n in pk if pk.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"Primary key constraint {pk} must not contain duplicate columns. Found: {duplicates}"
        )
    missing = [k for k in pk if k not in names]
    if missing:
        raise ValueError(f"Table column {names} should include all primary key constraint {pk}")
    for col in auto_inc:
        if col not in names:
            raise ValueError(f"Auto increment column {col} does not exist in table columns {names}.")
        if col in pk:
            raise ValueError("Auto increment column can not be used as the primary key.")
    result = []
    for c in columns:
        if c.agg_function is not None and c.name in pk:
            raise ValueError(
                f"Cannot set aggregation function for primary key column '{c.name}'. "
                "Primary key columns automatically use 'primary-key' aggregation."
            )
        if c.name in auto_inc and c.data_type.root not in (DataTypeRoot.INTEGER, DataTypeRoot.BIGINT):
            raise ValueError("The data type of auto increment column must be INT or BIGINT.")
        if c.name in pk and c.data_type.nullable:
            c = replace(c, data_type=c.data_type.copy(False))
        result.append(c)
    return result
