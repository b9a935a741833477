"""A handle on one table of a connection: its TableInfo, from which writers, scanners and lookupers start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from strom.common.schema import Schema
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath

if TYPE_CHECKING:
    from strom.client.connection import Connection
    from strom.client.lookup.lookuper import TableLookup
    from strom.client.scanner.table_scan import TableScan
    from strom.client.upsert.upsert_writer import TableUpsert
    from strom.client.writer.append_writer import TableAppend


@dataclass(frozen=True)
class Table:
    """One table as it was when `Connection.get_table` fetched it.

    Writers, scanners and lookupers hang off this value (``new_append()``, ``new_upsert()``,
    ``new_scan()``, ``new_lookup()``); they use `connection` for the metadata cache, the connection
    pool and the client configuration, and `info` for the schema, buckets and table options.
    """

    connection: Connection
    info: TableInfo

    @property
    def path(self) -> TablePath:
        return self.info.table_path

    @property
    def table_id(self) -> int:
        return self.info.table_id

    @property
    def schema(self) -> Schema:
        return self.info.schema

    @property
    def schema_id(self) -> int:
        return self.info.schema_id

    @property
    def has_primary_key(self) -> bool:
        return self.info.has_primary_key

    @property
    def is_partitioned(self) -> bool:
        return self.info.is_partitioned

    @property
    def bucket_count(self) -> int:
        return self.info.bucket_count

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.info.schema.to_arrow_schema()

    # ------------------------------------------------------------------ entry points

    def new_append(self) -> TableAppend:
        """Append writers for this log table: ``table.new_append().create_writer()``."""
        from strom.client.writer.append_writer import TableAppend

        return TableAppend(self)

    def new_upsert(self) -> TableUpsert:
        """Upsert writers for this primary-key table: ``table.new_upsert().create_writer()``."""
        from strom.client.upsert.upsert_writer import TableUpsert

        return TableUpsert(self)

    def new_lookup(self) -> TableLookup:
        """Key lookups of this primary-key table: ``table.new_lookup().create_lookuper()``."""
        from strom.client.lookup.lookuper import TableLookup

        return TableLookup(self)

    def new_scan(self) -> TableScan:
        """Log scans of this table: ``table.new_scan().project_by_name([...]).create_log_scanner()``."""
        from strom.client.scanner.table_scan import TableScan

        return TableScan(self)

    def __repr__(self) -> str:
        return f"Table({self.path}, id={self.table_id}, schema_id={self.schema_id})"
