from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from lake_helpers import ReadBoth, duckdb_connection, read_duckdb, read_pyiceberg

from strom.common.table_descriptor import TableInfo
from strom.lake.iceberg.storage import IcebergLakeStorage


@pytest.fixture
def warehouse(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "warehouse"


@pytest.fixture
def storage(tmp_path: pathlib.Path, warehouse: pathlib.Path) -> IcebergLakeStorage:
    """An Iceberg lake in a fresh SQLite catalog and local warehouse, as pyiceberg takes them."""
    return IcebergLakeStorage(
        {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"file://{warehouse}",
        }
    )


@pytest.fixture(scope="session")
def duck(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_connection(tmp_path_factory.mktemp("duckdb_ext"))
    yield con
    con.close()


@pytest.fixture
def read_both(
    storage: IcebergLakeStorage, duck: duckdb.DuckDBPyConnection
) -> ReadBoth:
    """Rows of a lake table through pyiceberg and through DuckDB's iceberg_scan."""

    def read(info: TableInfo, columns: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        table = storage.catalog().load_table(info.table_path)
        return read_pyiceberg(storage, info, columns), read_duckdb(duck, table.metadata_location, columns)

    return read
