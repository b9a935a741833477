"""The `fluss` PySpark data source: reads and writes Strom (and Fluss) tables.

    spark.read.format("fluss").option("bootstrap.servers", "127.0.0.1:9123").load("shop.orders")

The table's schema comes from the cluster when Spark asks for it; `schema()` runs in a planner
process whose data source object is then pickled, so the TableInfo fetched there travels on to
`reader()` and friends without a second round trip.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from strom.common.table_descriptor import TableInfo
from strom.spark import bridge
from strom.spark.options import (
    BUCKET_COLUMN,
    CHANGE_TYPE_COLUMN,
    INCLUDE_CHANGE_TYPE,
    OFFSET_COLUMN,
    TIMESTAMP_COLUMN,
    ConnectionOptions,
    ReadOptions,
    SparkOptionError,
    WriteOptions,
)
from strom.spark.read_splits import BucketRange
from strom.spark.types import spark_schema
from strom.spark.virtual_tables import VirtualBatchReader, VirtualStreamReader, VirtualTable


def extra_fields(options: ReadOptions) -> list[StructField]:
    fields = []
    if options.include_change_type:
        fields.append(StructField(CHANGE_TYPE_COLUMN, StringType(), False))
    if options.include_metadata:
        fields += [
            StructField(BUCKET_COLUMN, IntegerType(), False),
            StructField(OFFSET_COLUMN, LongType(), True),
            StructField(TIMESTAMP_COLUMN, TimestampType(), True),
        ]
    return fields


def check_read_schema(table: TableInfo, options: ReadOptions, schema: StructType) -> None:
    """A schema given with `.schema(...)` may pick table columns (a projection), nothing else."""
    known = set(table.schema.column_names) | {f.name for f in extra_fields(options)}
    unknown = [f.name for f in schema.fields if f.name not in known]
    if unknown:
        raise SparkOptionError(
            f"Columns {unknown} are not columns of table '{table.table_path}' "
            f"(it has {table.schema.column_names})."
        )


# The Python name behind the JVM glue's ``fluss`` (FlussSource.PYTHON_NAME in strom/spark/java).
PYTHON_NAME = "strom_fluss"


class FlussDataSource(DataSource):
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # `db.t$changelog` / `db.t$binlog`: read the base table with the options that virtual table needs
        self._virtual, self._base_options = VirtualTable.from_options(options)
        self._table: TableInfo | None = None
        # A batch read's plan, taken with the schema so that every query of the DataFrame reads the
        # same cut of the table (None: plan when the read is planned).
        self._pinned: list[BucketRange] | None = None

    @classmethod
    def name(cls) -> str:
        return "fluss"

    @property
    def connection(self) -> ConnectionOptions:
        return ConnectionOptions.parse(self._base_options)

    def table_info(self) -> TableInfo:
        if self._table is None:
            self._table = bridge.table_info(self.connection)
        return self._table

    def declared_schema(self) -> StructType:
        """The table's columns as these options read them (virtual tables, extra columns)."""
        read, table = ReadOptions.parse(self._base_options), self.table_info()
        if self._virtual is not None:
            self._virtual.check(table)
            return self._virtual.schema(table)
        return spark_schema(table.schema, extra=extra_fields(read))

    def schema(self) -> StructType:
        from strom.spark.batch_reader import plan_ranges

        schema = self.declared_schema()
        try:
            self._pinned = plan_ranges(
                self.connection, self.table_info(), ReadOptions.parse(self._base_options)
            )
        except Exception:
            # Streams need no batch plan, and a batch read plans again and reports the error.
            self._pinned = None
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        from strom.spark.batch_reader import FlussBatchReader, FlussPushdownReader

        read, table = ReadOptions.parse(self._base_options), self.table_info()
        if self._virtual is not None:
            base = FlussBatchReader(
                self.connection, table, read, self._base_schema(table, read), self._pinned
            )
            return VirtualBatchReader(base, self._virtual, table.schema.column_names, schema)
        check_read_schema(table, read, schema)
        kind = FlussPushdownReader if read.filter_pushdown else FlussBatchReader
        return kind(self.connection, table, read, schema, self._pinned)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from strom.spark.stream_reader import FlussStreamReader

        read, table = ReadOptions.parse(self._base_options), self.table_info()
        if self._virtual is not None:
            self._virtual.check(table)
            base = FlussStreamReader(self.connection, table, read, self._base_schema(table, read))
            return VirtualStreamReader(base, self._virtual, table.schema.column_names, schema)
        check_read_schema(table, read, schema)
        if table.has_primary_key and not read.include_change_type:
            raise SparkOptionError(
                f"Streaming primary-key table '{table.table_path}' yields its changelog (+I, -U, +U, -D); "
                f"set option '{INCLUDE_CHANGE_TYPE}' to 'true' to get each change's kind in column "
                f"'{CHANGE_TYPE_COLUMN}'."
            )
        return FlussStreamReader(self.connection, table, read, schema)

    @staticmethod
    def _base_schema(table: TableInfo, read: ReadOptions) -> StructType:
        """A virtual table's base table as read: every column, the change type and the metadata."""
        return spark_schema(table.schema, extra=extra_fields(read))

    def _check_writable(self) -> None:
        if self._virtual is not None:
            raise SparkOptionError(f"'${self._virtual.value}' virtual tables are read-only.")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.writer import FlussArrowWriter

        self._check_writable()
        return FlussArrowWriter(
            self.connection, self.table_info(), WriteOptions.parse(self.options), schema, overwrite
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.writer import FlussStreamArrowWriter

        self._check_writable()
        return FlussStreamArrowWriter(
            self.connection,
            self.table_info(),
            WriteOptions.parse(self.options),
            schema,
            overwrite,
            self.options,
        )


class JvmBackedFlussDataSource(FlussDataSource):
    """The same source under the name Strom's JVM glue looks for (strom.spark.jvm): Spark refuses a
    Python data source named like a JVM one, and with the glue ``fluss`` is the JVM class."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_NAME
