"""The client's Cluster snapshot: merging Metadata replies, leaders and invalidation."""

from __future__ import annotations

import pyarrow as pa

from strom.client.cluster import Cluster
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.rpc.api import ServerType
from strom.rpc.gen import fluss_api_pb2 as pb

PATH = TablePath("db", "t")
DESCRIPTOR = TableDescriptor(
    Schema.from_arrow_schema(pa.schema([("id", pa.int32()), ("p", pa.string())])),
    partition_keys=["p"],
    bucket_count=2,
)


def response(
    table_id: int = 7,
    leaders: tuple[int | None, ...] = (1, 2),
    servers: tuple[int, ...] = (1, 2),
    partitions: tuple[tuple[str, int], ...] = (),
    with_table: bool = True,
) -> pb.MetadataResponse:
    r = pb.MetadataResponse()
    r.coordinator_server.CopyFrom(pb.PbServerNode(node_id=0, host="c", port=1))
    for s in servers:
        r.tablet_servers.add(node_id=s, host=f"ts{s}", port=100 + s)
    if with_table:
        meta = r.table_metadata.add(
            table_id=table_id,
            schema_id=1,
            table_json=DESCRIPTOR.to_json_bytes(),
            created_time=1,
            modified_time=2,
        )
        meta.table_path.database_name, meta.table_path.table_name = PATH.database_name, PATH.table_name
        for bucket, leader in enumerate(leaders):
            b = meta.bucket_metadata.add(bucket_id=bucket, replica_id=[1, 2], leader_epoch=3)
            if leader is not None:
                b.leader_id = leader
    for name, pid in partitions:
        part = r.partition_metadata.add(table_id=table_id, partition_name=name, partition_id=pid)
        part.bucket_metadata.add(bucket_id=0, leader_id=1)
    return r


def test_servers_tables_and_leaders() -> None:
    cluster = Cluster().with_metadata(response(leaders=(1, None)))
    assert cluster.coordinator is not None and cluster.coordinator.server_type == ServerType.COORDINATOR
    assert [n.uid for n in cluster.server_nodes()] == ["cs-0", "ts-1", "ts-2"]
    info = cluster.table_info(PATH)
    assert info is not None and info.table_id == 7 and info.bucket_count == 2
    assert cluster.table_path(7) == PATH
    leader = cluster.leader_for(TableBucket(7, None, 0))
    assert leader is not None and leader.host == "ts1"
    assert cluster.leader_for(TableBucket(7, None, 1)) is None  # no leader
    location = cluster.bucket_location(TableBucket(7, None, 0))
    assert location is not None and location.replicas == (1, 2) and location.leader_epoch == 3
    assert len(cluster.available_buckets(PhysicalTablePath(PATH))) == 1
    # a leader that is not a live server is no leader
    assert cluster.with_metadata(response(servers=(2,))).leader_for(TableBucket(7, None, 0)) is None


def test_partitions_merge_and_unknown_tables_are_skipped() -> None:
    cluster = Cluster().with_metadata(response(partitions=(("a", 10),)))
    cluster = cluster.with_metadata(response(with_table=False, partitions=(("b", 11),)))
    assert cluster.partition_ids(PATH) == {"a": 10, "b": 11}
    assert cluster.partition_name(11) == "b"
    assert cluster.leader_for(TableBucket(7, 11, 0)) is not None
    # a partition of a table the cache never saw cannot be named: ignored
    stranger = Cluster().with_metadata(response(with_table=False, partitions=(("x", 12),)))
    assert stranger.partitions == {}
    # a re-created partition gets its new id
    cluster = cluster.with_metadata(response(with_table=False, partitions=(("a", 20),)))
    assert cluster.partition_id(PhysicalTablePath(PATH, "a")) == 20 and cluster.partition_name(10) is None


def test_recreated_table_forgets_the_old_one() -> None:
    cluster = Cluster().with_metadata(response(partitions=(("a", 10),)))
    cluster = cluster.with_metadata(response(table_id=8))
    assert cluster.table_id(PATH) == 8 and cluster.table_path(7) is None
    assert cluster.partitions == {} and cluster.leader_for(TableBucket(7, None, 0)) is None


def test_invalidation() -> None:
    cluster = Cluster().with_metadata(response(partitions=(("a", 10),)))
    no_buckets = cluster.without_buckets([PhysicalTablePath(PATH)])
    assert no_buckets.leader_for(TableBucket(7, None, 0)) is None
    assert (
        no_buckets.table_info(PATH) is not None and no_buckets.leader_for(TableBucket(7, 10, 0)) is not None
    )
    no_server = cluster.without_server(1)
    assert no_server.leader_for(TableBucket(7, None, 0)) is None
    assert no_server.leader_for(TableBucket(7, None, 1)) is not None
    gone = cluster.without_table(PATH)
    assert gone.tables == {} and gone.partitions == {} and gone.buckets == {}
    no_partition = cluster.without_partition(PhysicalTablePath(PATH, "a"))
    assert no_partition.partition_ids(PATH) == {} and no_partition.table_info(PATH) is not None
    assert cluster.without_table(TablePath("db", "other")) is cluster
