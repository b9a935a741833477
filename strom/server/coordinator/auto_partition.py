"""Auto-partitioning: the coordinator creates upcoming time partitions and drops expired ones for tables
with `table.auto-partition.enabled`, as Fluss's AutoPartitionManager does."""

from __future__ import annotations

import logging
from datetime import datetime
from zoneinfo import ZoneInfo

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import FlussError
from strom.common.partition import (
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
