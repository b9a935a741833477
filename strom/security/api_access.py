"""What each API needs from the caller: Fluss's authorization rules, in one table.

`CHECKS[key](request, access)` runs before the handler and raises AuthorizationError; `FILTERS[key]`
runs after it and hides what the caller may not describe (listings, existence checks, metadata).
The rules follow Fluss's CoordinatorService, TabletService and RpcServiceBase: e.g. CreateTable needs
CREATE on the database, ProduceLog and PutKv WRITE on the table, FetchLog and lookups READ, listings
show only what the caller may DESCRIBE. ApiVersions and Authenticate need nothing; the ACL APIs
check per resource in their handlers. Internal (Fluss PRIVATE) APIs never get here for untrusted
callers: the security layer refuses them first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from strom.common.table_path import DEFAULT_DATABASE_NAME
from strom.rpc.api import ApiKey
from strom.security.acl import OperationType, Resource

READ, WRITE, CREATE, DROP, ALTER, DESCRIBE = (
    OperationType.READ,
    OperationType.WRITE,
    OperationType.CREATE,
    OperationType.DROP,
    OperationType.ALTER,
    OperationType.DESCRIBE,
)

# Fluss's PRIVATE APIs and Strom's own server-to-server keys: only the cluster itself calls them.
INTERNAL_APIS = frozenset(
    {
        ApiKey.UPDATE_METADATA,
        ApiKey.NOTIFY_LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.ADJUST_ISR,
        ApiKey.COMMIT_KV_SNAPSHOT,
        ApiKey.COMMIT_REMOTE_LOG_MANIFEST,
        ApiKey.NOTIFY_REMOTE_LOG_OFFSETS,
        ApiKey.NOTIFY_KV_SNAPSHOT_OFFSET,
        ApiKey.COMMIT_LAKE_TABLE_SNAPSHOT,
        ApiKey.NOTIFY_LAKE_TABLE_OFFSET,
        ApiKey.LAKE_TIERING_HEARTBEAT,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.PREPARE_LAKE_TABLE_SNAPSHOT,
        ApiKey.REGISTER_TABLET_SERVER,
        ApiKey.TABLET_SERVER_HEARTBEAT,
        ApiKey.REPORT_OFFLINE_REPLICAS,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.ALLOCATE_AUTO_INCREMENT_IDS,
        ApiKey.RESCALE_BUCKET,
    }
)

# APIs that need no authorization (the handshake) or check per resource themselves (ACLs).
UNCHECKED_APIS = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.AUTHENTICATE, ApiKey.CREATE_ACLS, ApiKey.LIST_ACLS, ApiKey.DROP_ACLS}
)


class Access(Protocol):
    """The caller's rights, as the security layer sees them for one request."""

    def require(self, operation: OperationType, resource: Resource) -> None: ...

    def allowed(self, operation: OperationType, resource: Resource) -> bool: ...

    def table(self, table_id: int) -> Resource | None: ...

    def require_any_grant(self, operation: OperationType) -> None: ...


Check = Callable[[Any, Access], None]
Filter = Callable[[Any, Any, Access], None]


def _path(message: Any) -> Resource:
    return Resource.table(message.database_name, message.table_name)


def _on_cluster(operation: OperationType) -> Check:
    return lambda request, access: access.require(operation, Resource.cluster())


def _on_database(operation: OperationType) -> Check:
    return lambda request, access: access.require(operation, Resource.database(request.database_name))


def _on_table_path(operation: OperationType) -> Check:
    return lambda request, access: access.require(operation, _path(request.table_path))


def _on_table_id(operation: OperationType, deny_unknown: bool = False) -> Check:
    def check(request: Any, access: Access) -> None:
        _require_table_ids(access, operation, [request.table_id], deny_unknown)

    return check


def _require_table_ids(
    access: Access, operation: OperationType, table_ids: list[int], deny_unknown: bool = False
) -> None:
    for table_id in dict.fromkeys(table_ids):
        resource = access.table(table_id)
        if resource is not None:
            access.require(operation, resource)
        elif deny_unknown:
            # metadata a tablet server forwards to the coordinator: no name, no answer
            access.require(operation, Resource.table("?", f"id {table_id}"))
        # otherwise the handler answers an id it does not know (unknown table or bucket)


def _fetch_log(request: Any, access: Access) -> None:
    # follower fetches come only from trusted (internal) sessions, which are never checked here
    _require_table_ids(access, READ, [t.table_id for t in request.tables_req])


def _lookup(request: Any, access: Access) -> None:
    # inserting missing keys writes (Fluss: WRITE when insert_if_not_exists)
    operation = WRITE if request.HasField("insert_if_not_exists") and request.insert_if_not_exists else READ
    _require_table_ids(access, operation, [request.table_id])


def _init_writer(request: Any, access: Access) -> None:
    # Fluss: authorized when the caller may write any of the tables
    resources = [_path(p) for p in request.table_path] or [Resource.cluster()]
    if not any(access.allowed(WRITE, r) for r in resources):
        access.require(WRITE, resources[0])


def _create_table(request: Any, access: Access) -> None:
    access.require(CREATE, Resource.database(request.table_path.database_name))


def _register_producer_offsets(request: Any, access: Access) -> None:
    # Fluss: WRITE on every table whose offsets are registered
    _require_table_ids(access, WRITE, [t.table_id for t in request.table_offsets])


def _filter_producer_offsets(request: Any, response: Any, access: Access) -> None:
    # Fluss answers only the tables the caller may read
    kept = []
    for table in response.table_offsets:
        resource = access.table(table.table_id)
        if resource is None or access.allowed(READ, resource):
            kept.append(table)
    if len(kept) != len(response.table_offsets):
        del response.table_offsets[:]
        response.table_offsets.extend(kept)


def _scan_kv(request: Any, access: Access) -> None:
    # Fluss: READ on the table when a scan opens; a continuation names a scanner, which only the
    # principal that opened it may use (kv/scanners.py)
    if request.HasField("bucket_scan_req"):
        _require_table_ids(access, READ, [request.bucket_scan_req.table_id])


def _security_token(request: Any, access: Access) -> None:
    # remote-storage credentials reach only callers that may read something
    access.require_any_grant(READ)


def _metadata(request: Any, access: Access) -> None:
    # Tables named in the request need DESCRIBE, whether or not they exist (so the answer reveals
    # nothing). Fluss leaves them out of the answer instead, which the official client reports as
    # "table not found"; a clear AUTHORIZATION error is what a user can act on.
    for path in (*request.table_path, *request.partitions_path):
        access.require(DESCRIBE, _path(path))


CHECKS: dict[ApiKey, Check] = {
    ApiKey.CREATE_DATABASE: _on_cluster(CREATE),
    ApiKey.DROP_DATABASE: _on_database(DROP),
    ApiKey.ALTER_DATABASE: _on_database(ALTER),
    ApiKey.GET_DATABASE_INFO: _on_database(DESCRIBE),
    ApiKey.CREATE_TABLE: _create_table,
    ApiKey.DROP_TABLE: _on_table_path(DROP),
    ApiKey.ALTER_TABLE: _on_table_path(ALTER),
    ApiKey.GET_TABLE_INFO: _on_table_path(DESCRIBE),
    ApiKey.GET_TABLE_SCHEMA: _on_table_path(DESCRIBE),
    ApiKey.LIST_PARTITION_INFOS: _on_table_path(DESCRIBE),
    ApiKey.CREATE_PARTITION: _on_table_path(WRITE),
    ApiKey.DROP_PARTITION: _on_table_path(WRITE),
    ApiKey.GET_LATEST_KV_SNAPSHOTS: _on_table_path(DESCRIBE),
    ApiKey.GET_LAKE_SNAPSHOT: _on_table_path(DESCRIBE),
    ApiKey.GET_KV_SNAPSHOT_METADATA: _on_table_id(DESCRIBE, deny_unknown=True),
    ApiKey.LIST_KV_SNAPSHOTS: _on_table_id(DESCRIBE, deny_unknown=True),
    ApiKey.LIST_REMOTE_LOG_MANIFESTS: _on_table_id(DESCRIBE, deny_unknown=True),
    ApiKey.GET_METADATA: _metadata,
    ApiKey.INIT_WRITER: _init_writer,
    ApiKey.PRODUCE_LOG: _on_table_id(WRITE),
    ApiKey.PUT_KV: _on_table_id(WRITE),
    ApiKey.FETCH_LOG: _fetch_log,
    ApiKey.LOOKUP: _lookup,
    ApiKey.PREFIX_LOOKUP: _on_table_id(READ),
    ApiKey.LIMIT_SCAN: _on_table_id(READ),
    ApiKey.LIST_OFFSETS: _on_table_id(DESCRIBE),
    ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: _security_token,
    ApiKey.DESCRIBE_CLUSTER: _on_cluster(DESCRIBE),
    ApiKey.ADD_SERVER_TAG: _on_cluster(ALTER),
    ApiKey.REMOVE_SERVER_TAG: _on_cluster(ALTER),
    ApiKey.REBALANCE: _on_cluster(WRITE),
    ApiKey.LIST_REBALANCE_PROGRESS: _on_cluster(DESCRIBE),
    ApiKey.CANCEL_REBALANCE: _on_cluster(WRITE),
    ApiKey.DESCRIBE_REPLICAS: _on_cluster(DESCRIBE),
    ApiKey.GET_TABLE_STATS: _on_table_id(READ),
    ApiKey.DESCRIBE_CLUSTER_CONFIGS: _on_cluster(DESCRIBE),
    ApiKey.SCAN_KV: _scan_kv,
    ApiKey.GET_CLUSTER_HEALTH: _on_cluster(DESCRIBE),
    # Fluss: READ on every table whose snapshots are leased or released
    ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE: lambda request, access: _require_table_ids(
        access, READ, [t.table_id for t in request.snapshots_to_lease]
    ),
    ApiKey.RELEASE_KV_SNAPSHOT_LEASE: lambda request, access: _require_table_ids(
        access, READ, [b.table_id for b in request.buckets_to_release]
    ),
    # Fluss checks READ on the tables the stored lease names, which this layer cannot read: any READ
    # grant is needed (a lease only ever holds snapshots back, it reveals nothing)
    ApiKey.DROP_KV_SNAPSHOT_LEASE: lambda request, access: access.require_any_grant(READ),
    ApiKey.ALTER_CLUSTER_CONFIGS: _on_cluster(ALTER),
    ApiKey.REGISTER_PRODUCER_OFFSETS: _register_producer_offsets,
    # Fluss checks WRITE on the tables the stored entry names; this layer cannot read the store, so
    # deleting a producer's offsets takes WRITE on the cluster (stricter, never looser)
    ApiKey.DELETE_PRODUCER_OFFSETS: _on_cluster(WRITE),
    ApiKey.GET_PRODUCER_OFFSETS: lambda request, access: None,  # filtered below
    # answered for everyone, then filtered below
    ApiKey.LIST_DATABASES: lambda request, access: None,
    ApiKey.LIST_TABLES: lambda request, access: None,
    ApiKey.DATABASE_EXISTS: lambda request, access: None,
    ApiKey.TABLE_EXISTS: lambda request, access: None,
}


def _filter_databases(request: Any, response: Any, access: Access) -> None:
    names = [n for n in response.database_name if access.allowed(DESCRIBE, Resource.database(n))]
    summaries = [
        s for s in response.database_summary if access.allowed(DESCRIBE, Resource.database(s.database_name))
    ]
    del response.database_name[:]
    response.database_name.extend(names)
    del response.database_summary[:]
    response.database_summary.extend(summaries)


def _filter_tables(request: Any, response: Any, access: Access) -> None:
    names = [
        n for n in response.table_name if access.allowed(DESCRIBE, Resource.table(request.database_name, n))
    ]
    del response.table_name[:]
    response.table_name.extend(names)


def _filter_database_exists(request: Any, response: Any, access: Access) -> None:
    # Fluss answers "does not exist" rather than revealing it, except for the default database
    if request.database_name != DEFAULT_DATABASE_NAME and not access.allowed(
        DESCRIBE, Resource.database(request.database_name)
    ):
        response.exists = False


def _filter_table_exists(request: Any, response: Any, access: Access) -> None:
    if not access.allowed(DESCRIBE, _path(request.table_path)):
        response.exists = False


def _filter_partition_metadata(request: Any, response: Any, access: Access) -> None:
    # partitions asked for by id: keep those of tables the caller may describe
    kept = []
    for partition in response.partition_metadata:
        resource = access.table(partition.table_id)
        if resource is None or access.allowed(DESCRIBE, resource):
            kept.append(partition)
    if len(kept) != len(response.partition_metadata):
        del response.partition_metadata[:]
        response.partition_metadata.extend(kept)


FILTERS: dict[ApiKey, Filter] = {
    ApiKey.LIST_DATABASES: _filter_databases,
    ApiKey.LIST_TABLES: _filter_tables,
    ApiKey.DATABASE_EXISTS: _filter_database_exists,
    ApiKey.TABLE_EXISTS: _filter_table_exists,
    ApiKey.GET_METADATA: _filter_partition_metadata,
    ApiKey.GET_PRODUCER_OFFSETS: _filter_producer_offsets,
}
