"""Lance as Strom's lake format for log tables (``datalake.format: lance``), written with pylance.

Properties are the cluster's ``datalake.lance.*`` options without the prefix: ``warehouse`` (the
root of the datasets: a path, ``file://``, ``s3://``, ...) and anything Lance's object store needs
(``aws_access_key_id``, ``aws_endpoint``, ...), passed as its storage options.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake.interface import LakeStorage, split_bucket
from strom.lake.lance.catalog import LanceLakeCatalog
from strom.lake.lance.committer import LanceLakeCommitter
from strom.lake.lance.writer import LanceLakeWriter
from strom.lake.warehouse import Warehouse

__all__ = ["LanceLakeStorage"]


class LanceLakeStorage(LakeStorage):
    format = "lance"

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(properties)
        self.warehouse = Warehouse.from_properties(self.format, self.properties)

    def catalog(self) -> LanceLakeCatalog:
        return LanceLakeCatalog(self.warehouse)

    def writer(
        self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
    ) -> LanceLakeWriter:
        return LanceLakeWriter(
            self.catalog(), table_info, split_bucket(table_info, bucket, partition), partition
        )

    def committer(self, table_info: TableInfo) -> LanceLakeCommitter:
        return LanceLakeCommitter(self.catalog(), table_info)
