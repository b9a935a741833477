"""The Python side of Strom's Spark SQL catalog (``strom.spark.FlussCatalog`` in strom/spark/java).

Spark's catalog API is JVM-only, so the catalog there is glue: each metadata call comes here through
Py4J's callback server on the driver, as ``call(catalog options, operation, arguments)`` with JSON in
and out, and goes to the cluster through the Strom client's Admin. Tables then read and write through
the Python data source. Errors come back as ``{"error": kind, "message": ...}``; the JVM side turns
the kinds Spark knows (no such table, already exists, ...) into Spark's own exceptions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from strom.client.admin import Admin
from strom.client.table_change import TableChange, TableChangeType
from strom.common.errors import (
    DatabaseAlreadyExistError,
    DatabaseNotEmptyError,
    DatabaseNotExistError,
    FlussError,
    InvalidTableError,
    PartitionAlreadyExistsError,
    PartitionNotExistError,
    TableAlreadyExistError,
    TableNotExistError,
)
from strom.common.schema import Schema
from strom.common.table_descriptor import DatabaseDescriptor, TableDescriptor
from strom.common.table_path import TablePath
from strom.common.types import DataType
from strom.spark import bridge
from strom.spark.options import (
    BOOTSTRAP_SERVERS,
    CLIENT_PREFIX,
    TABLE,
    ConnectionOptions,
    ReadOptions,
    SparkOptionError,
    StartupMode,
)

log = logging.getLogger(__name__)

# Table properties of CREATE TABLE that shape the table rather than configure it (Fluss's names).
PRIMARY_KEY = "primary.key"
BUCKET_KEY = "bucket.key"
BUCKET_NUM = "bucket.num"
COMMENT = "comment"
# Properties Spark adds to every CREATE TABLE by itself; they mean nothing to Fluss.
SPARK_RESERVED = {"provider", "owner", "location", "external", "is_managed_location"}


def _names(raw: str | None) -> list[str]:
    return [n.strip() for n in (raw or "").split(",") if n.strip()]


def descriptor_from_sql(
    spark_schema_json: Mapping[str, Any], partition_keys: list[str], properties: Mapping[str, str]
) -> TableDescriptor:
    """A TableDescriptor from CREATE TABLE's columns, PARTITIONED BY and TBLPROPERTIES."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    spark_schema = StructType.fromJson(dict(spark_schema_json))
    arrow = to_arrow_schema(spark_schema, timezone="UTC")
    props = {str(k): str(v) for k, v in properties.items() if str(k) not in SPARK_RESERVED}
    primary_key = _names(props.pop(PRIMARY_KEY, None)) or None
    bucket_keys = _names(props.pop(BUCKET_KEY, None))
    raw_buckets = props.pop(BUCKET_NUM, None)
    bucket_count = None
    if raw_buckets is not None:
        try:
            bucket_count = int(raw_buckets)
        except ValueError:
            bucket_count = 0
        if bucket_count <= 0:
            raise ValueError(f"Invalid value for '{BUCKET_NUM}': '{raw_buckets}'. Use a positive integer.")
    comment = props.pop(COMMENT, None)
    # Fluss's table options are ``table.*``; anything else is kept as a custom property, as Fluss's
    # connectors do.
    table_props = {k: v for k, v in props.items() if k.startswith("table.")}
    custom = {k: v for k, v in props.items() if not k.startswith("table.")}
    schema = Schema.from_arrow_schema(arrow, primary_key)
    return TableDescriptor(
        schema,
        partition_keys=list(partition_keys),
        bucket_keys=bucket_keys,
        bucket_count=bucket_count,
        properties=table_props,
        custom_properties=custom,
        comment=comment,
    )


def _change(item: Mapping[str, Any]) -> TableChangeType:
    op = item["op"]
    if op == "add_column":
        from pyspark.sql.pandas.types import to_arrow_type
        from pyspark.sql.types import _parse_datatype_json_value

        if not item.get("nullable", True):
            raise ValueError(f"Fluss adds nullable columns only; '{item['name']}' is NOT NULL.")
        arrow = to_arrow_type(_parse_datatype_json_value(item["type"]), timezone="UTC")
        return TableChange.add_column(item["name"], DataType.from_arrow(arrow), item.get("comment"))
    if op == "set":
        return TableChange.set_option(item["key"], item["value"])
    if op == "reset":
        return TableChange.reset_option(item["key"])
    raise ValueError(f"Unknown table change {op!r}")


class CatalogBackend:
    """Implements the JVM interface ``strom.spark.FlussCatalogBackend`` (Py4J callback)."""

    class Java:
        implements = ["strom.spark.FlussCatalogBackend"]

    def call(self, options_json: str, operation: str, arguments_json: str) -> str:
        try:
            options = json.loads(options_json)
            args = json.loads(arguments_json)
            handler = self._operations().get(operation)
            if handler is None:
                return _error("UNSUPPORTED", f"Unknown catalog operation '{operation}'.")
            return json.dumps({"ok": handler(options, args)})
        except FlussError as e:
            # Fluss's error name and code travel with the message; the JVM side turns the kinds Spark
            # knows into Spark's own exceptions (with this one as the cause) and keeps them in the rest.
            kind = next((k for cls, k in _KINDS if isinstance(e, cls)), "INVALID")
            return _error(kind, str(e), e)
        except (ValueError, SparkOptionError) as e:
            return _error("INVALID", f"{type(e).__name__}: {e}")
        except Exception as e:  # reaches Spark as the statement's error, and the driver's log
            log.exception("Catalog operation %s failed", operation)
            return _error("INTERNAL", f"{type(e).__name__}: {e}")

    def _operations(self) -> dict[str, Callable[[dict[str, str], dict[str, Any]], Any]]:
        return {
            "list_databases": lambda o, a: _admin(o, lambda ad: ad.list_databases()),
            "database_exists": lambda o, a: _admin(o, lambda ad: ad.database_exists(a["database"])),
            "database_info": self._database_info,
            "create_database": self._create_database,
            "drop_database": self._drop_database,
            "list_tables": lambda o, a: _admin(o, lambda ad: ad.list_tables(a["database"])),
            "load_table": self._load_table,
            "create_table": self._create_table,
            "alter_table": self._alter_table,
            "drop_table": self._drop_table,
            "list_partitions": self._list_partitions,
            "create_partition": self._create_partition,
            "drop_partition": self._drop_partition,
            "row_count": self._row_count,
        }

    def _row_count(self, options: dict[str, str], args: dict[str, Any]) -> int | None:
        """`SELECT count(*)` without a scan: GetTableStats' row count, when it is the count the scan
        would give (a whole-table read of the live table; None otherwise, and Spark scans)."""
        from strom.spark.datasource import FlussDataSource

        read = ReadOptions.parse(options)
        source = FlussDataSource(options)
        info = source.table_info()
        whole = read.startup_mode is StartupMode.FULL or (
            read.startup_mode is StartupMode.EARLIEST and not info.has_primary_key
        )
        if not whole or read.union_read or read.end_timestamp_ms is not None or read.include_change_type:
            return None
        try:
            stats = bridge.run_admin(source.connection, lambda ad: ad.get_table_stats(info.table_path))
        except InvalidTableError:
            return None  # a primary-key table whose changelog image is WAL keeps no row count
        return int(stats.row_count)

    def _database_info(self, options: dict[str, str], args: dict[str, Any]) -> dict[str, str]:
        info = _admin(options, lambda ad: ad.get_database_info(args["database"]))
        out = dict(info.descriptor.custom_properties)
        if info.descriptor.comment:
            out[COMMENT] = info.descriptor.comment
        return out

    def _create_database(self, options: dict[str, str], args: dict[str, Any]) -> None:
        props = {k: v for k, v in (args.get("properties") or {}).items() if k not in SPARK_RESERVED}
        comment = props.pop(COMMENT, None)
        descriptor = DatabaseDescriptor(comment=comment, custom_properties=props)
        _admin(options, lambda ad: ad.create_database(args["database"], descriptor))

    def _drop_database(self, options: dict[str, str], args: dict[str, Any]) -> bool:
        _admin(options, lambda ad: ad.drop_database(args["database"], cascade=bool(args["cascade"])))
        return True

    def _load_table(self, options: dict[str, str], args: dict[str, Any]) -> dict[str, Any]:
        from strom.spark.datasource import FlussDataSource

        source = FlussDataSource({**options, TABLE: f"{args['database']}.{args['table']}"})
        schema = source.declared_schema()
        info = source.table_info()
        descriptor = info.descriptor
        shown = {**descriptor.properties, **descriptor.custom_properties}
        if descriptor.schema.primary_key:
            shown[PRIMARY_KEY] = ",".join(descriptor.schema.primary_key)
        if descriptor.bucket_keys:
            shown[BUCKET_KEY] = ",".join(descriptor.bucket_keys)
        if descriptor.bucket_count is not None:
            shown[BUCKET_NUM] = str(descriptor.bucket_count)
        if descriptor.comment:
            shown[COMMENT] = descriptor.comment
        return {
            "schema": json.loads(schema.json()),
            # virtual tables ($changelog, $binlog) are read whole, as their own unpartitioned tables
            "partition_keys": [] if "$" in args["table"] else list(descriptor.partition_keys),
            "properties": shown,
        }

    def _create_table(self, options: dict[str, str], args: dict[str, Any]) -> None:
        descriptor = descriptor_from_sql(args["schema"], args["partition_keys"], args["properties"])
        path = TablePath(args["database"], args["table"])
        _admin(options, lambda ad: ad.create_table(path, descriptor))

    def _alter_table(self, options: dict[str, str], args: dict[str, Any]) -> None:
        changes = [_change(item) for item in args["changes"]]
        path = TablePath(args["database"], args["table"])
        _admin(options, lambda ad: ad.alter_table(path, changes))

    def _drop_table(self, options: dict[str, str], args: dict[str, Any]) -> bool:
        path = TablePath(args["database"], args["table"])
        try:
            _admin(options, lambda ad: ad.drop_table(path))
        except TableNotExistError:
            return False
        return True

    def _list_partitions(self, options: dict[str, str], args: dict[str, Any]) -> list[dict[str, str]]:
        path = TablePath(args["database"], args["table"])
        spec = args.get("spec") or None
        infos = _admin(options, lambda ad: ad.list_partition_infos(path, spec))
        return [dict(info.spec) for info in infos]

    def _create_partition(self, options: dict[str, str], args: dict[str, Any]) -> None:
        path = TablePath(args["database"], args["table"])
        _admin(options, lambda ad: ad.create_partition(path, args["spec"]))

    def _drop_partition(self, options: dict[str, str], args: dict[str, Any]) -> bool:
        path = TablePath(args["database"], args["table"])
        try:
            _admin(options, lambda ad: ad.drop_partition(path, args["spec"]))
        except PartitionNotExistError:
            return False
        return True


# Fluss errors Spark has exceptions of its own for, by the kind the JVM side maps.
_KINDS: list[tuple[type[FlussError], str]] = [
    (DatabaseNotExistError, "NO_SUCH_DATABASE"),
    (DatabaseAlreadyExistError, "DATABASE_EXISTS"),
    (DatabaseNotEmptyError, "DATABASE_NOT_EMPTY"),
    (TableNotExistError, "NO_SUCH_TABLE"),
    (TableAlreadyExistError, "TABLE_EXISTS"),
    (PartitionAlreadyExistsError, "PARTITION_EXISTS"),
    (PartitionNotExistError, "NO_SUCH_PARTITION"),
]


def _error(kind: str, message: str, error: FlussError | None = None) -> str:
    answer: dict[str, Any] = {"error": kind, "message": message}
    if error is not None:
        answer["fluss_error"] = error.error_name
        answer["fluss_code"] = error.code
    return json.dumps(answer)


def _admin(options: Mapping[str, str], fn: Callable[[Admin], Any]) -> Any:
    servers = options.get(BOOTSTRAP_SERVERS)
    if not servers:
        raise SparkOptionError(
            f"The fluss catalog needs 'spark.sql.catalog.<name>.{BOOTSTRAP_SERVERS}' (host:port[,...])."
        )
    client = tuple(sorted((k, v) for k, v in options.items() if k.lower().startswith(CLIENT_PREFIX)))
    # The table path is not used for admin calls; ConnectionOptions only keys the connection.
    connection = ConnectionOptions(str(servers), TablePath("_", "_"), client)
    return bridge.run_admin(connection, fn)


_backend: CatalogBackend | None = None


def install(spark: Any) -> None:
    """Start Py4J's callback server (once) and hand the JVM catalog its Python side."""
    from pyspark.java_gateway import ensure_callback_server_started

    global _backend
    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)  # type: ignore[no-untyped-call]
    if _backend is None:
        _backend = CatalogBackend()  # kept here: the JVM holds only a proxy to it
    context._jvm.strom.spark.FlussCatalog.setBackend(_backend)
