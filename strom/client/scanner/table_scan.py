"""``table.new_scan()``: configures projection and filter, then creates log scanners."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from strom.client.scanner.filter import Filter
from strom.client.scanner.startup import StartupMode, StartupSpec
from strom.common.errors import InvalidColumnProjectionError
from strom.common.predicate import Predicate, predicate_to_pb
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.scanner.kv_scanner import KvScanner
    from strom.client.scanner.log_scanner import LogScanner
    from strom.client.table import Table

__all__ = ["ReadPlan", "TableScan"]


@dataclass(frozen=True)
class ReadPlan:
    """What a scanner asks the server for and how it decodes the answer.

    `fetch_columns` are the projected column indexes in ascending order (what FetchLog carries and
    the server returns); `output_order` picks the caller's order out of the decoded batch.
    """

    table_schema: pa.Schema
    fetch_columns: tuple[int, ...] | None  # None: every column
    output_order: tuple[int, ...] | None  # None: as decoded
    predicate: Predicate | None
    predicate_pb: pb.PbPredicate | None

    @property
    def decode_schema(self) -> pa.Schema:
        if self.fetch_columns is None:
            return self.table_schema
        return pa.schema([self.table_schema.field(i) for i in self.fetch_columns])

    @property
    def output_schema(self) -> pa.Schema:
        schema = self.decode_schema
        if self.output_order is None:
            return schema
        return pa.schema([schema.field(i) for i in self.output_order])

    def shape(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch if self.output_order is None else batch.select(list(self.output_order))


class TableScan:
    def __init__(self, table: Table) -> None:
        self.table = table
        self._projection: list[int] | None = None
        self._filter: Filter | None = None
        self._startup = StartupSpec()

    def project(self, indexes: Sequence[int]) -> TableScan:
        """Read only these columns (0-based indexes), returned in the order given."""
        count = len(self.table.schema.column_names)
        columns = [int(i) for i in indexes]
        if not columns:
            raise InvalidColumnProjectionError("the projection must name at least one column")
        bad = [i for i in columns if not 0 <= i < count]
        if bad:
            raise InvalidColumnProjectionError(
                f"projection indexes {bad} are out of range: table '{self.table.path}' has {count} columns"
            )
        if len(set(columns)) != len(columns):
            raise InvalidColumnProjectionError(f"projection {columns} names a column twice")
        self._projection = columns
        return self

    def project_by_name(self, names: Sequence[str]) -> TableScan:
        """Read only these columns, returned in the order given."""
        known = self.table.schema.column_names
        missing = [n for n in names if n not in known]
        if missing:
            raise InvalidColumnProjectionError(
                f"columns {missing} are not in table '{self.table.path}' (columns: {known})"
            )
        return self.project([known.index(n) for n in names])

    def filter(self, predicate: Filter | None) -> TableScan:
        """Let the server skip log batches in which no row can match (rows are not filtered; see
        `strom.client.scanner.filter`)."""
        if predicate is not None and not isinstance(predicate, Filter):
            raise TypeError("filter() takes an expression built with strom.client.scanner.col(...)")
        self._filter = predicate
        return self

    def startup_mode(self, mode: StartupMode | str, timestamp_ms: int | None = None) -> TableScan:
        """Where `LogScanner.subscribe_startup` starts: "full" (the default: a primary-key table's KV
        snapshot, then its changelog), "earliest", "latest" or "timestamp" (with `timestamp_ms`)."""
        self._startup = StartupSpec.of(mode, timestamp_ms)
        return self

    def options(self, options: Mapping[str, object]) -> TableScan:
        """Scan options by their Fluss names: ``scan.startup.mode``, ``scan.startup.timestamp``."""
        self._startup = StartupSpec.from_options(options)
        return self

    def plan(self) -> ReadPlan:
        schema = self.table.schema
        arrow_schema = schema.to_arrow_schema()
        fetch: tuple[int, ...] | None = None
        order: tuple[int, ...] | None = None
        if self._projection is not None and self._projection != list(range(len(arrow_schema))):
            fetch = tuple(sorted(self._projection))
            if list(fetch) != self._projection:
                order = tuple(fetch.index(i) for i in self._projection)
        predicate = predicate_pb = None
        if self._filter is not None:
            predicate = self._filter.bind(schema)
            types = {c.column_id: c.data_type for c in schema.columns}
            predicate_pb = predicate_to_pb(predicate, types, pb.PbPredicate())
        return ReadPlan(arrow_schema, fetch, order, predicate, predicate_pb)

    def create_log_scanner(self) -> LogScanner:
        from strom.client.scanner.log_scanner import LogScanner

        return LogScanner(self.table, self.plan(), self._startup)

    def create_kv_scanner(
        self,
        bucket: int,
        partition_id: int | None = None,
        *,
        batch_size_bytes: int | None = None,
        limit: int | None = None,
    ) -> KvScanner:
        """A ScanKv scan of one bucket of a primary-key table: its current rows from a consistent
        snapshot, page by page (kv_scanner.py). Projection and filter are not applied."""
        from strom.client.scanner.kv_scanner import DEFAULT_SCAN_BATCH_BYTES, KvScanner

        if self._projection is not None or self._filter is not None:
            raise ValueError("a KV scan returns whole rows: projection and filter are for log scanners")
        return KvScanner(
            self.table,
            bucket,
            partition_id,
            batch_size_bytes=batch_size_bytes or DEFAULT_SCAN_BATCH_BYTES,
            limit=limit,
        )

    # pyfluss's name for the scanner that returns Arrow; ours returns both records and Arrow.
    create_record_batch_log_scanner = create_log_scanner
