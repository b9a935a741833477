"""Lance datasets that mirror Fluss log tables, one per table under the warehouse.

Fluss ``db.t`` is the dataset ``<warehouse>/<db>/<t>.lance`` (the path Fluss's own Lance tiering
uses). Its schema is the Fluss columns as Fluss clients see them in Arrow, then the system columns
``__bucket`` (int32), ``__offset`` (int64) and ``__timestamp`` (timestamp[ms, UTC]), which Fluss's
Lance tables lack and Strom's union reads need. Primary-key tables are refused, as in Fluss 1.0:
Lance has no merge-on-read by key that a tiering round could commit atomically with its offsets.
"""

from __future__ import annotations

from typing import Any

import lance
import pyarrow as pa

from strom.common.errors import InvalidTableError, LakeTableAlreadyExistError
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake.interface import LakeCatalog
from strom.lake.system_columns import BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN
from strom.lake.warehouse import Warehouse, check_user_columns, delete_files

__all__ = ["LANCE_SUFFIX", "LanceLakeCatalog", "lance_schema"]

LANCE_SUFFIX = ".lance"
SYSTEM_FIELDS = [
    pa.field(BUCKET_COLUMN, pa.int32(), nullable=False),
    pa.field(OFFSET_COLUMN, pa.int64(), nullable=False),
    pa.field(TIMESTAMP_COLUMN, pa.timestamp("ms", tz="UTC"), nullable=False),
]


def lance_schema(info: TableInfo) -> pa.Schema:
    """The dataset's schema for a Fluss table; InvalidTableError for tables Lance cannot mirror."""
    if info.has_primary_key:
        raise InvalidTableError(
            f"Cannot tier primary-key table {info.table_path} to Lance: Lance takes log tables only "
            "(as in Fluss 1.0)."
        )
    check_user_columns(info, "Lance")
    return pa.schema([*info.schema.to_arrow_schema(), *SYSTEM_FIELDS])


class LanceLakeCatalog(LakeCatalog):
    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse

    def uri(self, table_path: TablePath) -> str:
        return self.warehouse.table_uri(table_path.database_name, table_path.table_name, LANCE_SUFFIX)

    def open(self, table_path: TablePath, version: int | None = None) -> lance.LanceDataset:
        return lance.dataset(
            self.uri(table_path), version=version, storage_options=self.warehouse.storage_options or None
        )

    def table_exists(self, table_path: TablePath) -> bool:
        try:
            self.open(table_path)
        except (ValueError, FileNotFoundError, OSError):
            return False
        return True

    def create_table(self, table_info: TableInfo, *, creating_fluss_table: bool = True) -> None:
        schema = lance_schema(table_info)
        path = table_info.table_path
        if not self.table_exists(path):
            try:
                lance.write_dataset(
                    schema.empty_table(),
                    self.uri(path),
                    schema=schema,
                    mode="create",
                    storage_options=self.warehouse.storage_options or None,
                )
                return
            except (ValueError, OSError):
                if not self.table_exists(path):  # not a concurrent create that won the race
                    raise
        existing = self.open(path)
        if not existing.schema.equals(schema):
            raise LakeTableAlreadyExistError(
                f"The table {path} already exists in the Lance warehouse at {self.uri(path)}, but its schema "
                f"{existing.schema} is not {schema}. Please first drop the dataset or use a new table name."
            )
        if creating_fluss_table and existing.count_rows() > 0:
            raise LakeTableAlreadyExistError(
                f"The table {path} already exists in the Lance warehouse at {self.uri(path)}, and it is not "
                "empty. Please first drop the dataset or use a new table name."
            )

    def evolve_table(self, table_info: TableInfo) -> list[str]:
        dataset = self.open(table_info.table_path)
        existing = set(dataset.schema.names)
        missing = [c for c in table_info.schema.columns if c.name not in existing]
        if not missing:
            return []
        # Lance appends new columns after the system columns; readers select them by name.
        fields: Any = [c.data_type.to_arrow_field(c.name).with_nullable(True) for c in missing]
        dataset.add_columns(fields)
        return [c.name for c in missing]

    def drop_table(self, table_path: TablePath, *, purge: bool = False) -> bool:
        # A Lance dataset is its directory: dropping it always deletes its files.
        if not self.table_exists(table_path):
            return False
        lance.LanceDataset.drop(self.uri(table_path), storage_options=self.warehouse.storage_options or None)
        return True


def delete_data_files(catalog: LanceLakeCatalog, table_path: TablePath, names: list[str]) -> None:
    """Delete data files of the dataset by their names (as fragments list them)."""
    base = catalog.uri(table_path)
    delete_files([f"{base}/data/{name}" for name in names], catalog.warehouse.storage_options)
