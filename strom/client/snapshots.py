"""References to snapshots a reader starts from: a table's latest KV snapshots and its lake snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.common.table_bucket import TableBucket
from strom.rpc.gen import fluss_api_pb2 as pb


@dataclass(frozen=True)
class KvSnapshots:
    """The latest KV snapshot of each bucket of a primary-key table (or of one partition).

    A bucket without a snapshot yet has no entry in `snapshot_ids`; its changelog is then read from
    the start. `log_offsets` is where the changelog continues after each snapshot.
    """

    table_id: int
    partition_id: int | None
    bucket_ids: tuple[int, ...]
    snapshot_ids: Mapping[int, int] = field(default_factory=dict)
    log_offsets: Mapping[int, int] = field(default_factory=dict)

    def snapshot_id(self, bucket: int) -> int | None:
        return self.snapshot_ids.get(bucket)

    def log_offset(self, bucket: int) -> int | None:
        return self.log_offsets.get(bucket)

    @classmethod
    def from_pb(cls, response: pb.GetLatestKvSnapshotsResponse) -> KvSnapshots:
        snapshot_ids: dict[int, int] = {}
        log_offsets: dict[int, int] = {}
        for entry in response.latest_snapshots:
            if entry.HasField("snapshot_id"):
                snapshot_ids[entry.bucket_id] = entry.snapshot_id
            if entry.HasField("log_offset"):
                log_offsets[entry.bucket_id] = entry.log_offset
        return cls(
            response.table_id,
            response.partition_id if response.HasField("partition_id") else None,
            tuple(entry.bucket_id for entry in response.latest_snapshots),
            snapshot_ids,
            log_offsets,
        )


@dataclass(frozen=True)
class LakeSnapshot:
    """A lake snapshot of a table and the Fluss log offset up to which it holds each bucket's data."""

    table_id: int
    snapshot_id: int
    bucket_offsets: Mapping[TableBucket, int] = field(default_factory=dict)
    partition_names: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def from_pb(cls, response: pb.GetLakeSnapshotResponse) -> LakeSnapshot:
        offsets: dict[TableBucket, int] = {}
        names: dict[int, str] = {}
        for entry in response.bucket_snapshots:
            partition_id = entry.partition_id if entry.HasField("partition_id") else None
            if entry.HasField("log_offset"):
                offsets[TableBucket(response.table_id, partition_id, entry.bucket_id)] = entry.log_offset
            if partition_id is not None and entry.HasField("partition_name"):
                names[partition_id] = entry.partition_name
        return cls(response.table_id, response.snapshotId, offsets, names)
