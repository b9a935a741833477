"""The admin API: databases, tables, partitions, servers, snapshots and offsets.

Like the official Python client, every admin call goes to the coordinator; ListOffsets goes to the
leader of each bucket. Errors the server sends surface as the matching `FlussError` subclass with
the server's message.

Retries follow Fluss's rule that a mutation must not be repeated once it may have reached the
server (its reply may have been lost after it took effect): a call that could not be sent because
the coordinator was unreachable is retried, after bootstrapping again, for every API; a read-only
call is also retried when its connection broke or timed out after sending. Errors the coordinator
answers with are never retried here. Retries back off exponentially (100 ms up to 1 s) and stop
once ``client.request-timeout`` has passed since the call began.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.message import Message

from strom.client.backoff import REQUEST_BACKOFF
from strom.client.cluster import ServerNode
from strom.client.cluster_status import ClusterStatus, RebalanceProgress, build_cluster_status
from strom.client.config import ClientConfig
from strom.client.metadata import MetadataCache
from strom.client.offset_spec import OffsetSpec, OffsetType
from strom.client.snapshots import KvSnapshots, LakeSnapshot
from strom.client.table_change import TableChangeType, fill_alter_table_request
from strom.common.errors import (
    FlussError,
    LeaderNotAvailableError,
    NetworkError,
    NoRebalanceInProgressError,
    PartitionNotExistError,
    RequestTimeoutError,
    SchemaNotExistError,
    UnknownServerError,
    error_for_code,
)
from strom.common.partition import PartitionSpec
from strom.common.rebalance import GoalType, ServerTag
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import DatabaseDescriptor, DatabaseInfo, TableDescriptor, TableInfo
from strom.common.table_path import PARTITION_SEPARATOR, PhysicalTablePath, TablePath
from strom.rpc.api import ApiKey, ServerType
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.security.acl import AclBinding, AclFilter

log = logging.getLogger(__name__)

# ListOffsets' `follower_server_id` for requests from clients.
CLIENT_REPLICA_ID = -1

TablePathLike = TablePath | str


class SchemaInfo(NamedTuple):
    schema_id: int
    schema: Schema


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition_id: int
    partition_name: str
    spec: PartitionSpec
    remote_data_dir: str | None = None


def as_table_path(path: TablePathLike) -> TablePath:
    """A TablePath, or ``"db.table"`` (a bare name lands in the default database ``fluss``)."""
    return path if isinstance(path, TablePath) else TablePath.parse(path)


def _set_path(target: Any, path: TablePath) -> None:
    target.database_name = path.database_name
    target.table_name = path.table_name


def _set_spec(target: pb.PbPartitionSpec, spec: Mapping[str, str]) -> None:
    for key, value in spec.items():
        target.partition_key_values.add(key=str(key), value=str(value))


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One option of DescribeClusterConfigs; `source` is INITIAL_SERVER_CONFIG or DYNAMIC_SERVER_CONFIG."""

    key: str
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class AlterConfig:
    """A dynamic config change: set `key` to `value`, or delete it (back to the servers' own) with None."""

    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class TableStats:
    """GetTableStats: the table's rows (live keys of a primary-key table), and per bucket."""

    row_count: int
    bucket_row_counts: dict[TableBucket, int]


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """GetClusterHealth: `status` is GREEN, YELLOW (replicas out of sync), RED (buckets without an
    active leader) or UNKNOWN, with Fluss's counts."""

    status: str
    num_replicas: int
    in_sync_replicas: int
    num_leader_replicas: int
    active_leader_replicas: int


_HEALTH_STATUS = {0: "GREEN", 1: "YELLOW", 2: "RED", 3: "UNKNOWN"}


@dataclass(frozen=True, slots=True)
class ProducerOffsets:
    """What RegisterProducerOffsets stored for one producer, and when it expires (epoch millis)."""

    producer_id: str
    expiration_time: int
    offsets: dict[TableBucket, int]


class Admin:
    """Administration of one cluster; get it from `Connection.get_admin()`."""

    def __init__(self, metadata: MetadataCache, pool: ConnectionPool, config: ClientConfig) -> None:
        self._metadata = metadata
        self._pool = pool
        self._timeout = config.request_timeout.total_seconds()

    # ------------------------------------------------------------------ calls to the coordinator

    def _may_retry(self, deadline: float, attempt: int) -> bool:
        """Whether a retry after this attempt's backoff still starts within client.request-timeout."""
        loop = asyncio.get_running_loop()
        return loop.time() + REQUEST_BACKOFF.delay(attempt) < deadline

    async def _call(self, key: ApiKey, request: Message, *, read_only: bool) -> Any:
        deadline = asyncio.get_running_loop().time() + self._timeout
        attempt = 0
        while True:
            sent = False
            try:
                node = await self._metadata.coordinator_node()
                connection = await self._pool.get(node.host, node.port)
                sent = True
                return await connection.request(key, request, timeout=self._timeout)
            except (NetworkError, RequestTimeoutError) as e:
                if (sent and not read_only) or not self._may_retry(deadline, attempt):
                    raise
                log.info("%s failed (%s); retrying after bootstrapping again", key.name, e)
            await REQUEST_BACKOFF.sleep(attempt)
            attempt += 1
            # The coordinator may have restarted elsewhere; the next attempt asks the bootstrap servers.
            with contextlib.suppress(FlussError):
                await self._metadata.bootstrap()

    # ------------------------------------------------------------------ databases

    async def create_database(
        self,
        database_name: str,
        descriptor: DatabaseDescriptor | None = None,
        ignore_if_exists: bool = False,
    ) -> None:
        request = pb.CreateDatabaseRequest(database_name=database_name, ignore_if_exists=ignore_if_exists)
        if descriptor is not None:
            request.database_json = descriptor.to_json_bytes()
        await self._call(ApiKey.CREATE_DATABASE, request, read_only=False)

    async def drop_database(
        self, database_name: str, ignore_if_not_exists: bool = False, cascade: bool = True
    ) -> None:
        request = pb.DropDatabaseRequest(
            database_name=database_name, ignore_if_not_exists=ignore_if_not_exists, cascade=cascade
        )
        await self._call(ApiKey.DROP_DATABASE, request, read_only=False)
        for path in [p for p in self._metadata.cluster.tables if p.database_name == database_name]:
            self._metadata.forget_table(path)

    async def list_databases(self) -> list[str]:
        response = await self._call(ApiKey.LIST_DATABASES, pb.ListDatabasesRequest(), read_only=True)
        return list(response.database_name)

    async def database_exists(self, database_name: str) -> bool:
        request = pb.DatabaseExistsRequest(database_name=database_name)
        response = await self._call(ApiKey.DATABASE_EXISTS, request, read_only=True)
        return bool(response.exists)

    async def get_database_info(self, database_name: str) -> DatabaseInfo:
        request = pb.GetDatabaseInfoRequest(database_name=database_name)
        response = await self._call(ApiKey.GET_DATABASE_INFO, request, read_only=True)
        try:
            descriptor = DatabaseDescriptor.from_json_bytes(response.database_json)
        except ValueError as e:
            raise UnknownServerError(f"Unreadable descriptor of database '{database_name}': {e}") from e
        return DatabaseInfo(database_name, descriptor, response.created_time, response.modified_time)

    async def alter_database(
        self,
        database_name: str,
        changes: Iterable[AlterConfig] = (),
        comment: str | None = None,
        ignore_if_not_exists: bool = False,
    ) -> None:
        """Set (value) or reset (value None) custom properties of a database, and set its comment
        (an empty comment removes it)."""
        request = pb.AlterDatabaseRequest(
            database_name=database_name, ignore_if_not_exists=ignore_if_not_exists
        )
        for change in changes:
            entry = request.config_changes.add(
                config_key=change.key, op_type=1 if change.value is None else 0
            )
            if change.value is not None:
                entry.config_value = change.value
        if comment is not None:
            request.comment = comment
        await self._call(ApiKey.ALTER_DATABASE, request, read_only=False)

    # ------------------------------------------------------------------ tables

    async def create_table(
        self, table_path: TablePathLike, descriptor: TableDescriptor, ignore_if_exists: bool = False
    ) -> None:
        path = as_table_path(table_path)
        request = pb.CreateTableRequest(
            table_json=descriptor.to_json_bytes(), ignore_if_exists=ignore_if_exists
        )
        _set_path(request.table_path, path)
        await self._call(ApiKey.CREATE_TABLE, request, read_only=False)

    async def drop_table(self, table_path: TablePathLike, ignore_if_not_exists: bool = False) -> None:
        path = as_table_path(table_path)
        request = pb.DropTableRequest(ignore_if_not_exists=ignore_if_not_exists)
        _set_path(request.table_path, path)
        await self._call(ApiKey.DROP_TABLE, request, read_only=False)
        self._metadata.forget_table(path)

    async def alter_table(
        self,
        table_path: TablePathLike,
        changes: Iterable[TableChangeType],
        ignore_if_not_exists: bool = False,
    ) -> None:
        """Apply `TableChange`s (add column, set/reset option) to a table, all or none."""
        path = as_table_path(table_path)
        request = pb.AlterTableRequest(ignore_if_not_exists=ignore_if_not_exists)
        _set_path(request.table_path, path)
        fill_alter_table_request(request, list(changes))
        await self._call(ApiKey.ALTER_TABLE, request, read_only=False)
        # writers and scanners opened from now on use the new schema and options
        self._metadata.forget_table(path)

    async def list_tables(self, database_name: str) -> list[str]:
        request = pb.ListTablesRequest(database_name=database_name)
        response = await self._call(ApiKey.LIST_TABLES, request, read_only=True)
        return list(response.table_name)

    async def table_exists(self, table_path: TablePathLike) -> bool:
        request = pb.TableExistsRequest()
        _set_path(request.table_path, as_table_path(table_path))
        response = await self._call(ApiKey.TABLE_EXISTS, request, read_only=True)
        return bool(response.exists)

    async def get_table_info(self, table_path: TablePathLike) -> TableInfo:
        path = as_table_path(table_path)
        request = pb.GetTableInfoRequest()
        _set_path(request.table_path, path)
        response = await self._call(ApiKey.GET_TABLE_INFO, request, read_only=True)
        try:
            info = TableInfo(
                path,
                response.table_id,
                response.schema_id,
                TableDescriptor.from_json_bytes(response.table_json),
                response.created_time,
                response.modified_time,
                response.remote_data_dir if response.HasField("remote_data_dir") else None,
            )
        except ValueError as e:
            raise UnknownServerError(f"Unreadable descriptor of table '{path}': {e}") from e
        # Keep the cache no staler than what the caller just saw.
        self._metadata.remember_table_info(info)
        return info

    async def get_table_schema(self, table_path: TablePathLike, schema_id: int | None = None) -> SchemaInfo:
        """The table's schema with the given id, or its latest schema."""
        path = as_table_path(table_path)
        request = pb.GetTableSchemaRequest()
        _set_path(request.table_path, path)
        if schema_id is not None:
            request.schema_id = schema_id
        response = await self._call(ApiKey.GET_TABLE_SCHEMA, request, read_only=True)
        if schema_id is not None and response.schema_id != schema_id:
            raise SchemaNotExistError(
                f"Asked for schema {schema_id} of table '{path}' but got schema {response.schema_id}."
            )
        try:
            schema = Schema.from_json_bytes(response.schema_json)
        except ValueError as e:
            raise UnknownServerError(f"Unreadable schema {response.schema_id} of '{path}': {e}") from e
        return SchemaInfo(response.schema_id, schema)

    # ------------------------------------------------------------------ partitions

    async def list_partition_infos(
        self, table_path: TablePathLike, partial_spec: Mapping[str, str] | None = None
    ) -> list[PartitionInfo]:
        """The partitions of a partitioned table, optionally only those matching some key values."""
        request = pb.ListPartitionInfosRequest()
        _set_path(request.table_path, as_table_path(table_path))
        if partial_spec is not None:
            _set_spec(request.partial_partition_spec, partial_spec)
        response = await self._call(ApiKey.LIST_PARTITION_INFOS, request, read_only=True)
        result: list[PartitionInfo] = []
        for info in response.partitions_info:
            spec = PartitionSpec(tuple((kv.key, kv.value) for kv in info.partition_spec.partition_key_values))
            result.append(
                PartitionInfo(
                    info.partition_id,
                    PARTITION_SEPARATOR.join(v for _, v in spec.pairs),
                    spec,
                    info.remote_data_dir if info.HasField("remote_data_dir") else None,
                )
            )
        return result

    async def create_partition(
        self, table_path: TablePathLike, partition_spec: Mapping[str, str], ignore_if_exists: bool = False
    ) -> None:
        request = pb.CreatePartitionRequest(ignore_if_not_exists=ignore_if_exists)  # Fluss's field name
        _set_path(request.table_path, as_table_path(table_path))
        _set_spec(request.partition_spec, partition_spec)
        await self._call(ApiKey.CREATE_PARTITION, request, read_only=False)

    async def drop_partition(
        self,
        table_path: TablePathLike,
        partition_spec: Mapping[str, str],
        ignore_if_not_exists: bool = False,
    ) -> None:
        path = as_table_path(table_path)
        request = pb.DropPartitionRequest(ignore_if_not_exists=ignore_if_not_exists)
        _set_path(request.table_path, path)
        _set_spec(request.partition_spec, partition_spec)
        await self._call(ApiKey.DROP_PARTITION, request, read_only=False)
        info = self._metadata.table_info(path)
        if info is not None and all(k in partition_spec for k in info.partition_keys):
            name = PARTITION_SEPARATOR.join(str(partition_spec[k]) for k in info.partition_keys)
            self._metadata.forget_partition(path, name)

    # ------------------------------------------------------------------ cluster

    async def get_server_nodes(self) -> list[ServerNode]:
        """The coordinator and the live tablet servers, freshly asked of the bootstrap servers."""
        cluster = await self._metadata.bootstrap()
        return cluster.server_nodes()

    # ------------------------------------------------------------------ operations

    async def describe_cluster(self) -> ClusterStatus:
        """Servers, every bucket's placement, leader, ISR and offsets, lake and tiering state, and the
        rebalance in progress (what `strom status` shows). Needs DESCRIBE on the cluster."""
        cluster = await self._call(ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest(), read_only=True)
        nodes = await self.get_server_nodes()

        async def replicas_of(node: ServerNode) -> internal.DescribeReplicasResponse | None:
            try:
                response: internal.DescribeReplicasResponse = await self._pool.request(
                    node.host, node.port, ApiKey.DESCRIBE_REPLICAS, internal.DescribeReplicasRequest(),
                    timeout=self._timeout,
                )  # fmt: skip
                return response
            except (NetworkError, RequestTimeoutError):
                return None  # shown as not alive

        tablet_servers = [n for n in nodes if n.server_type == ServerType.TABLET_SERVER]
        answers = await asyncio.gather(*(replicas_of(n) for n in tablet_servers))
        replicas = {n.id: a for n, a in zip(tablet_servers, answers, strict=True)}
        return build_cluster_status(cluster, nodes, replicas, await self.list_rebalance_progress())

    async def add_server_tag(self, server_ids: Iterable[int], tag: ServerTag) -> None:
        """Tag tablet servers; PERMANENT_OFFLINE ones are drained by the next rebalance."""
        request = pb.AddServerTagRequest(server_ids=list(server_ids), server_tag=int(tag))
        await self._call(ApiKey.ADD_SERVER_TAG, request, read_only=False)

    async def remove_server_tag(self, server_ids: Iterable[int], tag: ServerTag) -> None:
        request = pb.RemoveServerTagRequest(server_ids=list(server_ids), server_tag=int(tag))
        await self._call(ApiKey.REMOVE_SERVER_TAG, request, read_only=False)

    async def rebalance(self, goals: Iterable[GoalType] = ()) -> str:
        """Starts moving replicas and leaders toward the goals (both distribution goals by default);
        answers the rebalance id (the one already running, if any)."""
        request = pb.RebalanceRequest(goals=[int(g) for g in goals])
        response: pb.RebalanceResponse = await self._call(ApiKey.REBALANCE, request, read_only=False)
        return response.rebalance_id

    async def list_rebalance_progress(self, rebalance_id: str | None = None) -> RebalanceProgress | None:
        """The progress of the given (or the latest) rebalance; None when there has been none."""
        request = pb.ListRebalanceProgressRequest()
        if rebalance_id:
            request.rebalance_id = rebalance_id
        try:
            response = await self._call(ApiKey.LIST_REBALANCE_PROGRESS, request, read_only=True)
        except NoRebalanceInProgressError:
            if rebalance_id:
                raise
            return None
        return RebalanceProgress.from_pb(response)

    async def cancel_rebalance(self, rebalance_id: str | None = None) -> None:
        request = pb.CancelRebalanceRequest()
        if rebalance_id:
            request.rebalance_id = rebalance_id
        await self._call(ApiKey.CANCEL_REBALANCE, request, read_only=False)

    # ------------------------------------------------------------------ access control lists

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Grants each binding; raises the first refusal (the others are still applied)."""
        request = pb.CreateAclsRequest()
        for binding in bindings:
            request.acl.append(binding.to_pb())
        response = await self._call(ApiKey.CREATE_ACLS, request, read_only=False)
        errors = [r for r in response.aclRes if r.HasField("error_code") and r.error_code != 0]
        if errors:
            raise error_for_code(errors[0].error_code, errors[0].error_message)

    async def list_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs matching the filter (all by default) that the caller may describe."""
        request = pb.ListAclsRequest(acl_filter=(acl_filter or AclFilter()).to_pb())
        response = await self._call(ApiKey.LIST_ACLS, request, read_only=True)
        return sorted(AclBinding.from_pb(info) for info in response.acl)

    async def drop_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Revokes every ACL matching one of the filters and returns them; raises the first refusal."""
        request = pb.DropAclsRequest()
        for acl_filter in filters:
            request.acl_filter.append(acl_filter.to_pb())
        response = await self._call(ApiKey.DROP_ACLS, request, read_only=False)
        removed: list[AclBinding] = []
        for result in response.filter_results:
            if result.HasField("error_code") and result.error_code != 0:
                raise error_for_code(result.error_code, result.error_message)
            for match in result.matching_acls:
                if match.HasField("error_code") and match.error_code != 0:
                    raise error_for_code(match.error_code, match.error_message)
                removed.append(AclBinding.from_pb(match.acl))
        return removed

    # ------------------------------------------------------------------ snapshots

    async def get_latest_lake_snapshot(self, table_path: TablePathLike) -> LakeSnapshot:
        """The table's latest lake snapshot; LakeSnapshotNotExistError when it has none yet."""
        request = pb.GetLakeSnapshotRequest()
        _set_path(request.table_path, as_table_path(table_path))
        response = await self._call(ApiKey.GET_LAKE_SNAPSHOT, request, read_only=True)
        return LakeSnapshot.from_pb(response)

    async def get_latest_kv_snapshots(
        self, table_path: TablePathLike, partition_name: str | None = None
    ) -> KvSnapshots:
        """The latest KV snapshot of every bucket of a primary-key table (or one of its partitions)."""
        request = pb.GetLatestKvSnapshotsRequest()
        _set_path(request.table_path, as_table_path(table_path))
        if partition_name is not None:
            request.partition_name = partition_name
        response = await self._call(ApiKey.GET_LATEST_KV_SNAPSHOTS, request, read_only=True)
        return KvSnapshots.from_pb(response)

    # ------------------------------------------------------------------ kv snapshot leases (1.0)

    async def acquire_kv_snapshot_lease(
        self, lease_id: str, duration_ms: int, snapshots: Mapping[TableBucket, int]
    ) -> dict[TableBucket, int]:
        """Hold snapshots (bucket -> snapshot id) from deletion for `duration_ms` (acquiring again
        renews the lease and moves a bucket to its new snapshot). Returns those that no longer exist."""
        request = pb.AcquireKvSnapshotLeaseRequest(lease_id=lease_id, lease_duration_ms=duration_ms)
        by_table: dict[int, pb.PbKvSnapshotLeaseForTable] = {}
        for bucket, snapshot_id in snapshots.items():
            table = by_table.get(bucket.table_id)
            if table is None:
                table = by_table[bucket.table_id] = request.snapshots_to_lease.add(table_id=bucket.table_id)
            entry = table.bucket_snapshots.add(bucket_id=bucket.bucket, snapshot_id=snapshot_id)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        response = await self._call(ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE, request, read_only=False)
        return {
            TableBucket(t.table_id, b.partition_id if b.HasField("partition_id") else None, b.bucket_id): (
                b.snapshot_id
            )
            for t in response.unavailable_snapshots
            for b in t.bucket_snapshots
        }

    async def release_kv_snapshot_lease(self, lease_id: str, buckets: Iterable[TableBucket]) -> None:
        request = pb.ReleaseKvSnapshotLeaseRequest(lease_id=lease_id)
        for bucket in buckets:
            entry = request.buckets_to_release.add(table_id=bucket.table_id, bucket_id=bucket.bucket)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        await self._call(ApiKey.RELEASE_KV_SNAPSHOT_LEASE, request, read_only=False)

    async def drop_kv_snapshot_lease(self, lease_id: str) -> None:
        await self._call(
            ApiKey.DROP_KV_SNAPSHOT_LEASE, pb.DropKvSnapshotLeaseRequest(lease_id=lease_id), read_only=False
        )

    # ------------------------------------------------------------------ offsets

    async def list_offsets(
        self,
        table_path: TablePathLike,
        bucket_ids: Iterable[int],
        offset_spec: OffsetSpec,
        partition_name: str | None = None,
    ) -> dict[int, int]:
        """Offsets of buckets of a table (or of one partition): bucket id -> offset.

        Each bucket's leader answers for it. Buckets whose leader is unknown, moved or gone are
        retried after a metadata refresh.
        """
        path = as_table_path(table_path)
        buckets = sorted(set(bucket_ids))
        if not buckets:
            raise ValueError("Buckets are empty.")
        # Fresh leaders first, as Fluss's client does.
        partition_paths = [PhysicalTablePath(path, partition_name)] if partition_name is not None else []
        cluster = await self._metadata.update(table_paths=[path], partition_paths=partition_paths)
        info = cluster.table_info(path)
        if info is None:
            raise UnknownServerError(f"The metadata reply did not describe table '{path}'.")
        partition_id: int | None = None
        if partition_name is not None:
            partition_id = cluster.partition_id(PhysicalTablePath(path, partition_name))
            if partition_id is None:
                raise PartitionNotExistError(
                    f"Partition '{partition_name}' of table '{path}' does not exist."
                )
        out_of_range = [b for b in buckets if not 0 <= b < info.bucket_count]
        if out_of_range:
            raise ValueError(f"Table '{path}' has {info.bucket_count} buckets; no bucket {out_of_range}.")

        results: dict[int, int] = {}
        pending = set(buckets)
        last: FlussError | None = None
        deadline = asyncio.get_running_loop().time() + self._timeout
        attempt = 0
        while True:
            by_leader: dict[int, tuple[ServerNode, list[int]]] = {}
            for bucket in sorted(pending):
                leader = self._metadata.leader_for(TableBucket(info.table_id, partition_id, bucket))
                if leader is None:
                    last = LeaderNotAvailableError(
                        f"No leader for bucket {bucket} of table '{path}'"
                        + (f" partition '{partition_name}'." if partition_name else ".")
                    )
                    continue
                by_leader.setdefault(leader.id, (leader, []))[1].append(bucket)
            answers = await asyncio.gather(
                *(
                    self._list_offsets_on(node, info.table_id, partition_id, ids, offset_spec)
                    for node, ids in by_leader.values()
                ),
                return_exceptions=True,
            )
            for (node, _), answer in zip(by_leader.values(), answers, strict=True):
                if isinstance(answer, BaseException):
                    if not isinstance(answer, FlussError) or not answer.retriable:
                        raise answer
                    last = answer
                    self._metadata.invalidate(server_id=node.id)
                    continue
                for bucket_response in answer.buckets_resp:
                    bucket = bucket_response.bucket_id
                    if bucket_response.HasField("error_code") and bucket_response.error_code != 0:
                        message = bucket_response.error_message or None
                        error = error_for_code(bucket_response.error_code, message)
                        if not error.retriable:
                            raise error
                        last = error
                        continue
                    if bucket in pending:
                        results[bucket] = bucket_response.offset
                        pending.discard(bucket)
            if not pending:
                return results
            if not self._may_retry(deadline, attempt):
                raise last or UnknownServerError(f"No offsets for buckets {sorted(pending)} of '{path}'.")
            await REQUEST_BACKOFF.sleep(attempt)
            attempt += 1
            try:
                await self._metadata.refresh_leaders(path, partition_id)
            except FlussError as e:
                if not e.retriable:
                    raise
                last = e

    # ------------------------------------------------------------------ table statistics (1.0)

    async def get_table_stats(
        self, table_path: TablePathLike, partition_name: str | None = None
    ) -> TableStats:
        """Row counts of a table (every partition of a partitioned one, or only `partition_name`),
        asked of each bucket's leader with GetTableStats: live keys of a primary-key table, records of a
        log table. Buckets whose leader moved are asked again after a metadata refresh."""
        path = as_table_path(table_path)
        info = await self.get_table_info(path)
        partitions: list[tuple[int | None, str | None]] = [(None, None)]
        if info.is_partitioned:
            listed = await self.list_partition_infos(path)
            partitions = [(p.partition_id, p.partition_name) for p in listed]
            if partition_name is not None:
                partitions = [p for p in partitions if p[1] == partition_name]
                if not partitions:
                    raise PartitionNotExistError(
                        f"Partition '{partition_name}' of table '{path}' does not exist."
                    )
        counts: dict[TableBucket, int] = {}
        for partition_id, name in partitions:
            counts.update(await self._bucket_row_counts(path, info, partition_id, name))
        return TableStats(sum(counts.values()), counts)

    async def _bucket_row_counts(
        self, path: TablePath, info: TableInfo, partition_id: int | None, partition_name: str | None
    ) -> dict[TableBucket, int]:
        partition_paths = [PhysicalTablePath(path, partition_name)] if partition_name is not None else []
        await self._metadata.update(table_paths=[path], partition_paths=partition_paths)
        pending = {TableBucket(info.table_id, partition_id, b) for b in range(info.bucket_count)}
        results: dict[TableBucket, int] = {}
        last: FlussError | None = None
        deadline = asyncio.get_running_loop().time() + self._timeout
        attempt = 0
        while True:
            by_leader: dict[int, tuple[ServerNode, pb.GetTableStatsRequest]] = {}
            for bucket in sorted(pending, key=lambda b: b.bucket):
                leader = self._metadata.leader_for(bucket)
                if leader is None:
                    last = LeaderNotAvailableError(f"No leader for bucket {bucket.bucket} of table '{path}'.")
                    continue
                request = by_leader.setdefault(
                    leader.id, (leader, pb.GetTableStatsRequest(table_id=info.table_id))
                )[1]
                entry = request.buckets_req.add(bucket_id=bucket.bucket)
                if partition_id is not None:
                    entry.partition_id = partition_id
            answers = await asyncio.gather(
                *(
                    self._pool.request(
                        node.host, node.port, ApiKey.GET_TABLE_STATS, request, timeout=self._timeout
                    )
                    for node, request in by_leader.values()
                ),
                return_exceptions=True,
            )
            for (node, _), answer in zip(by_leader.values(), answers, strict=True):
                if isinstance(answer, BaseException):
                    if not isinstance(answer, FlussError) or not answer.retriable:
                        raise answer
                    last = answer
                    self._metadata.invalidate(server_id=node.id)
                    continue
                for result in answer.buckets_resp:
                    bucket = TableBucket(info.table_id, partition_id, result.bucket_id)
                    if result.HasField("error_code") and result.error_code != 0:
                        error = error_for_code(result.error_code, result.error_message or None)
                        if not error.retriable:
                            raise error
                        last = error
                        continue
                    if bucket in pending and result.HasField("row_count"):
                        results[bucket] = result.row_count
                        pending.discard(bucket)
            if not pending:
                return results
            if not self._may_retry(deadline, attempt):
                raise last or UnknownServerError(f"No row counts for {len(pending)} buckets of '{path}'.")
            await REQUEST_BACKOFF.sleep(attempt)
            attempt += 1
            with contextlib.suppress(FlussError):
                await self._metadata.refresh_leaders(path, partition_id)

    # ------------------------------------------------------------------ dynamic cluster configs (1.0)

    async def describe_cluster_configs(self) -> list[ConfigEntry]:
        """The coordinator's configuration: each option as the servers started with it
        (INITIAL_SERVER_CONFIG) or as a dynamic config overrides it (DYNAMIC_SERVER_CONFIG)."""
        response = await self._call(
            ApiKey.DESCRIBE_CLUSTER_CONFIGS, pb.DescribeClusterConfigsRequest(), read_only=True
        )
        return [
            ConfigEntry(c.config_key, c.config_value if c.HasField("config_value") else None, c.config_source)
            for c in response.configs
        ]

    async def alter_cluster_configs(self, changes: Iterable[AlterConfig]) -> None:
        """Set (value) or delete (value None) dynamic cluster configs; the coordinator applies them at
        once, tablet servers within `server.dynamic-config.refresh-interval`."""
        request = pb.AlterClusterConfigsRequest()
        for change in changes:
            entry = request.alter_configs.add(config_key=change.key, op_type=1 if change.value is None else 0)
            if change.value is not None:
                entry.config_value = change.value
        await self._call(ApiKey.ALTER_CLUSTER_CONFIGS, request, read_only=False)

    async def get_cluster_health(self) -> ClusterHealth:
        """The coordinator's GetClusterHealth: one status for the whole cluster, with its counts."""
        r = await self._call(ApiKey.GET_CLUSTER_HEALTH, pb.GetClusterHealthRequest(), read_only=True)
        return ClusterHealth(
            _HEALTH_STATUS.get(r.status, "UNKNOWN"),
            r.num_replicas,
            r.in_sync_replicas,
            r.num_leader_replicas,
            r.active_leader_replicas,
        )

    # ------------------------------------------------------------------ producer offsets (1.0)

    async def register_producer_offsets(
        self, producer_id: str, offsets: Mapping[TableBucket, int], ttl_ms: int | None = None
    ) -> bool:
        """Register an exactly-once producer's bucket offsets once: True when they were stored now,
        False when an unexpired registration already existed (and was kept, not overwritten)."""
        request = pb.RegisterProducerOffsetsRequest(producer_id=producer_id)
        if ttl_ms is not None:
            request.ttl_ms = ttl_ms
        by_table: dict[int, pb.PbProducerTableOffsets] = {}
        for bucket, offset in offsets.items():
            table = by_table.get(bucket.table_id)
            if table is None:
                table = by_table[bucket.table_id] = request.table_offsets.add(table_id=bucket.table_id)
            entry = table.bucket_offsets.add(bucket_id=bucket.bucket, log_end_offset=offset)
            if bucket.partition_id is not None:
                entry.partition_id = bucket.partition_id
        response = await self._call(ApiKey.REGISTER_PRODUCER_OFFSETS, request, read_only=False)
        return bool(response.result == 0)

    async def get_producer_offsets(self, producer_id: str) -> ProducerOffsets | None:
        """A producer's registered offsets, or None when it has none."""
        request = pb.GetProducerOffsetsRequest(producer_id=producer_id)
        response = await self._call(ApiKey.GET_PRODUCER_OFFSETS, request, read_only=True)
        if not response.HasField("producer_id"):
            return None
        offsets = {
            TableBucket(t.table_id, b.partition_id if b.HasField("partition_id") else None, b.bucket_id): (
                b.log_end_offset
            )
            for t in response.table_offsets
            for b in t.bucket_offsets
        }
        return ProducerOffsets(response.producer_id, response.expiration_time, offsets)

    async def delete_producer_offsets(self, producer_id: str) -> None:
        request = pb.DeleteProducerOffsetsRequest(producer_id=producer_id)
        await self._call(ApiKey.DELETE_PRODUCER_OFFSETS, request, read_only=False)

    async def _list_offsets_on(
        self,
        node: ServerNode,
        table_id: int,
        partition_id: int | None,
        bucket_ids: list[int],
        spec: OffsetSpec,
    ) -> pb.ListOffsetsResponse:
        request = pb.ListOffsetsRequest(
            follower_server_id=CLIENT_REPLICA_ID, offset_type=int(spec.type), table_id=table_id
        )
        if partition_id is not None:
            request.partition_id = partition_id
        request.bucket_id.extend(bucket_ids)
        if spec.type == OffsetType.TIMESTAMP:
            assert spec.timestamp_ms is not None
            request.startTimestamp = spec.timestamp_ms
        response: pb.ListOffsetsResponse = await self._pool.request(
            node.host, node.port, ApiKey.LIST_OFFSETS, request, timeout=self._timeout
        )
        return response
