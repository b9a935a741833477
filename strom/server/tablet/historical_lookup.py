"""Lookups of expired partitions, answered from the lake (Fluss's FIP-28, apache/fluss#3630).

A table with `table.datalake.historical-partition.enabled` has the system partition `__historical__`.
A client whose lookup key falls in a partition that no longer exists (auto-partition retention dropped
it) sends the lookup to the same bucket of `__historical__`, with `original_partition_name` set; that
bucket's leader reads the key from the lake copy of the original partition and answers with the row
encoded as a kv value of the table's current schema, as if Fluss still held it.

The lake reads are blocking and can be slow, so they run in the default executor, and at most
`MAX_IN_FLIGHT` run at once per tablet server: beyond that the request fails with the retriable
HISTORICAL_PARTITION_THROTTLED, so lake lookups cannot crowd out normal ones. The rows read are kept
per bucket and lake snapshot in a bounded cache (`strom.server.tablet.historical_lookup_cache`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration, DataLakeFormat, KvFormat
from strom.common.errors import (
    HistoricalPartitionThrottledError,
    InvalidTableError,
    LakeStorageNotConfiguredError,
    PartitionNotExistError,
)
from strom.common.partition import HISTORICAL_PARTITION_VALUE
from strom.common.table_descriptor import TableInfo
from strom.record.compacted_row import CompactedRowEncoder
from strom.server.tablet.historical_lookup_cache import HistoricalLookupCache

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 8  # lake lookups one tablet server runs at once

_SCHEMA_ID = struct.Struct("<h")  # the int16 schema id in front of every kv value


class HistoricalLookup:
    """Answers the historical lookups sent to this tablet server's `__historical__` buckets."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = dict(config)
        self._in_flight = 0
        self._storage: Any = None
        cache_option = options.SERVER_HISTORICAL_PARTITION_LOOKUP_CACHE_MAX_ROWS
        max_rows = Configuration(self._config).get(cache_option)
        if max_rows < 0:
            raise ValueError(f"{cache_option.key} must be 0 (no cache) or more, not {max_rows}")
        self.cache = HistoricalLookupCache(max_rows) if max_rows > 0 else None

    async def lookup(
        self, info: TableInfo, partition_name: str | None, bucket: int, original: str, keys: Sequence[bytes]
    ) -> list[bytes | None]:
        if partition_name != HISTORICAL_PARTITION_VALUE:
            raise PartitionNotExistError(
                f"a lookup of the expired partition '{original}' of {info.table_path} must go to its "
                f"'{HISTORICAL_PARTITION_VALUE}' partition, not to '{partition_name}'"
            )
        if not info.properties.get(options.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED):
            raise InvalidTableError(
                f"{info.table_path} does not have "
                f"'{options.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED.key}' enabled"
            )
        if info.kv_format is not KvFormat.COMPACTED:
            raise InvalidTableError(
                f"lookups of expired partitions need '{options.TABLE_KV_FORMAT.key}' = COMPACTED "
                f"({info.table_path} has {info.kv_format.value})"
            )
        if self._in_flight >= MAX_IN_FLIGHT:
            raise HistoricalPartitionThrottledError(
                f"{self._in_flight} lookups of expired partitions are already running on this server"
            )
        self._in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            read = self._reader(info)
            rows = await loop.run_in_executor(None, lambda: read(original, bucket, keys, self.cache))
        finally:
            self._in_flight -= 1
        encode = CompactedRowEncoder(info.schema.row_type).encode
        prefix = _SCHEMA_ID.pack(info.schema_id)
        return [None if row is None else prefix + encode(row) for row in rows]

    def _reader(
        self, info: TableInfo
    ) -> Callable[[str, int, Sequence[bytes], HistoricalLookupCache | None], list[list[Any] | None]]:
        if info.datalake_format is not DataLakeFormat.PAIMON:  # table validation allows Paimon only
            raise InvalidTableError(f"lookups of expired partitions need a Paimon lake ({info.table_path})")
        from strom.lake import lake_storage_from_config
        from strom.lake.paimon.lookup import PaimonLakeLookuper
        from strom.lake.paimon.storage import PaimonLakeStorage

        if self._storage is None:
            self._storage = lake_storage_from_config(self._config)  # LakeStorageNotConfigured if unset
        if not isinstance(self._storage, PaimonLakeStorage):
            raise LakeStorageNotConfiguredError(
                f"{info.table_path} is tiered to Paimon but this cluster's lake is {self._storage!r}"
            )
        return PaimonLakeLookuper(self._storage, info).lookup
