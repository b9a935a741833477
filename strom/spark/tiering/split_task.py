"""Runs one tiering split: reads its offset range from the cluster and writes it through the lake writer.

This runs on Spark executors (and in-process in tests), so it takes only picklable arguments and
opens its own client connection.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from strom.common.errors import FlussError
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake import load_lake_storage
from strom.lake.interface import WriteResult
from strom.record.change_type import ChangeType
from strom.spark.tiering.tiering_splits import TieringSplit

log = logging.getLogger(__name__)


def write_split(
    split: TieringSplit,
    table_info: TableInfo,
    client: Mapping[str, str],
    lake_format: str,
    lake_properties: Mapping[str, str],
) -> WriteResult:
    """Copy the split's records into new lake files; nothing is visible until the driver commits."""
    from strom.client.sync import SyncConnection

    storage = load_lake_storage(lake_format, lake_properties)
    bucket: TableBucket | int = (
        TableBucket(split.table_id, split.partition_id, split.bucket)
        if split.partition_id is not None
        else split.bucket
    )
    with (
        SyncConnection(dict(client)) as connection,
        storage.writer(table_info, bucket, split.partition_name) as writer,
    ):
        table_path = f"{split.database}.{split.table}"
        if split.snapshot_id is not None:
            # The snapshot's rows are inserts "as of" the last offset it covers; the changelog after it
            # follows, so later changes of the same keys win in the lake.
            covered, batches = connection.read_bucket_snapshot(
                table_path, split.bucket, split.partition_id, split.snapshot_id
            )
            if covered != split.start_offset:
                batches.close()
                raise FlussError(
                    f"KV snapshot {split.snapshot_id} of {split} is gone; the next round re-plans"
                )
            for batch in batches:
                rows = batch.num_rows
                writer.write(
                    batch,
                    np.full(rows, ChangeType.INSERT, dtype=np.int8),
                    np.full(rows, covered - 1, dtype=np.int64),
                    np.full(rows, -1, dtype=np.int64),
                )
        for chunk in connection.read_bucket_range(
            table_path,
            split.bucket,
            split.partition_id,
            split.start_offset,
            split.end_offset,
        ):
            rows = chunk.num_rows
            if rows == 0:
                continue  # an empty changelog batch (no-op writes) only moves the offset
            change_types = None
            if table_info.has_primary_key and chunk.change_types is not None:
                change_types = np.frombuffer(chunk.change_types, dtype=np.int8)
            offsets = np.arange(chunk.base_offset, chunk.base_offset + rows, dtype=np.int64)
            timestamps = np.full(rows, chunk.timestamp, dtype=np.int64)
            writer.write(chunk.batch, change_types, offsets, timestamps)
        return writer.complete()
