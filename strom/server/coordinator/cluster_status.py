"""DescribeCluster (Strom-only, 9004): the active coordinator's view for `strom status` — live tablet
servers, tables, every bucket's replicas, leader, ISR and newest KV snapshot, the newest lake snapshot
of lake-enabled tables, which tables tiering jobs hold, and which jobs are alive."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from strom.common.table_descriptor import TableDescriptor
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.server.coordinator.tiering_jobs import TieringJob

if TYPE_CHECKING:
    from strom.server.coordinator.active import ActiveCoordinator


async def describe_cluster(
    coordinator: ActiveCoordinator, request: internal.DescribeClusterRequest, ctx: RequestContext
) -> internal.DescribeClusterResponse:
    store = coordinator.store
    response = internal.DescribeClusterResponse(coordinator_epoch=coordinator.coordinator_epoch)
    for server in sorted(coordinator.membership.servers.values(), key=lambda s: s.server_id):
        entry = response.tablet_servers.add(
            server_id=server.server_id, host=server.host, port=server.port, remembered=server.remembered
        )
        if server.rack is not None:
            entry.rack = server.rack
    for server_id, tag in sorted(coordinator.rebalance.server_tags().items()):
        response.server_tags.add(server_id=server_id, tag=int(tag))
    partition_names: dict[int, str] = {}
    for table in store.list_tables():
        descriptor = TableDescriptor.from_json_bytes(table.table_json)
        lake_enabled = coordinator.lake.lake_enabled(descriptor)
        response.tables.add(
            table_id=table.table_id,
            database=table.database,
            name=table.name,
            primary_key=descriptor.has_primary_key,
            lake_enabled=lake_enabled,
            bucket_count=descriptor.bucket_count or 0,
        )
        rescale = coordinator.rescale.task(table.table_id)
        if rescale is not None:
            response.tables[-1].rescale = rescale.describe()
        partition_names.update((p.partition_id, p.name) for p in store.list_partitions(table.table_id))
        latest = coordinator.lake.latest(table.table_id) if lake_enabled else None
        ahead = {(x.partition_id, x.bucket): x.log_end for x in coordinator.lake.lake_ahead(table.table_id)}
        if latest is not None:
            lake = response.lakes.add(
                table_id=table.table_id, snapshot_id=latest.snapshot_id, committed_time=latest.committed_time
            )
            for (partition_id, bucket), (offset, _) in sorted(
                latest.buckets.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])
            ):
                item = lake.offsets.add(bucket_id=bucket, offset=offset)
                if partition_id is not None:
                    item.partition_id = partition_id
                if (partition_id, bucket) in ahead:
                    item.lake_ahead_log_end = ahead[(partition_id, bucket)]
    for a in store.list_buckets():
        bucket = response.buckets.add(
            table_id=a.table_id,
            bucket_id=a.bucket_id,
            replicas=a.replicas,
            leader_epoch=a.leader_epoch,
            isr=a.isr,
            bucket_epoch=a.bucket_epoch,
            elr=a.elr,
        )
        if a.partition_id is not None:
            bucket.partition_id = a.partition_id
            bucket.partition_name = partition_names.get(a.partition_id, "")
        if a.leader is not None:
            bucket.leader = a.leader
        handle = coordinator.kv_snapshots.latest_handle(a.table_id, a.partition_id, a.bucket_id)
        if handle is not None:
            bucket.kv_snapshot_id = int(json.loads(handle)["snapshot_id"])
    now = time.monotonic()
    jobs = coordinator.tiering.jobs
    for table_id, tiered in coordinator.tiering.tables.items():
        state = "held" if table_id in coordinator.tiering.held else tiered.state.value
        item = response.tiering.add(table_id=table_id, state=state, tiering_epoch=tiered.epoch)
        if tiered.state.value == "tiering" and tiered.last_heartbeat:
            item.heartbeat_age_ms = int((now - tiered.last_heartbeat) * 1000)
            item.last_heartbeat_ms = int(tiered.last_heartbeat_wall * 1000)
        if tiered.job is not None:
            _job(item.job, tiered.job, jobs.age(tiered.job))
    for job, age in jobs.active():
        _job(response.tiering_jobs.add(), job, age)
    return response


def _job(target: internal.StatusTieringJob, job: TieringJob, age: float | None) -> None:
    target.name = job.name
    target.application_id = job.application_id
    target.address = job.address
    target.principal = job.principal
    target.last_seen_age_ms = -1 if age is None else int(age * 1000)
