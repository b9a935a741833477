"""Remote-log manifests on the coordinator: bucket leaders commit where their tiered segments are
listed (CommitRemoteLogManifest), and ListRemoteLogManifests serves them back."""

from __future__ import annotations

import json

from strom.common.errors import FencedLeaderEpochError, TableNotExistError
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.store.ordered import OrderedStore

_PREFIX = "remote-log/"


def _key(table_id: int, partition_id: int | None, bucket: int) -> str:
    return f"{_PREFIX}{table_id:020d}/{-1 if partition_id is None else partition_id}/{bucket:06d}"


class RemoteLogService:
    def __init__(self, store: OrderedStore) -> None:
        self.store = store

    async def commit(
        self, request: pb.CommitRemoteLogManifestRequest, ctx: object
    ) -> pb.CommitRemoteLogManifestResponse:
        partition_id = request.partition_id if request.HasField("partition_id") else None
        assignment = next(
            (
                a
                for a in self.store.list_buckets(request.table_id)
                if a.partition_id == partition_id and a.bucket_id == request.bucket_id
            ),
            None,
        )
        if assignment is None:
            raise TableNotExistError(f"bucket {request.bucket_id} of table {request.table_id} does not exist")
        if request.bucket_leader_epoch < assignment.leader_epoch:
            raise FencedLeaderEpochError(
                f"remote-log manifest of bucket {request.bucket_id} comes from leader epoch "
                f"{request.bucket_leader_epoch}, the current epoch is {assignment.leader_epoch}"
            )
        await self.store.put_document(
            _key(request.table_id, partition_id, request.bucket_id),
            json.dumps(
                {
                    "path": request.remote_log_manifest_path,
                    "start": request.remote_log_start_offset,
                    "end": request.remote_log_end_offset,
                }
            ).encode(),
        )
        return pb.CommitRemoteLogManifestResponse(commitSuccess=True)

    async def list(
        self, request: pb.ListRemoteLogManifestsRequest, ctx: object
    ) -> pb.ListRemoteLogManifestsResponse:
        partition_id = request.partition_id if request.HasField("partition_id") else None
        prefix = f"{_PREFIX}{request.table_id:020d}/{-1 if partition_id is None else partition_id}/"
        response = pb.ListRemoteLogManifestsResponse()
        for key, value in self.store.list_documents(prefix):
            manifest = json.loads(value)
            entry = response.manifests.add(
                remote_log_manifest_path=manifest["path"], remote_log_end_offset=manifest["end"]
            )
            entry.table_bucket.table_id = request.table_id
            entry.table_bucket.bucket_id = int(key.rsplit("/", 1)[1])
            if partition_id is not None:
                entry.table_bucket.partition_id = partition_id
        return response

    async def drop_table(self, table_id: int) -> None:
        await self.store.delete_documents(f"{_PREFIX}{table_id:020d}/")
