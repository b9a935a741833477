"""The Iceberg catalog behind a Strom cluster, and creating lake tables in it.

Properties are what `pyiceberg.catalog.load_catalog` takes (the cluster's ``datalake.iceberg.*``
options with the prefix stripped): ``type=sql`` with ``uri=sqlite:///…`` (or any SQLAlchemy URL)
and ``warehouse=file:///…`` by default, ``type=rest`` with ``uri=http://…`` for a REST catalog.
With no ``type`` and no ``uri`` an embedded SQLite catalog file is kept in a local warehouse
directory. ``name`` is the catalog name (default ``default``, pyiceberg's own); readers of a SQL
catalog must use the same one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Mapping
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table

from strom.common.errors import InvalidConfigError, InvalidTableError, LakeTableAlreadyExistError
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake.iceberg.schema import iceberg_layout, layout_mismatch, to_iceberg_type
from strom.lake.interface import LakeCatalog
from strom.lake.system_columns import SYSTEM_COLUMN_NAMES

__all__ = ["DEFAULT_CATALOG_NAME", "IcebergLakeCatalog", "load_iceberg_catalog", "table_identifier"]

# pyiceberg's own default name: `load_catalog(**properties)` then sees the same SQLite catalog rows.
DEFAULT_CATALOG_NAME = "default"
EMBEDDED_CATALOG_FILE = "iceberg_catalog.db"


def _local_dir(location: str) -> str | None:
    """The local directory of a warehouse location (path or file:// URL); None for remote ones."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else location
    return None


def catalog_properties(properties: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The catalog name and the properties for load_catalog, with the embedded default filled in."""
    props = {str(k): str(v) for k, v in properties.items()}
    name = props.pop("name", DEFAULT_CATALOG_NAME)
    catalog_type = props.get("type", "").strip().lower()
    if catalog_type == "hadoop":
        raise InvalidConfigError(
            "datalake.iceberg.type=hadoop is not supported by pyiceberg; use type=sql with a "
            "uri (sqlite:///path/catalog.db by default) or type=rest."
        )
    warehouse = props.get("warehouse")
    if warehouse and os.path.isabs(warehouse):
        # Plain paths become file:// URLs, so table locations carry a scheme for every reader.
        warehouse = props["warehouse"] = "file://" + warehouse
    if not catalog_type and "uri" not in props:
        local = _local_dir(warehouse) if warehouse else None
        if local is None:
            raise InvalidConfigError(
                "The Iceberg catalog needs datalake.iceberg.type and uri, or a local "
                "datalake.iceberg.warehouse for the embedded SQLite catalog."
            )
        props["type"] = "sql"
        props["uri"] = "sqlite:///" + os.path.join(os.path.abspath(local), EMBEDDED_CATALOG_FILE)
    uri = props.get("uri", "")
    if uri.startswith("sqlite:///"):
        # SQLite will not create the directory of its file.
        os.makedirs(os.path.dirname(uri[len("sqlite:///") :]) or ".", exist_ok=True)
    if warehouse and (local := _local_dir(warehouse)) is not None:
        os.makedirs(local, exist_ok=True)
    return name, props


def load_iceberg_catalog(properties: Mapping[str, str]) -> Catalog:
    name, props = catalog_properties(properties)
    try:
        return load_catalog(name, **props)
    except (ValueError, NotImplementedError) as e:
        raise InvalidConfigError(f"Cannot load the Iceberg catalog from {sorted(props)}: {e}") from e


def table_identifier(table_path: TablePath) -> tuple[str, str]:
    """Fluss ``db.t`` is Iceberg namespace ``db``, table ``t``."""
    return (table_path.database_name, table_path.table_name)


class IcebergLakeCatalog(LakeCatalog):
    def __init__(self, catalog: Catalog) -> None:
        self.iceberg = catalog

    def load_table(self, table_path: TablePath) -> Table:
        return self.iceberg.load_table(table_identifier(table_path))

    def table_exists(self, table_path: TablePath) -> bool:
        return self.iceberg.table_exists(table_identifier(table_path))

    def create_table(self, table_info: TableInfo, *, creating_fluss_table: bool = True) -> None:
        layout = iceberg_layout(table_info)
        identifier = table_identifier(table_info.table_path)
        with contextlib.suppress(NamespaceAlreadyExistsError):  # a concurrent create won the race
            self.iceberg.create_namespace_if_not_exists(identifier[0])
        try:
            self.iceberg.create_table(
                identifier,
                schema=layout.schema,
                partition_spec=layout.spec,
                sort_order=layout.sort_order,
                properties=layout.properties,
            )
            return
        except TableAlreadyExistsError:
            pass
        except ValueError as e:  # pyiceberg's validation of schema, spec or identifier fields
            raise InvalidTableError(f"Cannot create Iceberg table {table_info.table_path}: {e}") from e
        existing = self.iceberg.load_table(identifier)
        problem = layout_mismatch(
            existing.schema(), existing.spec(), existing.sort_order(), existing.properties, layout
        )
        if problem is not None:
            raise LakeTableAlreadyExistError(
                f"The table {table_info.table_path} already exists in Iceberg catalog, but {problem}. "
                "Please first drop the table in Iceberg catalog or use a new table name."
            )
        if creating_fluss_table and existing.current_snapshot() is not None:
            raise LakeTableAlreadyExistError(
                f"The table {table_info.table_path} already exists in Iceberg catalog, and the table is "
                "not empty. Please first drop the table in Iceberg catalog or use a new table name."
            )

    def evolve_table(self, table_info: TableInfo) -> list[str]:
        table = self.load_table(table_info.table_path)
        existing = set(table.schema().column_names)
        missing = [c for c in table_info.schema.columns if c.name not in existing]
        if not missing:
            return []
        ids = itertools.count(1)  # nested ids: pyiceberg gives added fields fresh ones
        with table.update_schema() as update:
            for column in missing:
                update.add_column(
                    column.name, to_iceberg_type(column.data_type, lambda: next(ids)), doc=column.comment
                )
                update.move_before(column.name, SYSTEM_COLUMN_NAMES[0])
        return [c.name for c in missing]

    def drop_table(self, table_path: TablePath, *, purge: bool = False) -> bool:
        identifier = table_identifier(table_path)
        try:
            if purge:
                self.iceberg.purge_table(identifier)
            else:
                self.iceberg.drop_table(identifier)
        except NoSuchTableError:
            return False
        return True

    def close(self) -> None:
        engine = getattr(self.iceberg, "engine", None)  # SqlCatalog keeps an SQLAlchemy engine
        if engine is not None:
            engine.dispose()
