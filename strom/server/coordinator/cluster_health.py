"""GetClusterHealth (Fluss 1.0, 1062): one traffic light for the whole cluster, from the coordinator's
view of every bucket. RED when a bucket has no active leader (none elected, or its leader is not a
live tablet server), YELLOW when some replica is out of its bucket's ISR, GREEN otherwise. The counts
are Fluss's: replicas assigned, replicas in ISRs, buckets (one leader replica each) and buckets whose
leader is live. Tablet servers pass the request on to the coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext

if TYPE_CHECKING:
    from strom.server.coordinator.active import ActiveCoordinator

GREEN, YELLOW, RED = 0, 1, 2


async def get_cluster_health(
    coordinator: ActiveCoordinator, request: pb.GetClusterHealthRequest, ctx: RequestContext
) -> pb.GetClusterHealthResponse:
    live = set(coordinator.membership.live_ids())
    replicas = in_sync = leaders = active = 0
    for bucket in coordinator.store.list_buckets():
        replicas += len(bucket.replicas)
        in_sync += len(bucket.isr)
        leaders += 1
        if bucket.leader is not None and bucket.leader in live:
            active += 1
    status = RED if active < leaders else YELLOW if in_sync < replicas else GREEN
    return pb.GetClusterHealthResponse(
        num_replicas=replicas,
        in_sync_replicas=in_sync,
        num_leader_replicas=leaders,
        active_leader_replicas=active,
        status=status,
    )
