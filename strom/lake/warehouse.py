"""Where the tables of a path-based lake format live: ``<warehouse>/<db>/<table>``.

Lance and Delta Lake have no catalog of their own here: a table is a directory under the root URI
``datalake.<format>.warehouse``, so any reader finds it from ``cluster.json`` alone. Plain paths and
``file://`` URIs are local (made absolute, created when missing); anything else (``s3://``, ...)
is handed to the format's object store as it is, with the other properties as storage options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from strom.common.errors import InvalidConfigError, InvalidTableError
from strom.common.file_io import load_file_io
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType
from strom.lake.system_columns import SYSTEM_COLUMN_NAMES

__all__ = ["Warehouse", "check_user_columns", "delete_files"]

WAREHOUSE = "warehouse"


@dataclass(frozen=True)
class Warehouse:
    """The root URI of a lake format's tables and the options its object store needs."""

    root: str
    # Everything but `warehouse`: credentials, endpoints, ... (the format's storage options).
    storage_options: dict[str, str]

    @classmethod
    def from_properties(cls, lake_format: str, properties: Mapping[str, str]) -> Warehouse:
        options = {str(k): str(v) for k, v in properties.items()}
        root = options.pop(WAREHOUSE, "").strip()
        if not root:
            raise InvalidConfigError(f"The {lake_format} lake needs datalake.{lake_format}.warehouse.")
        parsed = urlparse(root)
        if parsed.scheme in ("", "file"):
            # Relative paths would depend on each executor's working directory.
            root = os.path.abspath(parsed.path if parsed.scheme else root)
            os.makedirs(root, exist_ok=True)
        return cls(root.rstrip("/"), options)

    @property
    def is_local(self) -> bool:
        return "://" not in self.root

    def table_uri(self, database: str, table: str, suffix: str = "") -> str:
        return f"{self.root}/{database}/{table}{suffix}"


def delete_files(uris: list[str], storage_options: Mapping[str, str]) -> None:
    """Delete files (local paths or object-store URIs); missing ones are fine."""
    for uri in uris:
        io = load_file_io(uri, storage_options)
        if io.fs.exists(io.path):
            io.fs.rm(io.path)


def check_user_columns(info: TableInfo, lake_format: str, unsupported: tuple[str, ...] = ()) -> None:
    """Refuse columns named like the system columns, and types the format cannot store."""
    for column in info.schema.columns:
        if column.name in SYSTEM_COLUMN_NAMES:
            raise InvalidTableError(f"Column '{column.name}' conflicts with a reserved system column name.")
        _check_type(column.name, column.data_type, lake_format, unsupported)


def _check_type(name: str, data_type: DataType, lake_format: str, unsupported: tuple[str, ...]) -> None:
    if data_type.root.name in unsupported:
        raise InvalidTableError(f"Column '{name}' has type {data_type}, which {lake_format} cannot store.")
    children = [data_type.element_type, data_type.key_type, data_type.value_type]
    children += [f.type for f in data_type.fields or ()]
    for child in children:
        if child is not None:
            _check_type(name, child, lake_format, unsupported)
