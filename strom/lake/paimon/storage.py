"""Apache Paimon as Strom's lake format (``datalake.format: paimon``), written with pypaimon."""

from __future__ import annotations

from collections.abc import Mapping

from pypaimon.catalog.catalog import Catalog

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.interface import LakeStorage, split_bucket
from strom.lake.paimon.catalog import PaimonLakeCatalog, load_paimon_catalog
from strom.lake.paimon.committer import PaimonLakeCommitter
from strom.lake.paimon.writer import PaimonLakeWriter

__all__ = ["PaimonLakeStorage"]


class PaimonLakeStorage(LakeStorage):
    """Catalogs, writers and committers for Paimon tables in the configured catalog.

    `properties` are the catalog options (``datalake.paimon.*`` without the prefix): ``metastore``
    and ``warehouse`` at least; see `strom.lake.paimon.catalog`. The pypaimon catalog is opened
    once per process, on first use.
    """

    format = "paimon"

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(properties)
        self._paimon: Catalog | None = None

    def _catalog(self) -> Catalog:
        if self._paimon is None:
            self._paimon = load_paimon_catalog(self.properties)
        return self._paimon

    def catalog(self) -> PaimonLakeCatalog:
        return PaimonLakeCatalog(self._catalog())

    def writer(
        self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
    ) -> PaimonLakeWriter:
        table_bucket = split_bucket(table_info, bucket, partition)
        table = self.catalog().load_table(table_info.table_path)
        return PaimonLakeWriter(table, table_info, table_bucket, partition)

    def committer(self, table_info: TableInfo) -> PaimonLakeCommitter:
        return PaimonLakeCommitter(self.catalog(), table_info)
