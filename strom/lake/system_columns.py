"""The system columns every lake format adds to a Fluss table's rows.

Each lake row carries its Fluss bucket (``__bucket``), its log offset (``__offset``) and its commit
timestamp (``__timestamp``) after the table's own columns. The formats differ only in how they
convert offsets and timestamps (their column types), so they pass those in already converted.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from strom.common.table_path import TablePath

__all__ = [
    "BUCKET_COLUMN",
    "OFFSET_COLUMN",
    "SYSTEM_COLUMN_NAMES",
    "TIMESTAMP_COLUMN",
    "system_columns",
    "user_columns",
]

BUCKET_COLUMN = "__bucket"
OFFSET_COLUMN = "__offset"
TIMESTAMP_COLUMN = "__timestamp"
# In the order `system_columns` returns them.
SYSTEM_COLUMN_NAMES = (BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN)


def user_columns(
    batch: pa.RecordBatch | pa.Table, names: list[str], table_path: TablePath
) -> list[pa.Array | pa.ChunkedArray]:
    """The table's columns of `batch`, in the table's order (extra columns are left out)."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    missing = [c for c in names if c not in table.column_names]
    if missing:
        raise ValueError(f"batch lacks columns {missing} of table {table_path}")
    return [table.column(c) for c in names]


def system_columns(n: int, bucket: int, offsets: pa.Array, timestamps: pa.Array) -> list[pa.Array]:
    """The values of `SYSTEM_COLUMN_NAMES` for `n` rows of `bucket`."""
    return [pa.array(np.full(n, bucket, dtype=np.int32)), offsets, timestamps]
