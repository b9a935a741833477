"""Point lookups in a Paimon lake table: the rows of a partition that Fluss no longer has.

Fluss answers lookups of expired auto partitions of `table.datalake.historical-partition.enabled`
tables from the lake (FIP-28, apache/fluss#3630). The tablet server gets the keys as the client
encoded them (the table's primary-key encoding), so rather than decoding keys it reads the one
Paimon bucket that holds them (Fluss buckets a Paimon table's rows with Paimon's bucket function, so
the Fluss bucket is the Paimon bucket), encodes each row's key the same way and matches the bytes.
Paimon's merge-on-read gives the latest value of each key; deleted keys are absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from strom.common.table_descriptor import TableInfo
from strom.lake.paimon.storage import PaimonLakeStorage
from strom.record.key_encoder import RowKeyEncoder
from strom.server.tablet.historical_lookup_cache import HistoricalLookupCache
from strom.server.tablet.kv.recovery import table_key_encoder


class PaimonLakeLookuper:
    """Looks keys up in one table's Paimon copy (blocking: run it in an executor)."""

    def __init__(self, storage: PaimonLakeStorage, info: TableInfo) -> None:
        self.info = info
        self._storage = storage
        self._key: RowKeyEncoder = table_key_encoder(info)
        self._columns = [c.name for c in info.schema.columns]

    def lookup(
        self,
        partition_name: str,
        bucket: int,
        keys: Sequence[bytes],
        cache: HistoricalLookupCache | None = None,
    ) -> list[list[Any] | None]:
        """For each encoded key, the lake's row (values in the table's column order), or None.
        With `cache`, the bucket's rows are read once per lake snapshot."""
        table = self._storage.catalog().load_table(self.info.table_path)
        latest = table.snapshot_manager().get_latest_snapshot()
        if latest is None:
            return [None] * len(keys)
        # pinned to the snapshot the cache entry is stamped with, so the entry is exactly that snapshot
        pinned = table.copy({"scan.snapshot-id": str(latest.id)})
        if cache is None:
            found = self._index(pinned, partition_name, bucket)
        else:
            entry = (self.info.table_id, self.info.schema_id, partition_name, bucket)
            found = cache.index(entry, int(latest.id), lambda: self._index(pinned, partition_name, bucket))
        return [found.get(key) for key in keys]

    def _index(self, table: Any, partition_name: str, bucket: int) -> dict[bytes, list[Any]]:
        return {self._key.encode_key(row): row for row in self._rows(table, partition_name, bucket)}

    def _rows(self, table: Any, partition_name: str, bucket: int) -> list[list[Any]]:
        lake_columns = set(table.field_names)
        builder = table.new_read_builder()
        (partition_key,) = self.info.descriptor.partition_keys
        # The partition value as the lake stores it: auto partitions are keyed on a STRING column.
        builder = builder.with_filter(builder.new_predicate_builder().equal(partition_key, partition_name))
        present = [c for c in self._columns if c in lake_columns]
        builder = builder.with_projection(present)
        splits = [s for s in builder.new_scan().plan().splits() if s.bucket == bucket]
        if not splits:
            return []
        result = builder.new_read().to_arrow(splits)
        if result is None:
            return []
        assert isinstance(result, pa.Table)
        # Columns added to the Fluss table after these rows were tiered are null, as Fluss reads them.
        data = {name: result.column(name).to_pylist() for name in present}
        # The partition filter may only prune files: keep the partition's rows exactly.
        values = data[partition_key]
        rows = []
        for i in range(result.num_rows):
            if values[i] != partition_name:
                continue
            rows.append([data[c][i] if c in data else None for c in self._columns])
        return rows
