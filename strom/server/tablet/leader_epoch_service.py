"""OffsetForLeaderEpoch (Strom-only key 9003) on the leader: where a follower's latest epoch ends.

A follower starting in a new leader term sends its latest leader epoch; the leader answers with the
largest epoch of its own log at or below it and where that epoch ends, plus its epoch entries (see
`log/leader_epoch.py` and `replica_fetcher.py` for the follower's side). The leader answers only in the
term the follower was told about: a follower ahead of it (the new leader has not taken over yet) or
behind it (a stale notification) is told FENCED_LEADER_EPOCH and asks again.
"""

from __future__ import annotations

from strom.common.errors import FencedLeaderEpochError, FlussError
from strom.common.table_bucket import TableBucket
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.rpc.server import RequestContext
from strom.server.tablet.replica_manager import ReplicaManager


class LeaderEpochService:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    async def offset_for_leader_epoch(
        self, request: internal.OffsetForLeaderEpochRequest, ctx: RequestContext
    ) -> internal.OffsetForLeaderEpochResponse:
        response = internal.OffsetForLeaderEpochResponse()
        for entry in request.buckets:
            partition = entry.partition_id if entry.HasField("partition_id") else None
            bucket = TableBucket(entry.table_id, partition, entry.bucket_id)
            result = response.buckets.add(table_id=entry.table_id, bucket_id=entry.bucket_id)
            if partition is not None:
                result.partition_id = partition
            try:
                replica = self.replicas.leader_replica(bucket)
                if entry.current_leader_epoch != replica.leader_epoch:
                    raise FencedLeaderEpochError(
                        f"follower {request.follower_server_id} asks about {bucket} in leader epoch "
                        f"{entry.current_leader_epoch}, this leader is in epoch {replica.leader_epoch}"
                    )
                tablet = replica.log_tablet()
                epoch, end = tablet.leader_epochs.end_offset_for(entry.leader_epoch, tablet.log_end_offset)
            except FlussError as e:
                result.error_code = e.code
                result.error_message = e.message
                continue
            result.leader_epoch = epoch
            result.end_offset = end
            for known in tablet.leader_epochs.entries:
                result.epoch_entries.add(epoch=known.epoch, start_offset=known.start_offset)
        return response
