"""Fluss types as Spark sees them, and Arrow batches made to match what Spark expects.

A Python data source must yield Arrow batches whose schema *equals* Spark's own Arrow form of the
declared schema (``to_arrow_schema(schema, timezone="UTC")``): int32 for INT, ``string`` not
``large_string``, ``timestamp[us, tz=UTC]``, list elements called ``element``, nullability and all.
`conform` casts a batch of Fluss's Arrow form into that shape, column by column, by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from strom.common.schema import Schema
from strom.common.types import DataType, DataTypeRoot

if TYPE_CHECKING:
    from pyspark.sql.types import DataType as SparkDataType
    from pyspark.sql.types import StructField, StructType


def spark_type(data_type: DataType) -> SparkDataType:
    """The Spark SQL type of a Fluss type (nullability lives on the field, see `spark_field`)."""
    from pyspark.sql import types as st

    root = data_type.root
    simple: dict[DataTypeRoot, st.DataType] = {
        DataTypeRoot.BOOLEAN: st.BooleanType(),
        DataTypeRoot.TINYINT: st.ByteType(),
        DataTypeRoot.SMALLINT: st.ShortType(),
        DataTypeRoot.INTEGER: st.IntegerType(),
        DataTypeRoot.BIGINT: st.LongType(),
        DataTypeRoot.FLOAT: st.FloatType(),
        DataTypeRoot.DOUBLE: st.DoubleType(),
        # Spark's CHAR(n) has no Arrow form; a Fluss CHAR reads as a string.
        DataTypeRoot.CHAR: st.StringType(),
        DataTypeRoot.STRING: st.StringType(),
        DataTypeRoot.DATE: st.DateType(),
        DataTypeRoot.BYTES: st.BinaryType(),
        DataTypeRoot.BINARY: st.BinaryType(),
        # Spark keeps microseconds; finer Fluss precisions are truncated when read.
        DataTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE: st.TimestampNTZType(),
        DataTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE: st.TimestampType(),
    }
    if root in simple:
        return simple[root]
    if root is DataTypeRoot.DECIMAL:
        assert data_type.precision is not None and data_type.scale is not None
        return st.DecimalType(data_type.precision, data_type.scale)
    if root is DataTypeRoot.TIME_WITHOUT_TIME_ZONE:
        return st.TimeType(min(data_type.precision or 0, 6))
    if root is DataTypeRoot.ARRAY:
        assert data_type.element_type is not None
        return st.ArrayType(spark_type(data_type.element_type), data_type.element_type.nullable)
    if root is DataTypeRoot.MAP:
        assert data_type.key_type is not None and data_type.value_type is not None
        return st.MapType(
            spark_type(data_type.key_type), spark_type(data_type.value_type), data_type.value_type.nullable
        )
    return st.StructType([spark_field(f.name, f.type) for f in data_type.fields])


def spark_field(name: str, data_type: DataType) -> StructField:
    from pyspark.sql.types import StructField

    return StructField(name, spark_type(data_type), data_type.nullable)


def spark_schema(
    schema: Schema, columns: Sequence[str] | None = None, extra: Sequence[StructField] = ()
) -> StructType:
    """The table's columns (all, or `columns` in that order) plus `extra` fields, as a StructType."""
    from pyspark.sql.types import StructType

    names = list(columns) if columns is not None else schema.column_names
    fields = [spark_field(n, schema.get_column(n).data_type) for n in names]
    return StructType([*fields, *extra])


def arrow_schema_for(spark: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks a Python data source's batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark, timezone="UTC")


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` with `target`'s columns (taken by name) cast to `target`'s types.

    The cast is unsafe on purpose: it only truncates sub-microsecond timestamp digits, which Spark
    cannot hold anyway; everything else is a lossless relabelling of the same values.
    """
    if batch.schema.equals(target):
        return batch
    arrays = []
    for field in target:
        column = batch.column(field.name)
        if not column.type.equals(field.type):
            column = column.cast(field.type, safe=False)
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=target)
