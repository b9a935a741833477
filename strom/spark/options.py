"""Options of the `fluss` Spark data source, parsed once into typed values.

Names follow Fluss's connectors (``bootstrap.servers``, ``scan.startup.mode``,
``scan.startup.timestamp``, ``scan.incremental.{start,end}.timestamp``, ``sink.ignore-delete``);
Spark passes every option as a string in a case-insensitive mapping. Bad values raise
`SparkOptionError`, whose message names the option and what it accepts.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom.client.admin import as_table_path
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath

BOOTSTRAP_SERVERS = "bootstrap.servers"
TABLE = "table"
# `spark.read.format("fluss").load("db.t")` passes the table as option "path".
PATH = "path"
STARTUP_MODE = "scan.startup.mode"
STARTUP_TIMESTAMP = "scan.startup.timestamp"
INCREMENTAL_START = "scan.incremental.start.timestamp"
INCREMENTAL_END = "scan.incremental.end.timestamp"
INCLUDE_CHANGE_TYPE = "scan.include-change-type"
INCLUDE_METADATA = "scan.include-metadata"
FILTER_PUSHDOWN = "scan.filter-pushdown"
UNION_READ = "scan.union-read"
# The lake of union reads, named as in the cluster's configuration (datalake.<format>.*).
DATALAKE_FORMAT = "datalake.format"
DATALAKE_PREFIX = "datalake."
MAX_ROWS_PER_TRIGGER = "maxRowsPerTrigger"
# Kafka users know the offset-based name; in Fluss one record is one offset.
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
SPLITS = "scan.splits"
PARTIAL_UPDATE_COLUMNS = "sink.partial-update.columns"
IGNORE_DELETE = "sink.ignore-delete"
CLIENT_PREFIX = "client."

# The optional change-type column of reads, and the column writes take change types from.
CHANGE_TYPE_COLUMN = "_change_type"
# Optional metadata columns of reads; Fluss's lake tables use the same names.
BUCKET_COLUMN = "__bucket"
OFFSET_COLUMN = "__offset"
TIMESTAMP_COLUMN = "__timestamp"

# 2 cores here: a few Spark partitions keep the per-task cost low (see DESIGN §3b).
DEFAULT_SPLITS = 2

_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?$")


class SparkOptionError(ValueError):
    """An option of the fluss data source is missing or has a bad value."""


class StartupMode(enum.StrEnum):
    """Where a read starts (Fluss's ``scan.startup.mode``)."""

    FULL = "full"  # PK tables: the current rows (snapshot), then changes; log tables: earliest
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


def parse_timestamp_ms(value: str, option: str) -> int:
    """Epoch milliseconds from ``'1678883047356'`` or ``'2023-12-09 23:09:12'`` (UTC, as the session)."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    if _DATETIME.match(text):
        moment = dt.datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=dt.UTC)
        return int(moment.timestamp() * 1000)
    raise SparkOptionError(
        f"Invalid value for '{option}': '{value}'. Use epoch milliseconds like '1678883047356' "
        "or 'yyyy-MM-dd HH:mm:ss' (UTC) like '2023-12-09 23:09:12'."
    )


def _bool(options: Mapping[str, str], key: str, default: bool = False) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SparkOptionError(f"Invalid value for '{key}': '{raw}'. Use 'true' or 'false'.")


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise SparkOptionError(f"Invalid value for '{key}': '{raw}'. Use a positive integer.")
    return value


@dataclass(frozen=True)
class ConnectionOptions:
    """Where the table lives, plus ``client.*`` options handed to the client as they are."""

    bootstrap_servers: str
    table_path: TablePath
    client: tuple[tuple[str, str], ...] = ()

    def client_config(self) -> dict[str, str]:
        return {BOOTSTRAP_SERVERS: self.bootstrap_servers, **dict(self.client)}

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ConnectionOptions:
        servers = options.get(BOOTSTRAP_SERVERS)
        if not servers or not str(servers).strip():
            raise SparkOptionError(
                f"The fluss data source needs option '{BOOTSTRAP_SERVERS}' (host:port[,host:port...])."
            )
        table = options.get(TABLE) or options.get(PATH)
        if not table or not str(table).strip():
            raise SparkOptionError(
                f"The fluss data source needs option '{TABLE}' ('database.table'), or a table name "
                "given to load()/save()."
            )
        try:
            path = as_table_path(str(table).strip())
        except ValueError as e:
            raise SparkOptionError(f"Invalid value for '{TABLE}': '{table}': {e}") from e
        client = tuple(
            sorted((str(k), str(v)) for k, v in options.items() if str(k).lower().startswith(CLIENT_PREFIX))
        )
        return cls(str(servers).strip(), path, client)


@dataclass(frozen=True)
class ReadOptions:
    """How to read: start and end bounds, extra columns and how finely to split the work."""

    startup_mode: StartupMode = StartupMode.FULL
    startup_timestamp_ms: int | None = None
    # Batch reads of log tables: records committed in [start, end) only.
    end_timestamp_ms: int | None = None
    include_change_type: bool = False
    include_metadata: bool = False
    max_rows_per_trigger: int | None = None
    splits: int = DEFAULT_SPLITS
    # Opt-in: Spark 4.3 reuses a DataFrame's last pushed-down read plan for its later queries
    # without filters, so pruning by pushed filters is only safe with one query per load().
    filter_pushdown: bool = False
    # Opt-in: batch reads take what tiering already wrote from the lake, the rest from Fluss.
    union_read: bool = False
    # ``datalake.format`` and ``datalake.<format>.*`` (union reads only).
    lake: tuple[tuple[str, str], ...] = ()

    @property
    def time_bounded(self) -> bool:
        return self.startup_mode is StartupMode.TIMESTAMP or self.end_timestamp_ms is not None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        raw_mode = options.get(STARTUP_MODE)
        start_ts = options.get(STARTUP_TIMESTAMP)
        incremental_start = options.get(INCREMENTAL_START)
        incremental_end = options.get(INCREMENTAL_END)
        if raw_mode is None:
            mode = StartupMode.TIMESTAMP if (start_ts or incremental_start) else StartupMode.FULL
        else:
            try:
                mode = StartupMode(str(raw_mode).strip().lower())
            except ValueError:
                choices = ", ".join(f"'{m.value}'" for m in StartupMode)
                raise SparkOptionError(
                    f"Invalid value for '{STARTUP_MODE}': '{raw_mode}'. Use one of {choices}."
                ) from None
        start_ms: int | None = None
        if mode is StartupMode.TIMESTAMP:
            raw = start_ts if start_ts is not None else incremental_start
            if raw is None or not str(raw).strip():
                raise SparkOptionError(
                    f"'{STARTUP_MODE}' is 'timestamp' but '{STARTUP_TIMESTAMP}' is not set."
                )
            start_ms = parse_timestamp_ms(str(raw), STARTUP_TIMESTAMP if start_ts else INCREMENTAL_START)
        elif start_ts is not None or incremental_start is not None:
            raise SparkOptionError(
                f"'{STARTUP_TIMESTAMP}' needs '{STARTUP_MODE}' = 'timestamp' (it is '{mode.value}')."
            )
        end_ms = None
        if incremental_end is not None:
            end_ms = parse_timestamp_ms(str(incremental_end), INCREMENTAL_END)
            if start_ms is not None and start_ms >= end_ms:
                raise SparkOptionError(
                    f"Invalid time range: the start timestamp {start_ms} must be strictly before the "
                    f"end timestamp {end_ms}; the range is [start, end)."
                )
        union_read = _bool(options, UNION_READ)
        if union_read and (mode not in (StartupMode.FULL, StartupMode.EARLIEST) or end_ms is not None):
            raise SparkOptionError(
                f"'{UNION_READ}' reads whole tables: it needs '{STARTUP_MODE}' 'full' or 'earliest' "
                f"and no '{INCREMENTAL_END}'."
            )
        max_rows = _positive_int(options, MAX_ROWS_PER_TRIGGER)
        if max_rows is None:
            max_rows = _positive_int(options, MAX_OFFSETS_PER_TRIGGER)
        return cls(
            startup_mode=mode,
            startup_timestamp_ms=start_ms,
            end_timestamp_ms=end_ms,
            include_change_type=_bool(options, INCLUDE_CHANGE_TYPE),
            include_metadata=_bool(options, INCLUDE_METADATA),
            max_rows_per_trigger=max_rows,
            splits=_positive_int(options, SPLITS) or DEFAULT_SPLITS,
            filter_pushdown=_bool(options, FILTER_PUSHDOWN),
            union_read=union_read,
            lake=_lake_options(options) if union_read else (),
        )


def _lake_options(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The lake configuration given as read options: ``datalake.format`` plus its ``datalake.<format>.*``
    (empty when not given: the table's own properties say where its lake is, see `resolve_lake`)."""
    lake_format = str(options.get(DATALAKE_FORMAT) or "").strip().lower()
    if not lake_format:
        return ()
    prefix = f"{DATALAKE_PREFIX}{lake_format}."
    found = {DATALAKE_FORMAT: lake_format}
    # Spark's option map lowercases keys; the lake formats' catalog properties are lowercase anyway.
    found.update({str(k): str(v) for k, v in options.items() if str(k).lower().startswith(prefix)})
    return tuple(sorted(found.items()))


def _served(key: str) -> bool:
    """A `table.datalake.<format>.<option>` property (not one of the table's own datalake options)."""
    rest = key.removeprefix(f"table.{DATALAKE_PREFIX}")
    return rest != key and "." in rest and rest.split(".")[0] in ("delta",)


def resolve_lake(given: Sequence[tuple[str, str]], table: TableInfo) -> tuple[tuple[str, str], ...]:
    """Where a union read finds the table's lake: the read options when they name one (they win), else
    the table's properties, which the coordinator fills for lake-enabled tables with the cluster's
    ``datalake.<format>.*`` options as ``table.datalake.<format>.*`` (secrets left out, as in Fluss)."""
    if given:
        return tuple(given)
    properties = dict(table.descriptor.properties)
    lake_format = str(properties.get(f"table.{DATALAKE_FORMAT}") or "").strip().lower()
    if not lake_format:
        # Delta tables are not stamped with their format (Fluss clients refuse the value); the
        # coordinator still serves the cluster's table.datalake.<format>.* options: one format's.
        served = {k[len(f"table.{DATALAKE_PREFIX}") :].split(".")[0] for k in properties if _served(k)}
        lake_format = served.pop() if len(served) == 1 else ""
    if not lake_format:
        raise SparkOptionError(
            f"'{UNION_READ}' on '{table.table_path}' needs to know its lake: the table has no "
            f"'table.{DATALAKE_FORMAT}' property (is 'table.datalake.enabled' set and the cluster's "
            f"'datalake.format' configured?); or pass '{DATALAKE_FORMAT}' and the 'datalake.<format>.*' "
            "options."
        )
    prefix = f"table.{DATALAKE_PREFIX}{lake_format}."
    found = {DATALAKE_FORMAT: lake_format}
    found.update({key[len("table.") :]: value for key, value in properties.items() if key.startswith(prefix)})
    return tuple(sorted(found.items()))


@dataclass(frozen=True)
class WriteOptions:
    """How to write: which columns a partial update sets, and whether deletes are dropped."""

    partial_update_columns: tuple[str, ...] | None = None
    ignore_delete: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        raw = options.get(PARTIAL_UPDATE_COLUMNS)
        columns = None
        if raw is not None:
            columns = tuple(c.strip() for c in str(raw).split(",") if c.strip())
            if not columns:
                raise SparkOptionError(
                    f"Invalid value for '{PARTIAL_UPDATE_COLUMNS}': '{raw}'. List the columns to "
                    "update, comma-separated, primary key included."
                )
        return cls(columns, _bool(options, IGNORE_DELETE))
