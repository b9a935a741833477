"""The client side of lookups in expired partitions (Fluss's FIP-28, apache/fluss#3630).

For a table with `table.datalake.historical-partition.enabled`, a key whose partition does not exist
and lies in the past of the auto-partition strategy (retention dropped it; a current or future one may
still be created, so it is not asked) is looked up in the same bucket of the system partition
`__historical__`, with `original_partition_name` set; that bucket's leader reads it from the lake
(`strom.server.tablet.historical_lookup`). Other missing partitions find nothing, as before.

These lookups are rare and slow (a lake read), so they bypass the batching lookup client: one request
per (bucket, original partition), retried on retriable errors (a moved leader, the server's
HISTORICAL_PARTITION_THROTTLED) until the request timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from strom.client.backoff import Backoff
from strom.common import config as options
from strom.common.errors import FlussError, LeaderNotAvailableError, error_for_code
from strom.common.partition import HISTORICAL_PARTITION_VALUE, auto_partition_value, is_valid_partition_time
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

if TYPE_CHECKING:
    from strom.client.table import Table

_BACKOFF = Backoff(initial=0.05, maximum=1.0, jitter=0.2)


def is_past_auto_partition(info: TableInfo, partition_name: str, now: datetime | None = None) -> bool:
    """Whether a missing partition may be answered from the lake: the table has the option, and the
    partition is an auto partition older than the current one."""
    conf = info.properties
    if not conf.get(options.TABLE_DATALAKE_HISTORICAL_PARTITION_ENABLED):
        return False
    if partition_name == HISTORICAL_PARTITION_VALUE:
        return False
    unit = conf.get(options.TABLE_AUTO_PARTITION_TIME_UNIT)
    time_format = conf.get(options.TABLE_AUTO_PARTITION_TIME_FORMAT)
    if not is_valid_partition_time(partition_name, unit, time_format):
        return False
    zone = ZoneInfo(conf.get(options.TABLE_AUTO_PARTITION_TIME_ZONE))
    moment = (now or datetime.now(zone)).astimezone(zone).replace(tzinfo=None)
    # fixed-width ordered formats: text order is time order
    return partition_name < auto_partition_value(unit, moment, 0, time_format)


async def historical_values(
    table: Table, original: str, bucket: int, keys: Sequence[bytes]
) -> list[bytes | None]:
    """The stored values of `keys` of bucket `bucket` of the expired partition `original`."""
    connection = table.connection
    metadata = connection.metadata
    loop = asyncio.get_running_loop()
    deadline = loop.time() + connection.config.request_timeout.total_seconds()
    attempt = 0
    while True:
        try:
            return await _request(table, original, bucket, keys, deadline - loop.time())
        except FlussError as e:
            attempt += 1
            delay = _BACKOFF.delay(attempt)
            if not e.retriable or loop.time() + delay >= deadline:
                raise
            metadata.invalidate(table_paths=[table.path])
            await asyncio.sleep(delay)


async def _request(
    table: Table, original: str, bucket: int, keys: Sequence[bytes], timeout: float
) -> list[bytes | None]:
    metadata = table.connection.metadata
    partition_id = await metadata.get_partition_id(table.path, HISTORICAL_PARTITION_VALUE)
    table_bucket = TableBucket(table.table_id, partition_id, bucket)
    leader = metadata.leader_for(table_bucket)
    if leader is None:
        await metadata.refresh_leaders(table.path, partition_id)
        leader = metadata.leader_for(table_bucket)
    if leader is None:
        raise LeaderNotAvailableError(f"{table_bucket} has no leader")
    request = pb.LookupRequest(table_id=table.table_id)
    entry = request.buckets_req.add(
        bucket_id=bucket, partition_id=partition_id, original_partition_name=original
    )
    entry.keys.extend(keys)
    response = await table.connection.pool.request(
        leader.host, leader.port, ApiKey.LOOKUP, request, timeout=max(timeout, 0.001)
    )
    (answer,) = response.buckets_resp
    if answer.HasField("error_code") and answer.error_code != 0:
        raise error_for_code(answer.error_code, answer.error_message or None)
    if len(answer.values) != len(keys):
        raise error_for_code(-1, f"the answer has {len(answer.values)} values for {len(keys)} keys")
    return [v.values if v.HasField("values") else None for v in answer.values]
