"""Delta Lake as Strom's lake format (``datalake.format: delta``), with delta-rs.

No Fluss release tiers to Delta Lake; Strom names it as Fluss names its formats (``datalake.format:
delta``), but does not stamp it on tables (see `strom.server.coordinator.table_validation`).
Properties are the cluster's ``datalake.delta.*`` options without the prefix: ``warehouse`` (the root
of the tables: a path, ``file://``, ``s3://``, ...) and anything delta-rs's object store needs,
passed as storage options.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.delta.catalog import DeltaLakeCatalog
from strom.lake.delta.committer import DeltaLakeCommitter
from strom.lake.delta.writer import DeltaLakeWriter
from strom.lake.interface import LakeStorage, split_bucket
from strom.lake.warehouse import Warehouse

__all__ = ["DeltaLakeStorage"]


class DeltaLakeStorage(LakeStorage):
    format = "delta"

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(properties)
        self.warehouse = Warehouse.from_properties(self.format, self.properties)

    def catalog(self) -> DeltaLakeCatalog:
        return DeltaLakeCatalog(self.warehouse)

    def writer(
        self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
    ) -> DeltaLakeWriter:
        return DeltaLakeWriter(
            self.catalog(), table_info, split_bucket(table_info, bucket, partition), partition
        )

    def committer(self, table_info: TableInfo) -> DeltaLakeCommitter:
        return DeltaLakeCommitter(self.catalog(), table_info)
