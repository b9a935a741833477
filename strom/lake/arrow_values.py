"""The per-row values a lake writer is given (offsets, timestamps, change types) as Arrow arrays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from strom.lake.interface import ChangeTypes, RowValues

__all__ = ["as_array", "as_timestamps"]


def as_array(values: RowValues | ChangeTypes, n: int, what: str) -> pa.Array:
    """`values` as one Arrow array of `n` values (ValueError for another length)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    array = values if isinstance(values, pa.Array) else pa.array(np.asarray(values))
    if len(array) != n:
        raise ValueError(f"{what} has {len(array)} values for {n} rows")
    return array


def as_timestamps(values: RowValues, n: int, unit: str = "ms") -> pa.Array:
    """Commit timestamps (epoch milliseconds or an Arrow timestamp array) as timestamp[unit, UTC]."""
    array = as_array(values, n, "timestamps")
    target = pa.timestamp(unit, tz="UTC")
    if pa.types.is_timestamp(array.type):
        return array.cast(target, safe=False)
    millis = array.cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return millis.cast(target)
