"""Apache Iceberg lake format through pyiceberg (see docs/lake.md)."""

from strom.lake.iceberg.catalog import IcebergLakeCatalog, load_iceberg_catalog
from strom.lake.iceberg.committer import IcebergLakeCommitter
from strom.lake.iceberg.storage import IcebergLakeStorage
from strom.lake.iceberg.writer import IcebergLakeWriter, IcebergWriteResult

__all__ = [
    "IcebergLakeCatalog",
    "IcebergLakeCommitter",
    "IcebergLakeStorage",
    "IcebergLakeWriter",
    "IcebergWriteResult",
    "load_iceberg_catalog",
]
