"""Row predicates pushed down with FetchLog (Fluss's `PbPredicate`), evaluated on Arrow batches.

A predicate names columns by their schema column id. The server uses it only to skip batches that
cannot match (the client filters rows again), so evaluation is conservative: a batch is kept when
any row may match.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strom.common.errors import InvalidScanRequestError
from strom.record import values as conv


class LeafFunction(enum.IntEnum):
    EQUAL = 0
    NOT_EQUAL = 1
    LESS_THAN = 2
    LESS_OR_EQUAL = 3
    GREATER_THAN = 4
    GREATER_OR_EQUAL = 5
    IS_NULL = 6
    IS_NOT_NULL = 7
    STARTS_WITH = 8
    CONTAINS = 9
    ENDS_WITH = 10
    IN = 11
    NOT_IN = 12


class CompoundFunction(enum.IntEnum):
    AND = 0
    OR = 1


class LiteralType(enum.IntEnum):
    BOOLEAN = 0
    TINYINT = 1
    SMALLINT = 2
    INT = 3
    BIGINT = 4
    FLOAT = 5
    DOUBLE = 6
    CHAR = 7
    VARCHAR = 8
    DECIMAL = 9
    DATE = 10
    TIME = 11
    TIMESTAMP = 12
    TIMESTAMP_LTZ = 13
    BINARY = 14
    BYTES = 15


@dataclass(frozen=True, slots=True)
class Leaf:
    function: LeafFunction
    field_id: int
    literals: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Compound:
    function: CompoundFunction
    children: tuple[Predicate, ...]


Predicate = Leaf | Compound

_EPOCH = dt.date(1970, 1, 1)
_UTC = dt.UTC


# the value field each literal type is read from; DATE is a bigint_value as Fluss's
# PredicateMessageUtils writes it (older Strom clients sent int_value, still accepted)
_VALUE_FIELD: dict[LiteralType, str] = {
    LiteralType.BOOLEAN: "boolean_value",
    LiteralType.TINYINT: "int_value",
    LiteralType.SMALLINT: "int_value",
    LiteralType.INT: "int_value",
    LiteralType.BIGINT: "bigint_value",
    LiteralType.FLOAT: "float_value",
    LiteralType.DOUBLE: "double_value",
    LiteralType.CHAR: "string_value",
    LiteralType.VARCHAR: "string_value",
    LiteralType.BINARY: "binary_value",
    LiteralType.BYTES: "binary_value",
    LiteralType.DATE: "bigint_value",
    LiteralType.TIME: "int_value",
    LiteralType.DECIMAL: "decimal_value",
    LiteralType.TIMESTAMP: "timestamp_millis_value",
    LiteralType.TIMESTAMP_LTZ: "timestamp_millis_value",
}

# literal types interchangeable with each other for one column (as Fluss's validateLiteralType)
_SAME_FAMILY: dict[LiteralType, LiteralType] = {
    LiteralType.CHAR: LiteralType.VARCHAR,
    LiteralType.BYTES: LiteralType.BINARY,
}


def _literal_type(literal: Any) -> LiteralType:
    for name in ("literal_type", "is_null"):
        if not literal.HasField(name):
            raise ValueError(f"a literal without its required field {name}")
    try:
        return LiteralType(literal.literal_type)
    except ValueError:
        raise ValueError(f"unknown literal type {literal.literal_type}") from None


def _literal_from_pb(literal: Any) -> Any:
    kind = _literal_type(literal)
    if literal.is_null:
        return None
    field = _VALUE_FIELD[kind]
    present = literal.HasField(field)
    if kind == LiteralType.DECIMAL:
        present = present or literal.HasField("decimal_bytes")
    elif kind == LiteralType.DATE:
        present = present or literal.HasField("int_value")
    if not present:
        # a missing value would read as 0 or "" and the filter would skip batches on a value
        # nobody asked for
        raise ValueError(f"a non-null {kind.name} literal without its {field}")
    if kind == LiteralType.BOOLEAN:
        return literal.boolean_value
    if kind in (LiteralType.TINYINT, LiteralType.SMALLINT, LiteralType.INT):
        return literal.int_value
    if kind == LiteralType.BIGINT:
        return literal.bigint_value
    if kind == LiteralType.FLOAT:
        return literal.float_value
    if kind == LiteralType.DOUBLE:
        return literal.double_value
    if kind in (LiteralType.CHAR, LiteralType.VARCHAR):
        return literal.string_value
    if kind in (LiteralType.BINARY, LiteralType.BYTES):
        return literal.binary_value
    if kind == LiteralType.DATE:
        days = literal.bigint_value if literal.HasField("bigint_value") else literal.int_value
        return _EPOCH + dt.timedelta(days=days)
    if kind == LiteralType.TIME:
        return (dt.datetime.min + dt.timedelta(milliseconds=literal.int_value)).time()
    if kind == LiteralType.DECIMAL:
        # the scale comes from the column; keep the unscaled value and scale later
        if literal.HasField("decimal_bytes"):
            return _Unscaled(int.from_bytes(literal.decimal_bytes, "big", signed=True))
        return _Unscaled(literal.decimal_value)
    # TIMESTAMP, TIMESTAMP_LTZ
    micros = literal.timestamp_millis_value * 1000 + literal.timestamp_nano_of_millis_value // 1000
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    return moment.replace(tzinfo=_UTC) if kind == LiteralType.TIMESTAMP_LTZ else moment


@dataclass(frozen=True, slots=True)
class _Unscaled:
    value: int


def unscaled_literal(value: Any) -> int:
    """The unscaled integer (at its column's scale) of a DECIMAL literal; TypeError for any other."""
    if not isinstance(value, _Unscaled):
        raise TypeError(f"{value!r} is not a DECIMAL literal")
    return value.value


_NO_LITERAL = frozenset({LeafFunction.IS_NULL, LeafFunction.IS_NOT_NULL})
_LITERAL_SET = frozenset({LeafFunction.IN, LeafFunction.NOT_IN})
_STRING_MATCH = frozenset({LeafFunction.STARTS_WITH, LeafFunction.CONTAINS, LeafFunction.ENDS_WITH})


def predicate_from_pb(message: Any, column_types: dict[int, Any] | None = None) -> Predicate:
    """Decode a `PbPredicate`; malformed input raises InvalidScanRequestError.

    With `column_types` (schema column id -> Fluss `DataType`) the predicate is also checked against
    the schema, as Fluss resolves it against the row type: every column id must exist and each
    literal's type must be the column's. A filter is only ever used to skip batches, so one that
    cannot be read exactly is refused, never evaluated as something else (an empty `PbPredicate`
    once read as `column 0 = <nothing>` and skipped every batch).
    """
    try:
        return _decode(message, column_types)
    except ValueError as e:
        raise InvalidScanRequestError(f"invalid filter predicate: {e}") from None


def _decode(message: Any, column_types: dict[int, Any] | None) -> Predicate:
    if not message.HasField("type"):
        raise ValueError("the predicate type is missing")
    if message.type == 0:
        if not message.HasField("leaf"):
            raise ValueError("a leaf predicate without its leaf")
        return _decode_leaf(message.leaf, column_types)
    if message.type == 1:
        if not message.HasField("compound"):
            raise ValueError("a compound predicate without its compound")
        compound = message.compound
        if not compound.HasField("function"):
            raise ValueError("a compound predicate without its function")
        try:
            function = CompoundFunction(compound.function)
        except ValueError:
            raise ValueError(f"unknown compound function {compound.function}") from None
        if not compound.children:
            raise ValueError("a compound predicate needs at least one child")
        return Compound(function, tuple(_decode(child, column_types) for child in compound.children))
    raise ValueError(f"unknown predicate type {message.type}")


def _decode_leaf(leaf: Any, column_types: dict[int, Any] | None) -> Leaf:
    for name in ("function", "field_id"):
        if not leaf.HasField(name):
            raise ValueError(f"a leaf predicate without its required field {name}")
    try:
        function = LeafFunction(leaf.function)
    except ValueError:
        raise ValueError(f"unknown leaf function {leaf.function}") from None
    # IN and NOT_IN take any number of literals: `x IN ()` is well formed and matches no row, as
    # Fluss's In evaluates it
    count = len(leaf.literals)
    if function in _NO_LITERAL and count != 0:
        raise ValueError(f"{function.name} takes no literal, got {count}")
    if function not in _NO_LITERAL | _LITERAL_SET and count != 1:
        raise ValueError(f"{function.name} takes exactly one literal, got {count}")
    if column_types is not None:
        data_type = column_types.get(leaf.field_id)
        if data_type is None:
            raise ValueError(f"unknown column id {leaf.field_id}")
        column_kind = _LITERAL_TYPE_OF_ROOT.get(str(data_type.root))
        if column_kind is None:
            raise ValueError(f"cannot filter on column id {leaf.field_id} of type {data_type}")
        if function in _STRING_MATCH and column_kind not in (LiteralType.CHAR, LiteralType.VARCHAR):
            raise ValueError(f"{function.name} on column id {leaf.field_id} of type {data_type}")
        for literal in leaf.literals:
            kind = _literal_type(literal)
            if _SAME_FAMILY.get(kind, kind) != _SAME_FAMILY.get(column_kind, column_kind):
                raise ValueError(f"a {kind.name} literal for column id {leaf.field_id} of type {data_type}")
    return Leaf(function, leaf.field_id, tuple(_literal_from_pb(lit) for lit in leaf.literals))


def field_ids(predicate: Predicate) -> set[int]:
    if isinstance(predicate, Leaf):
        return {predicate.field_id}
    return set().union(*(field_ids(c) for c in predicate.children))


def _scalar(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    if isinstance(value, _Unscaled):
        assert pa.types.is_decimal(arrow_type)
        value = decimal.Decimal(value.value).scaleb(-arrow_type.scale)
    return pa.scalar(value, arrow_type)


def _leaf_mask(leaf: Leaf, column: pa.Array) -> pa.Array:
    f = leaf.function
    if f == LeafFunction.IS_NULL:
        return pc.is_null(column)
    if f == LeafFunction.IS_NOT_NULL:
        return pc.is_valid(column)
    if f in (LeafFunction.IN, LeafFunction.NOT_IN):
        values = pa.array(
            [_scalar(v, column.type).as_py() for v in leaf.literals if v is not None], column.type
        )
        mask = pc.is_in(column, value_set=values)
        return pc.invert(mask) if f == LeafFunction.NOT_IN else mask
    if not leaf.literals or leaf.literals[0] is None:
        return pa.nulls(len(column), pa.bool_())  # comparisons with NULL match nothing
    literal = _scalar(leaf.literals[0], column.type)
    if f == LeafFunction.EQUAL:
        return pc.equal(column, literal)
    if f == LeafFunction.NOT_EQUAL:
        return pc.not_equal(column, literal)
    if f == LeafFunction.LESS_THAN:
        return pc.less(column, literal)
    if f == LeafFunction.LESS_OR_EQUAL:
        return pc.less_equal(column, literal)
    if f == LeafFunction.GREATER_THAN:
        return pc.greater(column, literal)
    if f == LeafFunction.GREATER_OR_EQUAL:
        return pc.greater_equal(column, literal)
    pattern = literal.as_py()
    if f == LeafFunction.STARTS_WITH:
        return pc.starts_with(column, pattern)
    if f == LeafFunction.ENDS_WITH:
        return pc.ends_with(column, pattern)
    if f == LeafFunction.CONTAINS:
        return pc.match_substring(column, pattern)
    raise InvalidScanRequestError(f"unsupported filter function {f.name}")


class BatchFilter:
    """Evaluates a predicate on batches of one schema, given the column index of each field id."""

    def __init__(self, predicate: Predicate, column_of_field: dict[int, int]) -> None:
        missing = field_ids(predicate) - set(column_of_field)
        if missing:
            raise InvalidScanRequestError(f"filter refers to unknown column ids {sorted(missing)}")
        self.predicate = predicate
        self.column_of_field = column_of_field

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        return self._mask(self.predicate, batch)

    def _mask(self, predicate: Predicate, batch: pa.RecordBatch) -> pa.Array:
        if isinstance(predicate, Leaf):
            return _leaf_mask(predicate, batch.column(self.column_of_field[predicate.field_id]))
        masks = [self._mask(child, batch) for child in predicate.children]
        combine = pc.and_kleene if predicate.function == CompoundFunction.AND else pc.or_kleene
        result = masks[0]
        for m in masks[1:]:
            result = combine(result, m)
        return result

    def may_match(self, batch: pa.RecordBatch) -> bool:
        if batch.num_rows == 0:
            return False
        try:
            return bool(pc.any(self.mask(batch)).as_py())
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return True  # cannot evaluate (type mismatch): keep the batch, the client filters again


# ---------------------------------------------------------------------------------------- encoding

_LITERAL_TYPE_OF_ROOT: dict[str, LiteralType] = {
    "BOOLEAN": LiteralType.BOOLEAN,
    "TINYINT": LiteralType.TINYINT,
    "SMALLINT": LiteralType.SMALLINT,
    "INTEGER": LiteralType.INT,
    "BIGINT": LiteralType.BIGINT,
    "FLOAT": LiteralType.FLOAT,
    "DOUBLE": LiteralType.DOUBLE,
    "CHAR": LiteralType.CHAR,
    "STRING": LiteralType.VARCHAR,
    "DECIMAL": LiteralType.DECIMAL,
    "DATE": LiteralType.DATE,
    "TIME_WITHOUT_TIME_ZONE": LiteralType.TIME,
    "TIMESTAMP_WITHOUT_TIME_ZONE": LiteralType.TIMESTAMP,
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE": LiteralType.TIMESTAMP_LTZ,
    "BINARY": LiteralType.BINARY,
    "BYTES": LiteralType.BYTES,
}


def _literal_to_pb(target: Any, value: Any, data_type: Any) -> None:
    """Fill a `PbLiteralValue` with `value` typed as the column's Fluss `DataType`."""
    kind = _LITERAL_TYPE_OF_ROOT.get(str(data_type.root))
    if kind is None:
        raise InvalidScanRequestError(f"cannot filter on a {data_type} column")
    target.literal_type = int(kind)
    target.is_null = value is None
    if value is None:
        return
    if kind == LiteralType.BOOLEAN:
        target.boolean_value = bool(value)
    elif kind in (LiteralType.TINYINT, LiteralType.SMALLINT, LiteralType.INT):
        target.int_value = int(value)
    elif kind == LiteralType.BIGINT:
        target.bigint_value = int(value)
    elif kind == LiteralType.FLOAT:
        target.float_value = float(value)
    elif kind == LiteralType.DOUBLE:
        target.double_value = float(value)
    elif kind in (LiteralType.CHAR, LiteralType.VARCHAR):
        target.string_value = str(value)
    elif kind in (LiteralType.BINARY, LiteralType.BYTES):
        target.binary_value = bytes(value)
    elif kind == LiteralType.DATE:
        target.bigint_value = conv.date_to_days(value)  # Fluss's field for DATE
    elif kind == LiteralType.TIME:
        target.int_value = conv.time_to_millis(value)
    elif kind == LiteralType.DECIMAL:
        precision, scale = data_type.precision or 10, data_type.scale or 0
        unscaled = conv.decimal_to_unscaled(value, precision, scale)
        if precision <= conv.COMPACT_DECIMAL_MAX_PRECISION:
            target.decimal_value = unscaled
        else:
            target.decimal_bytes = conv.unscaled_to_bytes(unscaled)
    else:  # TIMESTAMP, TIMESTAMP_LTZ
        millis, nanos = conv.timestamp_to_parts(value)
        target.timestamp_millis_value = millis
        target.timestamp_nano_of_millis_value = nanos


def predicate_to_pb(predicate: Predicate, types_by_field_id: dict[int, Any], target: Any) -> Any:
    """Fill the `PbPredicate` `target` with `predicate`; literals are typed by their column's DataType."""
    if isinstance(predicate, Leaf):
        data_type = types_by_field_id.get(predicate.field_id)
        if data_type is None:
            raise InvalidScanRequestError(f"filter refers to unknown column id {predicate.field_id}")
        target.type = 0
        target.leaf.function = int(predicate.function)
        target.leaf.field_id = predicate.field_id
        for literal in predicate.literals:
            _literal_to_pb(target.leaf.literals.add(), literal, data_type)
    else:
        target.type = 1
        target.compound.function = int(predicate.function)
        for child in predicate.children:
            predicate_to_pb(child, types_by_field_id, target.compound.children.add())
    return target
