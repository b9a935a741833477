"""Helpers for the Paimon lake tests: the storage, Paimon bucketing, a tiering twin and a reader.

The simulated tiering service of `lake_helpers` buckets rows with Iceberg's function; a Fluss table
of a Paimon cluster buckets them with Paimon's, which `PaimonTiering` uses instead.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lake_helpers import Change, Tiering, table_info

from strom.common.bucketing import paimon_bucket
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType
from strom.lake.paimon.storage import PaimonLakeStorage
from strom.record.key_encoder import PaimonKeyEncoder

PAIMON = {"table.datalake.format": "paimon"}


def paimon_storage(tmp_path: pathlib.Path) -> PaimonLakeStorage:
    """A Paimon lake in a fresh filesystem warehouse, as `strom local --lake-format paimon` sets it."""
    return PaimonLakeStorage({"metastore": "filesystem", "warehouse": str(tmp_path / "warehouse")})


def paimon_info(
    name: str,
    columns: Sequence[tuple[str, DataType]],
    *,
    properties: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> TableInfo:
    """`lake_helpers.table_info` for a table whose lake format is Paimon."""
    return table_info(name, columns, properties={**PAIMON, **(properties or {})}, **kwargs)


def paimon_bucket_of(info: TableInfo, row: Mapping[str, Any]) -> int:
    """The Fluss bucket of a row: Paimon's bucket function of the bucket key's BinaryRow."""
    keys = info.bucket_keys
    encoder = PaimonKeyEncoder([info.schema.get_column(k).data_type for k in keys])
    return paimon_bucket(encoder.encode([row[k] for k in keys]), info.bucket_count)


@dataclass
class PaimonTiering(Tiering):
    """`lake_helpers.Tiering` with rows bucketed as a Paimon-format Fluss table buckets them."""

    def append(self, changes: Iterable[Change], bucket: int | None = None) -> None:
        for change in changes:
            partition = self.partition_of(change.row)
            b = bucket if bucket is not None else paimon_bucket_of(self.info, change.row)
            key = (self.partition_ids[partition] if partition else None, b)
            self.clock += 1
            self.logs.setdefault(key, []).append((change, self.clock))


def read_paimon(
    storage: PaimonLakeStorage, info: TableInfo, columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The table's current rows through pypaimon's read builder (merge-on-read for primary keys)."""
    table = storage.catalog().load_table(info.table_path)
    builder = table.new_read_builder()
    if columns is not None:
        builder = builder.with_projection(list(columns))
    splits = builder.new_scan().plan().splits()
    result = builder.new_read().to_arrow(splits)
    if result is None:
        return []
    assert isinstance(result, pa.Table)
    return result.to_pylist()


def data_files(warehouse: pathlib.Path, info: TableInfo) -> list[pathlib.Path]:
    """Every data and changelog file of the table, relative to the table directory."""
    root = warehouse / f"{info.table_path.database_name}.db" / info.table_path.table_name
    return sorted(
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and p.name.startswith(("data-", "changelog-"))
    )
