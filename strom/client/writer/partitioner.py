"""Which partition a row belongs to: its partition-key values rendered as a partition name.

Values are rendered as the Fluss clients render them (strings as they are, booleans ``true`` /
``false``, integers in decimal, dates ``2024-01-31``, times ``13-05-09_250``, timestamps
``2024-01-31-13-05-09_250``, binaries in hex, floats with ``_`` for the point), joined with ``$``.
For Arrow input each key column is dictionary-encoded, so only the distinct values are rendered in
Python and every row gets a small integer partition code.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.common.table_path import PARTITION_SEPARATOR
from strom.common.types import DataType, DataTypeRoot
from strom.record import values as conv

__all__ = ["Partitioner", "partition_value"]

_R = DataTypeRoot


def _float_text(value: float, single: bool) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    # Shortest round-trip digits without an exponent, as pyfluss prints them (1.0 -> "1").
    number = np.float32(value) if single else np.float64(value)
    return np.format_float_positional(number, trim="-").replace(".", "_")


def _timestamp_text(value: Any) -> str:
    millis, nanos = conv.timestamp_to_parts(value)
    seconds, ms = divmod(millis, 1000)
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%d-%H-%M-%S_")
    if nanos > 0:
        return f"{text}{ms:03d}{nanos:06d}"
    if ms > 0:
        return f"{text}{ms:03d}"
    return text


def partition_value(value: Any, data_type: DataType) -> str:
    """The partition-name text of one non-null partition-key value."""
    root = data_type.root
    if root in (_R.STRING, _R.CHAR):
        return str(value)
    if root is _R.BOOLEAN:
        return "true" if value else "false"
    if root in (_R.TINYINT, _R.SMALLINT, _R.INTEGER, _R.BIGINT):
        return str(int(value))
    if root in (_R.BYTES, _R.BINARY):
        return bytes(value).hex()
    if root is _R.DATE:
        days = conv.date_to_days(value)
        return conv.days_to_date(days).isoformat()
    if root is _R.TIME_WITHOUT_TIME_ZONE:
        millis = conv.time_to_millis(value)
        seconds, ms = divmod(millis, 1000)
        minutes, s = divmod(seconds, 60)
        h, m = divmod(minutes, 60)
        return f"{h:02d}-{m:02d}-{s:02d}_{ms:03d}"
    if root in (_R.FLOAT, _R.DOUBLE):
        return _float_text(float(value), single=root is _R.FLOAT)
    if root in (_R.TIMESTAMP_WITHOUT_TIME_ZONE, _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE):
        return _timestamp_text(value)
    raise ValueError(f"a {data_type} column cannot be a partition key")


class Partitioner:
    """Partition names of rows and of Arrow batches for one partitioned table."""

    def __init__(
        self, names: Sequence[str], row_type: Sequence[DataType], partition_keys: Sequence[str]
    ) -> None:
        index = {name: i for i, name in enumerate(names)}
        missing = [k for k in partition_keys if k not in index]
        if missing:
            raise ValueError(f"partition key(s) {missing} are not columns of the table")
        self.keys = tuple(partition_keys)
        self.indexes = tuple(index[k] for k in partition_keys)
        self.types = tuple(row_type[i] for i in self.indexes)

    def name_of(self, values: Sequence[Any]) -> str:
        """The partition name of a row given as values in column order."""
        parts = []
        for key, i, t in zip(self.keys, self.indexes, self.types, strict=True):
            v = values[i]
            if v is None:
                raise ValueError(f"Partition value shouldn't be null (partition key '{key}').")
            parts.append(partition_value(v, t))
        return PARTITION_SEPARATOR.join(parts)

    def codes_of(self, batch: pa.RecordBatch) -> tuple[np.ndarray, list[str]]:
        """A partition code per row (int64) and the partition name of each code."""
        codes = np.zeros(batch.num_rows, dtype=np.int64)
        per_key: list[list[str]] = []
        for key, i, t in zip(self.keys, self.indexes, self.types, strict=True):
            column = batch.column(i)
            if column.null_count:
                raise ValueError(f"Partition value shouldn't be null (partition key '{key}').")
            encoded = pc.dictionary_encode(column)
            per_key.append([partition_value(v, t) for v in encoded.dictionary.to_pylist()])
            indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            # Mixed radix over all keys: one code per combination of values.
            codes = codes * len(per_key[-1]) + indices
        used, dense = np.unique(codes, return_inverse=True)
        names = []
        for code in used.tolist():
            parts = []
            for values in reversed(per_key):
                code, digit = divmod(code, len(values))
                parts.append(values[digit])
            names.append(PARTITION_SEPARATOR.join(reversed(parts)))
        return dense.astype(np.int64).reshape(-1), names
