"""Arrow and pandas input brought to the table's exact Arrow schema before it is batched.

Columns are matched by name and put in table order; a type that differs is cast (safely: no
overflow, no lossy float to int), and a missing nullable column becomes nulls. Everything else (an
unknown or missing NOT NULL column, a failed cast, a null in a NOT NULL column) is an error naming
the column, raised before anything is queued.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["conform_batch", "conform_table", "table_from_pandas"]


def _conform_columns(
    names: list[str], column: Any, num_rows: int, schema: pa.Schema, chunked: bool
) -> list[Any]:
    unknown = [n for n in names if schema.get_field_index(n) < 0]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the table has {schema.names}")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate column names in {names}")
    out = []
    for field in schema:
        if field.name not in names:
            if not field.nullable:
                raise ValueError(f"column '{field.name}' is NOT NULL but missing from the data")
            nulls = pa.nulls(num_rows, field.type)
            out.append(pa.chunked_array([nulls], field.type) if chunked else nulls)
            continue
        values = column(field.name)
        if values.type != field.type:
            try:
                values = values.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise ValueError(
                    f"column '{field.name}' is {values.type}, which cannot be stored as {field.type}: {e}"
                ) from e
        if not field.nullable and values.null_count:
            raise ValueError(f"column '{field.name}' is NOT NULL but has {values.null_count} null(s)")
        out.append(values)
    return out


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    columns = _conform_columns(batch.schema.names, batch.column, batch.num_rows, schema, chunked=False)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.schema.equals(schema):
        return table
    columns = _conform_columns(table.schema.names, table.column, table.num_rows, schema, chunked=True)
    return pa.Table.from_arrays(columns, schema=schema)


def table_from_pandas(df: Any, schema: pa.Schema) -> pa.Table:
    """A DataFrame as an Arrow table of the table's schema (the index is not written)."""
    return conform_table(pa.Table.from_pandas(df, preserve_index=False), schema)
