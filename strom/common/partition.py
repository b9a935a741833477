"""Partitions: specs, names and the values of auto (time) partitions.

A partition name is the partition values in partition-key order joined with ``$`` (``2024$us``).
Each value must be a valid name part: ASCII letters, digits, ``_`` and ``-``, at most 200
characters; values of partitions created by users must not start with the reserved ``__``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from strom.common import config as options
from strom.common.config import AutoPartitionTimeUnit, Configuration
from strom.common.errors import PartitionSpecInvalidError
from strom.common.table_path import (
    PARTITION_SEPARATOR,
    TablePath,
    detect_invalid_name,
    detect_reserved_prefix,
)
from strom.common.types import DataTypeRoot

# Partition value of the system partition that routes lookups of expired partitions to the lake.
HISTORICAL_PARTITION_VALUE = "__historical__"

# Column types a partition key may have.
PARTITION_KEY_SUPPORTED_TYPES: tuple[DataTypeRoot, ...] = (
    DataTypeRoot.CHAR,
    DataTypeRoot.STRING,
    DataTypeRoot.BOOLEAN,
    DataTypeRoot.BINARY,
    DataTypeRoot.BYTES,
    DataTypeRoot.TINYINT,
    DataTypeRoot.SMALLINT,
    DataTypeRoot.INTEGER,
    DataTypeRoot.DATE,
    DataTypeRoot.TIME_WITHOUT_TIME_ZONE,
    DataTypeRoot.BIGINT,
    DataTypeRoot.FLOAT,
    DataTypeRoot.DOUBLE,
    DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE,
    DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE,
)


# Equality is the Mapping one (order-insensitive), as for Java's PartitionSpec.
@dataclass(frozen=True, slots=True, eq=False)
class PartitionSpec(Mapping[str, str]):
    """Partition key → value, in the order given (as the wire's list of key/value pairs)."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, spec: Mapping[str, str] | Sequence[tuple[str, str]]) -> PartitionSpec:
        pairs = tuple(spec.items()) if isinstance(spec, Mapping) else tuple(spec)
        return cls(tuple((str(k), str(v)) for k, v in pairs))

    def __getitem__(self, key: str) -> str:
        for k, v in self.pairs:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __str__(self) -> str:
        return "PartitionSpec{" + ", ".join(f"{k}={v}" for k, v in self.pairs) + "}"


def partition_values(partition_keys: Sequence[str], spec: Mapping[str, str]) -> list[str]:
    """The spec's values in partition-key order (missing keys raise KeyError)."""
    return [spec[k] for k in partition_keys]


def partition_name(partition_keys: Sequence[str], spec: Mapping[str, str]) -> str:
    """``["year", "region"]``, ``{"region": "us", "year": "2024"}`` → ``"2024$us"``."""
    return PARTITION_SEPARATOR.join(partition_values(partition_keys, spec))


def parse_partition_name(partition_keys: Sequence[str], name: str) -> PartitionSpec:
    """The inverse of `partition_name`."""
    values = name.split(PARTITION_SEPARATOR)
    if len(values) != len(partition_keys):
        raise PartitionSpecInvalidError(
            f"Partition name '{name}' has {len(values)} values but the table has "
            f"{len(partition_keys)} partition keys {list(partition_keys)}."
        )
    return PartitionSpec(tuple(zip(partition_keys, values, strict=True)))


def partition_qualified_name(partition_keys: Sequence[str], values: Sequence[str]) -> str:
    """``year=2024/region=us``: the form used in directory names and messages."""
    return "/".join(f"{k}={v}" for k, v in zip(partition_keys, values, strict=True))


def invalid_partition_value_reason(value: str, is_create: bool) -> str | None:
    """Why `value` cannot be a partition value, or None. Creating also forbids the ``__`` prefix."""
    return detect_invalid_name(value) or (detect_reserved_prefix(value) if is_create else None)


def validate_partition_values(values: Sequence[str], is_create: bool) -> None:
    for value in values:
        reason = invalid_partition_value_reason(value, is_create)
        if reason is not None:
            raise PartitionSpecInvalidError(f"The partition value {value} is invalid: {reason}")


def validate_partition_spec(
    table_path: TablePath,
    partition_keys: Sequence[str],
    spec: Mapping[str, str],
    is_create: bool,
) -> list[str]:
    """Check that `spec` names exactly the table's partition keys with valid values.

    Returns the values in partition-key order.
    """
    if len(spec) != len(partition_keys):
        raise PartitionSpecInvalidError(
            f"PartitionSpec size is not equal to partition keys size for partitioned table {table_path}."
        )
    values: list[str] = []
    for key in partition_keys:
        if key not in spec:
            raise PartitionSpecInvalidError(
                f"PartitionSpec {_spec_text(spec)} does not contain partition key '{key}' "
                f"for partitioned table {table_path}."
            )
        values.append(spec[key])
    validate_partition_values(values, is_create)
    return values


def _spec_text(spec: Mapping[str, str]) -> str:
    return str(spec) if isinstance(spec, PartitionSpec) else str(PartitionSpec.of(spec))


# ----------------------------------------------------------------------------------- auto partitions

# Default value patterns per time unit (Java DateTimeFormatter syntax).
DEFAULT_TIME_FORMATS: dict[AutoPartitionTimeUnit, str] = {
    AutoPartitionTimeUnit.YEAR: "yyyy",
    AutoPartitionTimeUnit.QUARTER: "yyyyQ",
    AutoPartitionTimeUnit.MONTH: "yyyyMM",
    AutoPartitionTimeUnit.DAY: "yyyyMMdd",
    AutoPartitionTimeUnit.HOUR: "yyyyMMddHH",
}

# Pattern letter → (field, fixed width). Only these fields may appear in a time format.
_FIELD_LETTERS: dict[str, tuple[str, int]] = {
    "y": ("year", 4),
    "u": ("year", 4),
    "Q": ("quarter", 1),
    "q": ("quarter", 1),
    "M": ("month", 2),
    "L": ("month", 2),
    "d": ("day", 2),
    "H": ("hour", 2),
}
_EXPECTED_FIELDS: dict[AutoPartitionTimeUnit, list[str]] = {
    AutoPartitionTimeUnit.YEAR: ["year"],
    AutoPartitionTimeUnit.QUARTER: ["year", "quarter"],
    AutoPartitionTimeUnit.MONTH: ["year", "month"],
    AutoPartitionTimeUnit.DAY: ["year", "month", "day"],
    AutoPartitionTimeUnit.HOUR: ["year", "month", "day", "hour"],
}


@dataclass(frozen=True, slots=True)
class _Token:
    field: str | None  # None: literal text
    text: str  # the literal, or the pattern letters


def _tokenize(fmt: str) -> list[_Token]:
    """Split a DateTimeFormatter-style pattern into fields and literals (quotes: ``'...'``, ``''``)."""
    tokens: list[_Token] = []
    literal: list[str] = []
    i, n, quoted = 0, len(fmt), False
    while i < n:
        c = fmt[i]
        if c == "'":
            if i + 1 < n and fmt[i + 1] == "'":
                literal.append("'")
                i += 2
            else:
                quoted = not quoted
                i += 1
            continue
        if quoted or not c.isascii() or not c.isalpha():
            if not quoted and c in "[]":
                raise ValueError(f"Time format '{fmt}' must not contain optional sections ('[' or ']').")
            literal.append(c)
            i += 1
            continue
        j = i + 1
        while j < n and fmt[j] == c:
            j += 1
        spec = _FIELD_LETTERS.get(c)
        if spec is None:
            raise ValueError(f"Time format '{fmt}' contains unsupported time field '{c}'.")
        name, width = spec
        if j - i != width:
            raise ValueError(
                f"Time field '{name}' in format '{fmt}' must have fixed width {width}, but found {j - i}."
            )
        if literal:
            tokens.append(_Token(None, "".join(literal)))
            literal = []
        tokens.append(_Token(name, fmt[i:j]))
        i = j
    if quoted:
        raise ValueError(f"Time format '{fmt}' has an unterminated quote.")
    if literal:
        tokens.append(_Token(None, "".join(literal)))
    return tokens


def validate_time_format(fmt: str, unit: AutoPartitionTimeUnit) -> None:
    """Check a custom ``table.auto-partition.time-format`` the way Fluss does (ValueError if bad)."""
    fields = [t.field for t in _tokenize(fmt) if t.field is not None]
    expected = _EXPECTED_FIELDS[unit]
    if fields != expected:
        raise ValueError(
            f"Time format '{fmt}' must contain fields {expected} in this order for time unit "
            f"'{unit.value}', but found {fields}."
        )
    sample = format_partition_time(datetime(2024, 11, 11, 11, 0, 0), fmt)
    reason = invalid_partition_value_reason(sample, is_create=True)
    if reason is not None:
        raise ValueError(f"Time format '{fmt}' generates invalid partition value '{sample}': {reason}.")


def format_partition_time(moment: datetime, fmt: str) -> str:
    out: list[str] = []
    for token in _tokenize(fmt):
        if token.field is None:
            out.append(token.text)
        elif token.field == "year":
            out.append(f"{moment.year:04d}")
        elif token.field == "quarter":
            out.append(str((moment.month - 1) // 3 + 1))
        elif token.field == "month":
            out.append(f"{moment.month:02d}")
        elif token.field == "day":
            out.append(f"{moment.day:02d}")
        else:
            out.append(f"{moment.hour:02d}")
    return "".join(out)


def _add_months(moment: datetime, months: int) -> datetime:
    index = moment.year * 12 + (moment.month - 1) + months
    year, month0 = divmod(index, 12)
    # Clamp the day like java.time does (Jan 31 + 1 month = Feb 28/29).
    days_in_month = [31, 29 if _is_leap(year) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month0]
    return moment.replace(year=year, month=month0 + 1, day=min(moment.day, days_in_month))


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def shift_time(moment: datetime, unit: AutoPartitionTimeUnit, offset: int) -> datetime:
    """`moment` moved by `offset` units (a quarter is three months)."""
    if unit is AutoPartitionTimeUnit.YEAR:
        return _add_months(moment, 12 * offset)
    if unit is AutoPartitionTimeUnit.QUARTER:
        return _add_months(moment, 3 * offset)
    if unit is AutoPartitionTimeUnit.MONTH:
        return _add_months(moment, offset)
    if unit is AutoPartitionTimeUnit.DAY:
        return moment + timedelta(days=offset)
    return moment + timedelta(hours=offset)


def auto_partition_value(
    unit: AutoPartitionTimeUnit | str,
    moment: datetime,
    offset: int = 0,
    time_format: str | None = None,
) -> str:
    """The auto partition value for `moment` (already in the table's time zone) moved by `offset` units.

    DAY → ``yyyyMMdd`` (``20240501``), HOUR → ``yyyyMMddHH``, MONTH → ``yyyyMM``, QUARTER → ``yyyyQ``
    (``20242``), YEAR → ``yyyy``; `time_format` overrides the pattern.
    """
    u = AutoPartitionTimeUnit(unit.upper() if isinstance(unit, str) else unit)
    fmt = time_format if time_format is not None else DEFAULT_TIME_FORMATS[u]
    return format_partition_time(shift_time(moment, u, offset), fmt)


def is_valid_partition_time(value: str, unit: AutoPartitionTimeUnit, time_format: str | None = None) -> bool:
    """Whether `value` parses with the unit's pattern (a strict, full match)."""
    fmt = time_format if time_format is not None else DEFAULT_TIME_FORMATS[unit]
    pos = 0
    fields: dict[str, int] = {}
    for token in _tokenize(fmt):
        if token.field is None:
            if not value.startswith(token.text, pos):
                return False
            pos += len(token.text)
            continue
        width = _FIELD_LETTERS[token.text[0]][1]
        digits = value[pos : pos + width]
        if len(digits) != width or not digits.isdigit():
            return False
        fields[token.field] = int(digits)
        pos += width
    if pos != len(value):
        return False
    month = fields.get("month", 1)
    quarter = fields.get("quarter", 1)
    if not 1 <= quarter <= 4 or not 1 <= month <= 12 or not 0 <= fields.get("hour", 0) <= 23:
        return False
    try:
        datetime(fields.get("year", 1970), month, fields.get("day", 1))
    except ValueError:
        return False
    return True


def validate_auto_partition_time(
    table_path: TablePath,
    partition_keys: Sequence[str],
    spec: Mapping[str, str],
    properties: Mapping[str, str],
    now: datetime | None = None,
) -> None:
    """Refuse a partition to be created that auto-partitioning would not keep, as Fluss's
    `PartitionUtils.validateAutoPartitionTime` does on CreatePartition: its time value must match the
    table's pattern, and must not be older than the oldest partition retention keeps (a write to an
    expired partition would otherwise create it again, and retention drop it with the new records)."""
    conf = Configuration(dict(properties))
    enabled = conf.get(options.TABLE_AUTO_PARTITION_ENABLED)
    time_format = conf.get(options.TABLE_AUTO_PARTITION_TIME_FORMAT)
    if not enabled and time_format is None:
        return
    unit = conf.get(options.TABLE_AUTO_PARTITION_TIME_UNIT)
    time_key = conf.get(options.TABLE_AUTO_PARTITION_KEY) or partition_keys[0]
    value = spec.get(time_key)
    if value is None or not is_valid_partition_time(value, unit, time_format):
        pattern = time_format if time_format is not None else DEFAULT_TIME_FORMATS[unit]
        raise PartitionSpecInvalidError(
            f"Partition value '{value}' of table {table_path} does not match the expected format "
            f"'{pattern}' for auto-partition time unit '{unit.value}'."
        )
    retention = conf.get(options.TABLE_AUTO_PARTITION_NUM_RETENTION)
    if not enabled or retention < 0:
        return
    zone = ZoneInfo(conf.get(options.TABLE_AUTO_PARTITION_TIME_ZONE))
    moment = (now or datetime.now(zone)).astimezone(zone).replace(tzinfo=None)
    oldest_kept = auto_partition_value(unit, moment, -retention, time_format)
    if value < oldest_kept:  # fixed-width ordered formats: text order is time order
        raise PartitionSpecInvalidError(
            f"Partition value '{value}' of table {table_path} is out-of-date. The earliest retained "
            f"partition is '{oldest_kept}'."
        )
