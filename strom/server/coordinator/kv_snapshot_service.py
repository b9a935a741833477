"""KV snapshots on the coordinator: CommitKvSnapshot from bucket leaders, and GetLatestKvSnapshots,
GetKvSnapshotMetadata and ListKvSnapshots for clients, restoring leaders and the tiering service.

Each committed snapshot handle (Fluss's completed-snapshot JSON) is kept as a document; the newest
`kv.snapshot.num-retained` per bucket are kept, older ones are forgotten (their files are deleted by
the tablet server that uploaded them).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import (
    FencedLeaderEpochError,
    InvalidUpdateVersionError,
    KvSnapshotNotExistError,
    NonPrimaryKeyTableError,
    PartitionNotExistError,
    TableNotExistError,
)
from strom.common.table_descriptor import TableDescriptor
from strom.common.table_path import TablePath
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.kv_snapshot_leases import leased_snapshot_ids, remove_expired_leases
from strom.server.store.base import MetadataStore
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

_PREFIX = "kv-snapshot/"


def _bucket_prefix(table_id: int, partition_id: int | None, bucket: int) -> str:
    return f"{_PREFIX}{table_id:020d}/{-1 if partition_id is None else partition_id}/{bucket:06d}/"


def _files(handle: dict[str, Any]) -> list[tuple[str, str]]:
    snapshot = handle["kv_snapshot_handle"]
    return [
        (f["kv_file_handle"]["path"], f["local_path"])
        for f in snapshot.get("shared_file_handles", []) + snapshot.get("private_file_handles", [])
    ]


class KvSnapshotService:
    def __init__(self, store: OrderedStore, config: Configuration) -> None:
        self.store = store
        self.retained = max(1, config.get(options.KV_SNAPSHOT_NUM_RETAINED))

    def _snapshots(self, table_id: int, partition_id: int | None, bucket: int) -> list[dict[str, Any]]:
        return [
            json.loads(v)
            for _, v in self.store.list_documents(_bucket_prefix(table_id, partition_id, bucket))
        ]

    async def commit(self, request: pb.CommitKvSnapshotRequest, ctx: object) -> pb.CommitKvSnapshotResponse:
        try:
            handle = json.loads(request.completed_snapshot)
            table_id = int(handle["table_id"])
            partition_id = handle.get("partition_id")
            bucket = int(handle["bucket_id"])
            snapshot_id = int(handle["snapshot_id"])
            int(handle["log_offset"])
            _files(handle)
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidUpdateVersionError(f"malformed completed snapshot: {e}") from None
        if self.store.get_table_by_id(table_id) is None:
            raise TableNotExistError(f"table {table_id} does not exist")
        assignment = next(
            (
                a
                for a in self.store.list_buckets(table_id)
                if a.partition_id == partition_id and a.bucket_id == bucket
            ),
            None,
        )
        if assignment is None:
            raise TableNotExistError(
                f"bucket {bucket} of table {table_id} (partition {partition_id}) does not exist"
            )
        if request.bucket_leader_epoch < assignment.leader_epoch:
            raise FencedLeaderEpochError(
                f"snapshot {snapshot_id} of bucket {bucket} comes from leader epoch "
                f"{request.bucket_leader_epoch}, the current epoch is {assignment.leader_epoch}"
            )
        prefix = _bucket_prefix(table_id, partition_id, bucket)

        def record(store: MetadataStore) -> None:
            store.put_document(f"{prefix}{snapshot_id:020d}", request.completed_snapshot)
            documents = store.list_documents(prefix)
            # snapshots a reader leased stay listed (and so on disk) past kv.snapshot.num-retained
            remove_expired_leases(store)
            leased = leased_snapshot_ids(store, table_id, partition_id, bucket)
            for key, value in documents[: max(0, len(documents) - self.retained)]:
                if int(json.loads(value)["snapshot_id"]) not in leased:
                    store.delete_documents(key)

        await self.store.atomically(record)
        log.info(
            "kv snapshot %d of table %d bucket %d (partition %s) committed at log offset %s",
            snapshot_id,
            table_id,
            bucket,
            partition_id,
            handle["log_offset"],
        )
        return pb.CommitKvSnapshotResponse()

    async def get_latest(
        self, request: pb.GetLatestKvSnapshotsRequest, ctx: object
    ) -> pb.GetLatestKvSnapshotsResponse:
        path = TablePath(request.table_path.database_name, request.table_path.table_name)
        path.validate()
        record = self.store.get_table(path.database_name, path.table_name)
        if record is None:
            raise TableNotExistError(f"Table '{path}' does not exist.")
        descriptor = TableDescriptor.from_json_bytes(record.table_json)
        if not descriptor.has_primary_key:
            raise NonPrimaryKeyTableError(f"Table '{path}' is not a primary-key table.")
        response = pb.GetLatestKvSnapshotsResponse(table_id=record.table_id)
        partition_id = None
        if request.HasField("partition_name"):
            partition = self.store.get_partition(record.table_id, request.partition_name)
            if partition is None:
                raise PartitionNotExistError(
                    f"Partition '{request.partition_name}' of '{path}' does not exist."
                )
            partition_id = partition.partition_id
            response.partition_id = partition_id
        for bucket in range(descriptor.bucket_count or 0):
            entry = response.latest_snapshots.add(bucket_id=bucket)
            snapshots = self._snapshots(record.table_id, partition_id, bucket)
            if snapshots:
                entry.snapshot_id = snapshots[-1]["snapshot_id"]
                entry.log_offset = snapshots[-1]["log_offset"]
        return response

    async def get_metadata(
        self, request: pb.GetKvSnapshotMetadataRequest, ctx: object
    ) -> pb.GetKvSnapshotMetadataResponse:
        partition_id = request.partition_id if request.HasField("partition_id") else None
        for handle in self._snapshots(request.table_id, partition_id, request.bucket_id):
            if handle["snapshot_id"] == request.snapshot_id:
                response = pb.GetKvSnapshotMetadataResponse(log_offset=handle["log_offset"])
                for remote, local in _files(handle):
                    response.snapshot_files.add(remote_path=remote, local_file_name=local)
                return response
        raise KvSnapshotNotExistError(
            f"Snapshot {request.snapshot_id} of bucket {request.bucket_id} of table {request.table_id} "
            "does not exist."
        )

    async def list(self, request: pb.ListKvSnapshotsRequest, ctx: object) -> pb.ListKvSnapshotsResponse:
        partition_id = request.partition_id if request.HasField("partition_id") else None
        response = pb.ListKvSnapshotsResponse(table_id=request.table_id)
        if partition_id is not None:
            response.partition_id = partition_id
        prefix = f"{_PREFIX}{request.table_id:020d}/{-1 if partition_id is None else partition_id}/"
        for _, value in self.store.list_documents(prefix):
            handle = json.loads(value)
            response.active_snapshots.add(
                bucket_id=handle["bucket_id"],
                snapshot_id=handle["snapshot_id"],
                log_offset=handle["log_offset"],
            )
        return response

    def snapshot_exists(self, table_id: int, partition_id: int | None, bucket: int, snapshot_id: int) -> bool:
        key = f"{_bucket_prefix(table_id, partition_id, bucket)}{snapshot_id:020d}"
        return self.store.get_document(key) is not None

    def latest_handle(self, table_id: int, partition_id: int | None, bucket: int) -> bytes | None:
        """The newest completed-snapshot JSON of a bucket (restoring leaders ask for it)."""
        documents = self.store.list_documents(_bucket_prefix(table_id, partition_id, bucket))
        return documents[-1][1] if documents else None

    async def drop_table(self, table_id: int) -> None:
        await self.store.delete_documents(f"{_PREFIX}{table_id:020d}/")
