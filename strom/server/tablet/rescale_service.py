"""The tablet server's part of an online bucket rescale (RescaleBucket, Strom-only key 9011).

The coordinator (`coordinator/rescale.py`) seals the table, then asks each old bucket's leader to
EXPORT, and the new buckets' leaders to IMPORT and the old ones to DELETE the rows that move. The
seal lives on the table's descriptor, so whichever replica leads a bucket knows it; an EXPORT on a
server that has not seen it yet is refused retriably and the coordinator pushes the table again.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pyarrow as pa

from strom.common.errors import RequestTimeoutError, UnknownTableOrBucketError
from strom.common.rescale import is_sealed
from strom.common.table_bucket import TableBucket
from strom.record.columnar_keys import key_bytes_buckets
from strom.record.kv_batch import build_kv_batch
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.server.tablet.kv_service import KvService
from strom.server.tablet.replica_manager import Replica, ReplicaManager

EXPORT, IMPORT, DELETE = 0, 1, 2
# how long an EXPORT waits for the writes before the seal to be committed by the in-sync replicas
COMMIT_TIMEOUT = 30.0


class RescaleService:
    def __init__(self, replicas: ReplicaManager, kv_service: KvService) -> None:
        self.replicas = replicas
        self.kv_service = kv_service

    async def rescale_bucket(
        self, request: internal.RescaleBucketRequest, ctx: RequestContext
    ) -> internal.RescaleBucketResponse:
        partition = request.partition_id if request.HasField("partition_id") else None
        bucket = TableBucket(request.table_id, partition, request.bucket_id)
        replica = self.replicas.leader_replica(bucket)
        info = replica.table_info
        if not is_sealed(info.descriptor) or info.bucket_count != request.bucket_count:
            raise UnknownTableOrBucketError(
                f"{bucket} is not sealed for a rescale to {request.bucket_count} buckets on this server yet "
                f"(it knows {info.bucket_count} buckets)"
            )
        if request.action == EXPORT:
            return await self._export(replica, request.bucket_count)
        if not info.has_primary_key:
            raise UnknownTableOrBucketError(f"{bucket}: only primary-key tables move rows in a rescale")
        kv = await self.kv_service.kv.leader_tablet(replica)
        appended = await self.kv_service._append(replica, kv, request.records, None, rescaling=True)
        end = appended.last_offset + 1
        error = await replica.replication_error(end, COMMIT_TIMEOUT, "the rescaled rows of")
        if error is not None:
            raise error
        self.kv_service._flush_committed(replica)
        return internal.RescaleBucketResponse(log_end_offset=replica.log_tablet().log_end_offset)

    async def _export(self, replica: Replica, count: int) -> internal.RescaleBucketResponse:
        info = replica.table_info
        log = replica.log_tablet()
        if info.has_primary_key:
            kv = await self.kv_service.kv.leader_tablet(replica)
            async with self.kv_service.kv.lock(replica.bucket):
                pass  # every PutKv that took the lock before the seal has appended by now
        # ProduceLog checks the seal and appends with no await in between: nothing gets in after it.
        end = log.log_end_offset
        deadline = time.monotonic() + COMMIT_TIMEOUT
        while True:
            replica.maybe_advance_high_watermark()
            if log.high_watermark >= end:
                break
            if time.monotonic() > deadline:
                raise RequestTimeoutError(
                    f"{replica.bucket}: the writes before the seal (up to offset {end}) are not committed "
                    f"after {COMMIT_TIMEOUT:.0f} s (high watermark {log.high_watermark})"
                )
            await asyncio.sleep(0.05)
        response = internal.RescaleBucketResponse(log_end_offset=end)
        if not info.has_primary_key:
            return response
        self.kv_service._flush_committed(replica)
        bucket = replica.bucket.bucket
        schema_id = info.schema_id

        def leaving_rows(rows: list[tuple[bytes, bytes]]) -> tuple[bytes, int] | None:
            if not rows:
                return None
            keys = pa.array([k for k, _ in rows], pa.binary())
            buckets = key_bytes_buckets(keys, count, info.datalake_format)
            leaving = np.flatnonzero(buckets != bucket)
            if not len(leaving):
                return None
            moving = [rows[i][0] for i in leaving]
            values = kv._upgrade([rows[i][1] for i in leaving])  # in the current schema
            # stored values start with their int16 schema id; a KvRecordBatch carries it once
            batch = build_kv_batch(
                [(k, v[2:]) for k, v in zip(moving, values, strict=True)], schema_id=schema_id
            )
            return batch, len(moving)

        if kv.is_pending:
            # rows held in memory: read them here, on the loop, where the background creation of
            # the tablet's database (attach_db) would otherwise move them away mid-scan
            found = leaving_rows(kv.all_items())
        else:
            # a scan of the whole database: off the loop (the bucket is sealed, and exports are taken
            # before the coordinator writes anything, so nothing changes it meanwhile)
            found = await asyncio.get_running_loop().run_in_executor(
                None, lambda: leaving_rows(kv.all_items())
            )
        if found is not None:
            response.records, response.record_count = found
        return response
