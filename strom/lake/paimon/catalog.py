"""The Paimon catalog behind a Strom cluster, and creating lake tables in it.

Properties are the cluster's ``datalake.paimon.*`` options with the prefix stripped, handed to
pypaimon's ``CatalogFactory.create`` as they are: ``metastore`` (``filesystem`` by default, or
``jdbc`` / ``rest``), ``warehouse`` (a local path, ``file://``, ``s3://``, ...) and anything the
metastore or file system needs. A local warehouse directory is created when missing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from urllib.parse import urlparse

from pypaimon import CatalogFactory
from pypaimon.catalog.catalog import Catalog
from pypaimon.catalog.catalog_exception import (
    DatabaseAlreadyExistException,
    TableAlreadyExistException,
    TableNotExistException,
)
from pypaimon.common.identifier import Identifier
from pypaimon.schema.schema_change import Move, SchemaChange
from pypaimon.table.file_store_table import FileStoreTable

from strom.common.errors import InvalidConfigError, InvalidTableError, LakeTableAlreadyExistError
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake.interface import LakeCatalog
from strom.lake.paimon.schema import SYSTEM_COLUMNS, layout_mismatch, paimon_layout, to_paimon_type

__all__ = ["PaimonLakeCatalog", "catalog_options", "load_paimon_catalog", "table_identifier"]

METASTORE = "metastore"
WAREHOUSE = "warehouse"
FILESYSTEM_METASTORE = "filesystem"


def catalog_options(properties: Mapping[str, str]) -> dict[str, str]:
    """The options for CatalogFactory.create, checked, with a local warehouse made to exist."""
    options = {str(k): str(v) for k, v in properties.items()}
    metastore = options.setdefault(METASTORE, FILESYSTEM_METASTORE).strip().lower()
    warehouse = options.get(WAREHOUSE)
    if metastore == FILESYSTEM_METASTORE and not warehouse:
        raise InvalidConfigError("The Paimon filesystem catalog needs datalake.paimon.warehouse.")
    if warehouse:
        parsed = urlparse(warehouse)
        if parsed.scheme in ("", "file"):
            local = parsed.path if parsed.scheme else warehouse
            os.makedirs(local, exist_ok=True)
            if not parsed.scheme:
                # Relative paths would depend on each executor's working directory.
                options[WAREHOUSE] = os.path.abspath(local)
    return options


def load_paimon_catalog(properties: Mapping[str, str]) -> Catalog:
    options = catalog_options(properties)
    try:
        return CatalogFactory.create(options)
    except (ValueError, NotImplementedError) as e:
        raise InvalidConfigError(f"Cannot create the Paimon catalog from {sorted(options)}: {e}") from e


def table_identifier(table_path: TablePath) -> Identifier:
    """Fluss ``db.t`` is Paimon database ``db``, table ``t``."""
    return Identifier.create(table_path.database_name, table_path.table_name)


class PaimonLakeCatalog(LakeCatalog):
    def __init__(self, catalog: Catalog) -> None:
        self.paimon = catalog

    def load_table(self, table_path: TablePath) -> FileStoreTable:
        table = self.paimon.get_table(table_identifier(table_path))
        if not isinstance(table, FileStoreTable):
            raise InvalidTableError(f"Paimon table {table_path} is not a file store table.")
        return table

    def table_exists(self, table_path: TablePath) -> bool:
        try:
            self.paimon.get_table(table_identifier(table_path))
        except TableNotExistException:
            return False
        return True

    def create_table(self, table_info: TableInfo, *, creating_fluss_table: bool = True) -> None:
        layout = paimon_layout(table_info)
        identifier = table_identifier(table_info.table_path)
        with contextlib.suppress(DatabaseAlreadyExistException):  # a concurrent create won the race
            self.paimon.create_database(table_info.table_path.database_name, True)
        try:
            self.paimon.create_table(identifier, layout.to_schema(), False)
            return
        except TableAlreadyExistException:
            pass
        except ValueError as e:  # pypaimon's validation of keys, options and types
            raise InvalidTableError(f"Cannot create Paimon table {table_info.table_path}: {e}") from e
        existing = self.load_table(table_info.table_path)
        schema = existing.table_schema
        problem = layout_mismatch(
            schema.fields, schema.partition_keys, schema.primary_keys, schema.options, layout
        )
        if problem is not None:
            raise LakeTableAlreadyExistError(
                f"The table {table_info.table_path} already exists in Paimon catalog, but the table schema "
                f"is not compatible: {problem}. Please first drop the table in Paimon catalog or use a new "
                "table name."
            )
        if creating_fluss_table and existing.snapshot_manager().get_latest_snapshot() is not None:
            raise LakeTableAlreadyExistError(
                f"The table {table_info.table_path} already exists in Paimon catalog, and the table is not "
                "empty. Please first drop the table in Paimon catalog or use a new table name."
            )

    def evolve_table(self, table_info: TableInfo) -> list[str]:
        existing = {f.name for f in self.load_table(table_info.table_path).table_schema.fields}
        missing = [c for c in table_info.schema.columns if c.name not in existing]
        if not missing:
            return []
        first_system = next(iter(SYSTEM_COLUMNS))
        changes = [
            SchemaChange.add_column(
                column.name,
                to_paimon_type(column.data_type),
                column.comment,
                Move.before(column.name, first_system),
            )
            for column in missing
        ]
        self.paimon.alter_table(table_identifier(table_info.table_path), changes)
        return [c.name for c in missing]

    def drop_table(self, table_path: TablePath, *, purge: bool = False) -> bool:
        # pypaimon's filesystem catalog always deletes the table directory, so `purge` changes nothing.
        try:
            self.paimon.drop_table(table_identifier(table_path), False)
        except TableNotExistException:
            return False
        return True
