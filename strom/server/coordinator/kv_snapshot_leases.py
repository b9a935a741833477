"""KV snapshot leases (Fluss 1.0, AcquireKvSnapshotLease 1056, ReleaseKvSnapshotLease 1057,
DropKvSnapshotLease 1058): a reader of a primary-key table's snapshot (a Spark or Flink job reading
snapshot + changelog) leases the snapshot so that retention does not delete it under the reader.

A lease holds at most one snapshot per bucket (acquiring again for a bucket moves it to the new
snapshot) and expires `lease_duration_ms` after its last acquire; an expired lease holds nothing.
Acquire answers, in `unavailable_snapshots`, the snapshots that no longer exist (nothing leased for
those). While a snapshot is leased the coordinator keeps its record past `kv.snapshot.num-retained`,
ListKvSnapshots keeps listing it, and the bucket leader, which asks ListKvSnapshots before applying
retention, keeps its files. Leases are metadata-store documents: they survive coordinator failover.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from strom.common.errors import NonPrimaryKeyTableError, TableNotExistError
from strom.common.table_descriptor import TableDescriptor
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.store.base import MetadataStore
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

_PREFIX = "kv-snapshot-lease/"


def _key(lease_id: str | bytes) -> str:
    # hex: a lease id is any string (a '/' in it must not make one lease's key a prefix of another's),
    # or bytes when the sender's string is not UTF-8 (proto2 strings are not checked); the trailing '/'
    # keeps a prefix delete to this lease alone
    raw = lease_id if isinstance(lease_id, bytes) else lease_id.encode()
    return f"{_PREFIX}{raw.hex()}/"


def _bucket(table_id: int, partition_id: int | None, bucket_id: int) -> str:
    return f"{table_id}/{-1 if partition_id is None else partition_id}/{bucket_id}"


def leased_snapshot_ids(
    store: MetadataStore, table_id: int, partition_id: int | None, bucket_id: int
) -> set[int]:
    """The snapshots of one bucket that unexpired leases hold (read inside a store transaction)."""
    now = int(time.time() * 1000)
    name = _bucket(table_id, partition_id, bucket_id)
    held: set[int] = set()
    for _, value in store.list_documents(_PREFIX):
        lease = json.loads(value)
        if lease["expiration_time"] > now and name in lease["buckets"]:
            held.add(int(lease["buckets"][name]))
    return held


def leased_table_ids(store: MetadataStore | OrderedStore) -> set[int]:
    """The tables of which unexpired leases hold a snapshot."""
    now = int(time.time() * 1000)
    held: set[int] = set()
    for _, value in store.list_documents(_PREFIX):
        lease = json.loads(value)
        if lease["expiration_time"] > now:
            held.update(int(name.split("/", 1)[0]) for name in lease["buckets"])
    return held


def remove_expired_leases(store: MetadataStore) -> None:
    """Forget leases past their expiration (read inside a store transaction)."""
    now = int(time.time() * 1000)
    for key, value in store.list_documents(_PREFIX):
        if json.loads(value)["expiration_time"] <= now:
            store.delete_documents(key)


class KvSnapshotLeaseService:
    def __init__(self, store: OrderedStore, snapshot_exists: Any) -> None:
        """`snapshot_exists(table_id, partition_id, bucket_id, snapshot_id)` reads the coordinator's
        snapshot records."""
        self.store = store
        self.snapshot_exists = snapshot_exists

    def _check_kv_table(self, table_id: int) -> None:
        record = self.store.get_table_by_id(table_id)
        if record is None:
            raise TableNotExistError(f"Table with id {table_id} does not exist.")
        if not TableDescriptor.from_json_bytes(record.table_json).has_primary_key:
            raise NonPrimaryKeyTableError(f"Table with id {table_id} is not a primary-key table.")

    async def acquire(
        self, request: pb.AcquireKvSnapshotLeaseRequest, ctx: object
    ) -> pb.AcquireKvSnapshotLeaseResponse:
        wanted: list[tuple[int, int | None, int, int]] = []
        for table in request.snapshots_to_lease:
            self._check_kv_table(table.table_id)
            for b in table.bucket_snapshots:
                partition = b.partition_id if b.HasField("partition_id") else None
                wanted.append((table.table_id, partition, b.bucket_id, b.snapshot_id))
        available = [w for w in wanted if self.snapshot_exists(*w)]
        unavailable = [w for w in wanted if w not in available]
        lease_id, duration = request.lease_id, request.lease_duration_ms

        def record(store: MetadataStore) -> None:
            raw = store.get_document(_key(lease_id))
            lease: dict[str, Any] = {"buckets": {}} if raw is None else json.loads(raw)
            lease["expiration_time"] = int(time.time() * 1000) + duration
            for table_id, partition, bucket, snapshot_id in available:
                lease["buckets"][_bucket(table_id, partition, bucket)] = snapshot_id
            store.put_document(_key(lease_id), json.dumps(lease).encode())

        await self.store.atomically(record)
        log.info("kv snapshot lease %s holds %d snapshots for %d ms", lease_id, len(available), duration)
        response = pb.AcquireKvSnapshotLeaseResponse()
        by_table: dict[int, pb.PbKvSnapshotLeaseForTable] = {}
        for table_id, partition, bucket, snapshot_id in unavailable:
            entry = by_table.get(table_id)
            if entry is None:
                entry = by_table[table_id] = response.unavailable_snapshots.add(table_id=table_id)
            item = entry.bucket_snapshots.add(bucket_id=bucket, snapshot_id=snapshot_id)
            if partition is not None:
                item.partition_id = partition
        return response

    async def release(
        self, request: pb.ReleaseKvSnapshotLeaseRequest, ctx: object
    ) -> pb.ReleaseKvSnapshotLeaseResponse:
        for b in request.buckets_to_release:
            self._check_kv_table(b.table_id)
        names = {
            _bucket(b.table_id, b.partition_id if b.HasField("partition_id") else None, b.bucket_id)
            for b in request.buckets_to_release
        }
        lease_id = request.lease_id

        def record(store: MetadataStore) -> None:
            raw = store.get_document(_key(lease_id))
            if raw is None:
                return
            lease = json.loads(raw)
            lease["buckets"] = {k: v for k, v in lease["buckets"].items() if k not in names}
            store.put_document(_key(lease_id), json.dumps(lease).encode())

        await self.store.atomically(record)
        return pb.ReleaseKvSnapshotLeaseResponse()

    async def drop(
        self, request: pb.DropKvSnapshotLeaseRequest, ctx: object
    ) -> pb.DropKvSnapshotLeaseResponse:
        await self.store.delete_documents(_key(request.lease_id))
        log.info("kv snapshot lease %s dropped", request.lease_id)
        return pb.DropKvSnapshotLeaseResponse()
