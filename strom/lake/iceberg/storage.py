"""Apache Iceberg as Strom's lake format (``datalake.format: iceberg``)."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.iceberg.catalog import IcebergLakeCatalog, load_iceberg_catalog
from strom.lake.iceberg.committer import IcebergLakeCommitter
from strom.lake.iceberg.writer import IcebergLakeWriter
from strom.lake.interface import LakeStorage, split_bucket

__all__ = ["IcebergLakeStorage"]


class IcebergLakeStorage(LakeStorage):
    """Catalogs, writers and committers for Iceberg tables in the configured catalog.

    `properties` are the catalog properties (``datalake.iceberg.*`` without the prefix); see
    `strom.lake.iceberg.catalog`. The pyiceberg catalog is opened once per process, on first use.
    """

    format = "iceberg"

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(properties)
        self._iceberg: Catalog | None = None

    def _catalog(self) -> Catalog:
        if self._iceberg is None:
            self._iceberg = load_iceberg_catalog(self.properties)
        return self._iceberg

    def catalog(self) -> IcebergLakeCatalog:
        return IcebergLakeCatalog(self._catalog())

    def writer(
        self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
    ) -> IcebergLakeWriter:
        table_bucket = split_bucket(table_info, bucket, partition)
        table = self.catalog().load_table(table_info.table_path)
        return IcebergLakeWriter(table, table_info, table_bucket, partition)

    def committer(self, table_info: TableInfo) -> IcebergLakeCommitter:
        return IcebergLakeCommitter(self.catalog(), table_info)
