"""DescribeReplicas (Strom-only, 9005): the replicas a tablet server holds, with their log start, log
end and high watermark, the log its retention keeps for the lake, and on leaders how far each follower
has fetched, and the server's data directories (for `strom status`)."""

from __future__ import annotations

from collections.abc import Iterable

from strom.common.table_bucket import TableBucket
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.tablet.data_dirs import DataDir
from strom.server.tablet.log.log_tablet import LogTablet
from strom.server.tablet.replica_manager import Replica


def describe_replicas(
    server_id: int, replicas: Iterable[Replica], data_dirs: Iterable[DataDir] = ()
) -> internal.DescribeReplicasResponse:
    response = internal.DescribeReplicasResponse(server_id=server_id)
    for d in data_dirs:
        item = response.data_dirs.add(
            path=str(d.path), replicas=d.replicas, usage_ratio=d.usage_ratio, write_locked=d.write_locked
        )
        if d.offline_reason is not None:
            item.offline_reason = d.offline_reason
        if d.free_bytes >= 0:
            item.free_bytes = d.free_bytes
    for replica in replicas:
        tablet = replica.log
        if tablet is None:
            continue
        entry = response.replicas.add(
            table_id=replica.bucket.table_id,
            bucket_id=replica.bucket.bucket,
            leader=replica.is_leader(server_id),
            log_start_offset=tablet.log_start_offset,
            log_end_offset=tablet.log_end_offset,
            high_watermark=tablet.high_watermark,
            lake_log_end_offset=replica.lake_log_end_offset,
            held_local_segments=replica.held_local[0],
            held_local_bytes=replica.held_local[1],
            held_remote_segments=replica.held_remote[0],
            held_remote_bytes=replica.held_remote[1],
            latest_leader_epoch=tablet.leader_epochs.latest_epoch,
        )
        if replica.bucket.partition_id is not None:
            entry.partition_id = replica.bucket.partition_id
        if entry.leader:
            for follower, state in sorted(replica.followers.items()):
                if follower in replica.replicas:
                    entry.followers.add(server_id=follower, log_end_offset=state.log_end_offset)
    return response


def describe_log_on_disk(
    response: internal.DescribeReplicasResponse, bucket: TableBucket, tablet: LogTablet
) -> None:
    """A bucket's log that no replica holds open here (DescribeReplicas' `on_disk`): not a leader."""
    entry = response.replicas.add(
        table_id=bucket.table_id,
        bucket_id=bucket.bucket,
        leader=False,
        log_start_offset=tablet.log_start_offset,
        log_end_offset=tablet.log_end_offset,
        high_watermark=tablet.high_watermark,
        latest_leader_epoch=tablet.leader_epochs.latest_epoch,
    )
    if bucket.partition_id is not None:
        entry.partition_id = bucket.partition_id
