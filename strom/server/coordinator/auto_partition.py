"""Auto-partitioning: the coordinator creates upcoming time partitions and drops expired ones for tables
with `table.auto-partition.enabled`, as Fluss's AutoPartitionManager does."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import FlussError
from strom.common.partition import (
    HISTORICAL_PARTITION_VALUE,
    auto_partition_value,
    is_valid_partition_time,
    parse_partition_name,
)
from strom.common.table_descriptor import TableDescriptor
from strom.server.coordinator.metadata_service import MetadataService
from strom.server.store.base import TableRecord

log = logging.getLogger(__name__)


class AutoPartitionManager:
    def __init__(self, metadata: MetadataService) -> None:
        self.metadata = metadata

    async def check_all(self, now: datetime | None = None) -> None:
        for record in self.metadata.store.list_tables():
            try:
                await self.check_table(record, now)
            except FlussError as e:
                log.warning("auto-partitioning %s.%s failed: %s", record.database, record.name, e)

    async def check_table(self, record: TableRecord, now: datetime | None = None) -> None:
        descriptor = TableDescriptor.from_json_bytes(record.table_json)
        conf = Configuration(descriptor.properties)
        if not descriptor.is_partitioned or not conf.get(options.TABLE_AUTO_PARTITION_ENABLED):
            return
        unit = conf.get(options.TABLE_AUTO_PARTITION_TIME_UNIT)
        time_format = conf.get(options.TABLE_AUTO_PARTITION_TIME_FORMAT)
        zone = ZoneInfo(conf.get(options.TABLE_AUTO_PARTITION_TIME_ZONE))
        moment = (now or datetime.now(zone)).astimezone(zone).replace(tzinfo=None)
        keys = descriptor.partition_keys
        time_key = conf.get(options.TABLE_AUTO_PARTITION_KEY) or keys[0]
        existing = {p.name: p for p in self.metadata.store.list_partitions(record.table_id)}
        await self._sync_historical_partition(record, descriptor, conf, existing)

        if len(keys) == 1:  # with more keys the other values are unknown, so nothing is pre-created
            for offset in range(conf.get(options.TABLE_AUTO_PARTITION_NUM_PRECREATE)):
                name = auto_partition_value(unit, moment, offset, time_format)
                if name not in existing:
                    await self.metadata.add_partition(record, descriptor, name)

        retention = conf.get(options.TABLE_AUTO_PARTITION_NUM_RETENTION)
        if retention < 0:
            return
        cutoff = auto_partition_value(unit, moment, -retention, time_format)
        for name, partition in existing.items():
            try:
                value = parse_partition_name(keys, name)[time_key]
            except FlussError:
                continue
            if not is_valid_partition_time(value, unit, time_format):
                continue
            if value < cutoff:  # the formats are fixed-width and ordered, so text order is time order
                await self.metadata.remove_partition(record, partition)

    async def _sync_historical_partition(
        self, record: TableRecord, descriptor: TableDescriptor, conf: Configuration, existing: dict[str, Any]
    ) -> None:
        """Tables with table.datalake.historical-partition.enabled keep the system partition
        `__historical__`: clients send lookups of expired partitions to its buckets, whose leaders answer
        them from the lake (Fluss's FIP-28). Without the option an orphan one (the option was turned off)
        is dropped. Its value is no valid partition time, so retention never drops it."""
        if len(descriptor.partition_keys) != 1:  # validation requires one key; its name is the value
            return
        wanted = bool(conf.get(options.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED))
        partition_name = HISTORICAL_PARTITION_VALUE
        if wanted and partition_name not in existing:
            await self.metadata.add_partition(record, descriptor, partition_name)
            log.info("created the historical partition of %s.%s", record.database, record.name)
        elif not wanted and partition_name in existing:
            await self.metadata.remove_partition(record, existing[partition_name])
            log.info("dropped the historical partition of %s.%s", record.database, record.name)
