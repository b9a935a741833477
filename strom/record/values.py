"""Conversions between Python values and Fluss's internal representations of temporal and decimal data.

Fluss stores DATE as days since the epoch, TIME as milliseconds of the day, TIMESTAMP and TIMESTAMP_LTZ
as epoch milliseconds plus nanoseconds within the millisecond, DECIMAL as an unscaled integer (a long
when precision <= 18, else big-endian two's-complement bytes as Java's BigInteger.toByteArray).
Python values follow what pyarrow's `to_pylist()` returns: date, time, naive datetime for TIMESTAMP,
UTC-aware datetime for TIMESTAMP_LTZ, decimal.Decimal.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

__all__ = [
    "COMPACT_DECIMAL_MAX_PRECISION",
    "COMPACT_TIMESTAMP_MAX_PRECISION",
    "date_to_days",
    "days_to_date",
    "decimal_to_unscaled",
    "millis_to_time",
    "time_to_millis",
    "timestamp_from_parts",
    "timestamp_to_parts",
    "unscaled_from_bytes",
    "unscaled_to_bytes",
    "unscaled_to_decimal",
]

COMPACT_DECIMAL_MAX_PRECISION = 18  # unscaled value fits in a long
COMPACT_TIMESTAMP_MAX_PRECISION = 3  # millis alone suffice

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_US = dt.timedelta(microseconds=1)
# Exact arithmetic for 38-digit decimals (the default context keeps only 28 digits).
_CTX = decimal.Context(prec=120, rounding=decimal.ROUND_HALF_UP)


def date_to_days(value: Any) -> int:
    if isinstance(value, int):
        return value
    return value.toordinal() - _EPOCH_ORDINAL


def days_to_date(days: int) -> dt.date:
    return dt.date.fromordinal(days + _EPOCH_ORDINAL)


def time_to_millis(value: Any) -> int:
    """Milliseconds of the day (Fluss keeps TIME at millisecond precision whatever its declared one)."""
    if isinstance(value, int):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def millis_to_time(millis: int) -> dt.time:
    seconds, ms = divmod(millis, 1000)
    minutes, s = divmod(seconds, 60)
    h, m = divmod(minutes, 60)
    return dt.time(h, m, s, ms * 1000)


def timestamp_to_parts(value: dt.datetime) -> tuple[int, int]:
    """(epoch millis, nano of millisecond). Naive values count as UTC wall time, aware ones as
    instants (like pyarrow). A pandas Timestamp's extra nanoseconds are kept."""
    delta = (value - _EPOCH) if value.tzinfo is None else (value - _EPOCH_UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    millis, micro_of_milli = divmod(micros, 1000)
    return millis, micro_of_milli * 1000 + getattr(value, "nanosecond", 0)


def timestamp_from_parts(millis: int, nano_of_milli: int, utc: bool) -> dt.datetime:
    """A datetime (UTC-aware when `utc`) from Fluss's parts; sub-microsecond digits are dropped."""
    return (_EPOCH_UTC if utc else _EPOCH) + _ONE_US * (millis * 1000 + nano_of_milli // 1000)


def decimal_to_unscaled(value: Any, precision: int, scale: int) -> int:
    """The unscaled integer of `value` at `scale`, rounding HALF_UP like Fluss; ValueError when it
    needs more than `precision` digits."""
    if not isinstance(value, decimal.Decimal):
        value = decimal.Decimal(repr(value) if isinstance(value, float) else value)
    if not value.is_finite():
        raise ValueError(f"cannot store {value} in DECIMAL({precision}, {scale})")
    unscaled = int(value.scaleb(scale, _CTX).to_integral_value(decimal.ROUND_HALF_UP, _CTX))
    if -(10**precision) < unscaled < 10**precision:
        return unscaled
    raise ValueError(f"{value} does not fit in DECIMAL({precision}, {scale})")


def unscaled_to_decimal(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(unscaled).scaleb(-scale, _CTX)


def unscaled_to_bytes(unscaled: int) -> bytes:
    """Minimal big-endian two's complement, as Java's BigInteger.toByteArray()."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def unscaled_from_bytes(data: bytes | bytearray | memoryview) -> int:
    return int.from_bytes(data, "big", signed=True)
