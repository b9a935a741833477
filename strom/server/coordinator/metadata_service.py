"""The coordinator's admin API: databases, tables, partitions, schemas and cluster metadata.

Every request is validated before anything is written, and every write is one store transaction, so
a refused request changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from strom.common import config as options
from strom.common.alter_table import ALTER_CONFIG_DELETE, ALTER_CONFIG_SET
from strom.common.config import Configuration
from strom.common.errors import (
    DatabaseAlreadyExistError,
    DatabaseNotEmptyError,
    DatabaseNotExistError,
    InvalidAlterTableError,
    InvalidConfigError,
    InvalidDatabaseError,
    InvalidTableError,
    PartitionAlreadyExistsError,
    PartitionNotExistError,
    SchemaNotExistError,
    TableAlreadyExistError,
    TableNotExistError,
    TableNotPartitionedError,
    TooManyPartitionsError,
)
from strom.common.json_limits import check_json_bounds
from strom.common.lake_enablement import cluster_lake_format, table_lake_enabled
from strom.common.partition import parse_partition_name, validate_auto_partition_time, validate_partition_spec
from strom.common.rescale import RESERVED_PREFIX
from strom.common.table_descriptor import DatabaseDescriptor, TableDescriptor, TableInfo
from strom.common.table_path import (
    DEFAULT_DATABASE_NAME,
    PARTITION_SEPARATOR,
    TablePath,
    validate_database_name,
)
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.security.listeners import endpoint_on
from strom.server.coordinator.controller import Controller, assign_replicas
from strom.server.coordinator.membership import Membership
from strom.server.coordinator.rescale import RescaleManager, RescaleTask
from strom.server.coordinator.table_alteration import alter
from strom.server.coordinator.table_lake_options import table_lake_options, with_lake_options
from strom.server.coordinator.table_validation import (
    apply_table_defaults,
    parse_table_descriptor,
    validate_table_descriptor,
)
from strom.server.store.base import (
    BucketAssignment,
    DatabaseRecord,
    MetadataStore,
    PartitionRecord,
    TableRecord,
)
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


def table_path_of(message: Any) -> TablePath:
    path = TablePath(message.database_name, message.table_name)
    path.validate()
    return path


class MetadataService:
    def __init__(
        self,
        store: OrderedStore,
        config: Configuration,
        membership: Membership,
        controller: Controller,
        coordinator_node: pb.PbServerNode,
    ) -> None:
        self.store = store
        self.config = config
        self.membership = membership
        self.controller = controller
        self.coordinator_node = coordinator_node
        self.lake_options = table_lake_options(config)
        # called after a table is created (the coordinator hooks auto-partitioning in here)
        self.on_table_created: Callable[[TableRecord], Awaitable[None]] | None = None
        self.on_table_dropped: Callable[[int], Awaitable[None]] | None = None
        # creates the lake table of a lake-enabled table before the Fluss table exists
        self.create_lake_table: Callable[[TableInfo], Awaitable[None]] | None = None
        # the servers new buckets may be placed on (the coordinator leaves out servers being retired)
        self.placement_candidates: Callable[[], list[int]] = membership.live_ids
        # called after AlterTable stored a table's new descriptor (old descriptor, new record)
        self.on_table_altered: Callable[[TableDescriptor, TableRecord], Awaitable[None]] | None = None
        # online bucket rescales (AlterTable of bucket.num), set by the active coordinator
        self.rescale: RescaleManager | None = None
        controller.table_metadata = self.tables_metadata
        # DDL checks a name, then writes: store writes await the store's thread, so two requests for one
        # name could both pass the check. One DDL at a time keeps check and write together.
        self._ddl_lock = asyncio.Lock()

    # ---- lookups shared by the handlers

    def _database(self, name: str) -> DatabaseRecord:
        record = self.store.get_database(name)
        if record is None:
            raise DatabaseNotExistError(f"Database '{name}' does not exist.")
        return record

    def _table(self, path: TablePath) -> TableRecord:
        record = self.store.get_table(path.database_name, path.table_name)
        if record is None:
            raise TableNotExistError(f"Table '{path}' does not exist.")
        return record

    @staticmethod
    def _descriptor(record: TableRecord) -> TableDescriptor:
        return TableDescriptor.from_json_bytes(record.table_json)

    async def ensure_default_database(self) -> None:
        name = DEFAULT_DATABASE_NAME
        if self.store.get_database(name) is None:
            created = now_ms()
            await self.store.create_database(
                DatabaseRecord(name, DatabaseDescriptor().to_json_bytes(), created, created)
            )

    # ---- databases

    async def create_database(
        self, request: pb.CreateDatabaseRequest, ctx: object
    ) -> pb.CreateDatabaseResponse:
        name = request.database_name
        validate_database_name(name)
        if request.HasField("database_json") and request.database_json:
            try:
                check_json_bounds(request.database_json, "database descriptor")
                descriptor = DatabaseDescriptor.from_json(json.loads(request.database_json))
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                raise InvalidDatabaseError(f"Invalid database descriptor for '{name}': {e}") from None
        else:
            descriptor = DatabaseDescriptor()
        async with self._ddl_lock:
            if self.store.get_database(name) is not None:
                if request.ignore_if_exists:
                    return pb.CreateDatabaseResponse()
                raise DatabaseAlreadyExistError(f"Database '{name}' already exists.")
            created = now_ms()
            record = DatabaseRecord(name, descriptor.to_json_bytes(), created, created)
            await self.store.create_database(record)
        log.info("created database %s", name)
        return pb.CreateDatabaseResponse()

    async def drop_database(self, request: pb.DropDatabaseRequest, ctx: object) -> pb.DropDatabaseResponse:
        async with self._ddl_lock:
            return await self._drop_database(request)

    async def _drop_database(self, request: pb.DropDatabaseRequest) -> pb.DropDatabaseResponse:
        name = request.database_name
        if self.store.get_database(name) is None:
            if request.ignore_if_not_exists:
                return pb.DropDatabaseResponse()
            raise DatabaseNotExistError(f"Database '{name}' does not exist.")
        tables = self.store.list_tables(name)
        if tables and not request.cascade:
            raise DatabaseNotEmptyError(
                f"Database '{name}' is not empty: it has {len(tables)} table(s); drop them first "
                "or use cascade."
            )
        dropped: list[BucketAssignment] = []
        for table in tables:
            dropped += self.store.list_buckets(table.table_id)

        def drop(store: MetadataStore) -> None:
            for table in tables:
                store.drop_table(table.table_id)
            store.drop_database(name)

        await self.store.atomically(drop)
        if self.on_table_dropped is not None:
            for table in tables:
                await self.on_table_dropped(table.table_id)
        await self.controller.stop_replicas(dropped, delete=True)
        log.info("dropped database %s (%d tables)", name, len(tables))
        return pb.DropDatabaseResponse()

    async def alter_database(self, request: pb.AlterDatabaseRequest, ctx: object) -> pb.AlterDatabaseResponse:
        """AlterDatabase (Fluss 1.0, 1060): SET / DELETE custom properties and set the comment (an
        empty comment removes it). Nothing is stored when nothing changes."""
        name = request.database_name
        set_props: dict[str, str] = {}
        reset: set[str] = set()
        for change in request.config_changes:
            if change.op_type == ALTER_CONFIG_SET:
                if not change.HasField("config_value"):
                    raise InvalidConfigError(f"Setting property '{change.config_key}' needs a value.")
                set_props[change.config_key] = change.config_value
                reset.discard(change.config_key)
            elif change.op_type == ALTER_CONFIG_DELETE:
                reset.add(change.config_key)
                set_props.pop(change.config_key, None)
            else:
                raise InvalidConfigError(
                    f"Unsupported alter database configs op type {change.op_type} (databases take SET "
                    "and DELETE)."
                )
        async with self._ddl_lock:
            record = self.store.get_database(name)
            if record is None:
                if request.ignore_if_not_exists:
                    return pb.AlterDatabaseResponse()
                raise DatabaseNotExistError(f"Database '{name}' does not exist.")
            current = DatabaseDescriptor.from_json_bytes(record.database_json)
            properties = {
                k: v for k, v in {**current.custom_properties, **set_props}.items() if k not in reset
            }
            comment = current.comment
            if request.HasField("comment"):
                comment = request.comment or None
            if properties == current.custom_properties and comment == current.comment:
                return pb.AlterDatabaseResponse()
            altered = DatabaseDescriptor(comment=comment, custom_properties=properties)
            await self.store.update_database(
                DatabaseRecord(name, altered.to_json_bytes(), record.created_time, now_ms())
            )
        log.info("altered database %s", name)
        return pb.AlterDatabaseResponse()

    async def list_databases(self, request: pb.ListDatabasesRequest, ctx: object) -> pb.ListDatabasesResponse:
        response = pb.ListDatabasesResponse()
        records = self.store.list_databases()
        if request.HasField("include_summary") and request.include_summary:
            counts: dict[str, int] = {}
            for table in self.store.list_tables():
                counts[table.database] = counts.get(table.database, 0) + 1
            for r in records:
                response.database_summary.add(
                    database_name=r.name, created_time=r.created_time, table_count=counts.get(r.name, 0)
                )
        else:
            response.database_name.extend(r.name for r in records)
        return response

    async def database_exists(
        self, request: pb.DatabaseExistsRequest, ctx: object
    ) -> pb.DatabaseExistsResponse:
        return pb.DatabaseExistsResponse(exists=self.store.get_database(request.database_name) is not None)

    async def get_database_info(
        self, request: pb.GetDatabaseInfoRequest, ctx: object
    ) -> pb.GetDatabaseInfoResponse:
        record = self._database(request.database_name)
        return pb.GetDatabaseInfoResponse(
            database_json=record.database_json,
            created_time=record.created_time,
            modified_time=record.modified_time,
        )

    # ---- tables

    def _check_table_kind_allowed(self, descriptor: TableDescriptor) -> None:
        """allow.create.kv.tables / allow.create.log.tables, with Fluss's error and message."""
        if descriptor.has_primary_key:
            if not self.config.get(options.ALLOW_CREATE_KV_TABLES):
                raise InvalidTableError("Creation of Primary Key Tables is disallowed in the cluster.")
        elif not self.config.get(options.ALLOW_CREATE_LOG_TABLES):
            raise InvalidTableError("Creation of Log Tables is disallowed in the cluster.")

    async def create_table(self, request: pb.CreateTableRequest, ctx: object) -> pb.CreateTableResponse:
        async with self._ddl_lock:
            created = await self._create_table(request)
        if created is not None:
            record, assignments = created
            await self.controller.notify_leadership(assignments)
            if self.on_table_created is not None:
                await self.on_table_created(record)
        return pb.CreateTableResponse()

    async def _create_table(
        self, request: pb.CreateTableRequest
    ) -> tuple[TableRecord, list[BucketAssignment]] | None:
        """Check and store a new table: its record and bucket assignments, or None if it exists."""
        path = table_path_of(request.table_path)
        self._database(path.database_name)
        descriptor = apply_table_defaults(parse_table_descriptor(request.table_json), self.config)
        reserved = sorted(k for k in descriptor.custom_properties if k.startswith(RESERVED_PREFIX))
        if reserved:
            raise InvalidConfigError(
                f"Custom properties {reserved} are kept by bucket rescales and cannot be set at creation."
            )
        self._check_table_kind_allowed(descriptor)
        validate_table_descriptor(
            descriptor,
            self.config.get(options.MAX_BUCKET_NUM),
            cluster_lake_format(self.config),
        )
        if self.store.get_table(path.database_name, path.table_name) is not None:
            if request.ignore_if_exists:
                return None
            raise TableAlreadyExistError(f"Table '{path}' already exists.")
        replication_factor = descriptor.replication_factor()
        bucket_count = descriptor.bucket_count
        assert bucket_count is not None  # filled by apply_table_defaults
        live = self.membership.locations(self.placement_candidates())
        # placement is checked even for partitioned tables, whose buckets come with their partitions
        assignments = assign_replicas(-1, None, bucket_count, replication_factor, live)
        table_id = await self.store.next_id("table")
        created = now_ms()
        if self.create_lake_table is not None and table_lake_enabled(descriptor.properties):
            await self.create_lake_table(TableInfo(path, table_id, 1, descriptor, created, created))
        record = TableRecord(
            table_id, path.database_name, path.table_name, 1, descriptor.to_json_bytes(), created, created
        )
        schema_json = descriptor.schema.to_json_bytes()
        if descriptor.is_partitioned:
            assignments = []
        else:
            assignments = [_with_table(a, table_id, None) for a in assignments]

        def create(store: MetadataStore) -> None:
            store.create_table(record, schema_json)
            if assignments:
                store.put_buckets(assignments)

        await self.store.atomically(create)
        log.info("created table %s (id %d, %d buckets)", path, table_id, bucket_count)
        return record, assignments

    async def drop_table(self, request: pb.DropTableRequest, ctx: object) -> pb.DropTableResponse:
        path = table_path_of(request.table_path)
        async with self._ddl_lock:
            record = self.store.get_table(path.database_name, path.table_name)
            if record is None:
                if request.ignore_if_not_exists:
                    return pb.DropTableResponse()
                raise TableNotExistError(f"Table '{path}' does not exist.")
            buckets = self.store.list_buckets(record.table_id)
            await self.store.drop_table(record.table_id)
        if self.on_table_dropped is not None:
            await self.on_table_dropped(record.table_id)
        await self.controller.stop_replicas(buckets, delete=True)
        log.info("dropped table %s (id %d)", path, record.table_id)
        return pb.DropTableResponse()

    async def list_tables(self, request: pb.ListTablesRequest, ctx: object) -> pb.ListTablesResponse:
        self._database(request.database_name)
        return pb.ListTablesResponse(
            table_name=[t.name for t in self.store.list_tables(request.database_name)]
        )

    async def table_exists(self, request: pb.TableExistsRequest, ctx: object) -> pb.TableExistsResponse:
        path = TablePath(request.table_path.database_name, request.table_path.table_name)
        return pb.TableExistsResponse(
            exists=self.store.get_table(path.database_name, path.table_name) is not None
        )

    async def get_table_info(self, request: pb.GetTableInfoRequest, ctx: object) -> pb.GetTableInfoResponse:
        record = self._table(table_path_of(request.table_path))
        return pb.GetTableInfoResponse(
            table_id=record.table_id,
            schema_id=record.schema_id,
            table_json=with_lake_options(record.table_json, self.lake_options),
            created_time=record.created_time,
            modified_time=record.modified_time,
        )

    async def get_table_schema(
        self, request: pb.GetTableSchemaRequest, ctx: object
    ) -> pb.GetTableSchemaResponse:
        path = table_path_of(request.table_path)
        record = self._table(path)
        schema_id = request.schema_id if request.HasField("schema_id") else record.schema_id
        schema_json = self.store.get_schema(record.table_id, schema_id)
        if schema_json is None:
            raise SchemaNotExistError(f"Schema {schema_id} of table '{path}' does not exist.")
        return pb.GetTableSchemaResponse(schema_id=schema_id, schema_json=schema_json)

    async def alter_table(self, request: pb.AlterTableRequest, ctx: object) -> pb.AlterTableResponse:
        # One at a time: an alteration reads the table, may wait (creating its lake table), then
        # writes; another in between would be overwritten, its schema left behind under a schema id
        # the table no longer has (and the next AddColumn refused for that id).
        async with self._ddl_lock:
            response = await self._alter_table(request)
        if isinstance(response, RescaleTask):
            # the table is sealed and the task stored: the move runs outside the DDL lock
            assert self.rescale is not None
            task = await self.rescale.finish(response.table_id)
            log.info("rescale of table id %d: %s", task.table_id, task.describe())
            return pb.AlterTableResponse()
        return response

    async def _alter_table(self, request: pb.AlterTableRequest) -> pb.AlterTableResponse | RescaleTask:
        path = table_path_of(request.table_path)
        record = self.store.get_table(path.database_name, path.table_name)
        if record is None:
            if request.ignore_if_not_exists:
                return pb.AlterTableResponse()
            raise TableNotExistError(f"Table '{path}' does not exist.")
        old = self._descriptor(record)
        alteration = alter(str(path), old, request)
        if alteration.rescale_to is not None:
            if self.rescale is None:
                raise InvalidAlterTableError(f"Table '{path}' keeps its bucket count: rescaling is off.")
            return await self.rescale.begin(record, old, alteration.rescale_to)
        new = alteration.descriptor
        validate_table_descriptor(
            new, self.config.get(options.MAX_BUCKET_NUM), cluster_lake_format(self.config)
        )
        schema_id = record.schema_id + 1 if alteration.schema_changed else record.schema_id
        modified = now_ms()
        info = TableInfo(path, record.table_id, schema_id, new, record.created_time, modified)
        if (
            self.create_lake_table is not None
            and info.datalake_enabled
            and not table_lake_enabled(old.properties)
        ):
            # a table that turns lake-enabled gets its lake table before tiering can be scheduled
            await self.create_lake_table(info)
        altered = TableRecord(
            record.table_id,
            record.database,
            record.name,
            schema_id,
            new.to_json_bytes(),
            record.created_time,
            modified,
        )

        def store_alteration(store: MetadataStore) -> None:
            if alteration.schema_changed:
                store.add_schema(record.table_id, schema_id, new.schema.to_json_bytes())
            store.update_table(altered)

        await self.store.atomically(store_alteration)
        log.info("altered table %s (schema id %d)", path, schema_id)
        await self.controller.broadcast_servers([self._update_metadata_of(altered)])
        if self.on_table_altered is not None:
            await self.on_table_altered(old, altered)
        return pb.AlterTableResponse()

    def tables_metadata(self, table_ids: set[int]) -> list[pb.PbTableMetadata]:
        """UpdateMetadata's entries for these tables (the ones that still exist)."""
        records = (self.store.get_table_by_id(table_id) for table_id in sorted(table_ids))
        return [self._update_metadata_of(r) for r in records if r is not None]

    def _update_metadata_of(self, record: TableRecord) -> pb.PbTableMetadata:
        holder = pb.UpdateMetadataRequest()
        self._table_metadata(holder.table_metadata, record)
        return holder.table_metadata[0]

    # ---- partitions

    def _partitioned_table(self, path: TablePath) -> tuple[TableRecord, TableDescriptor]:
        record = self._table(path)
        descriptor = self._descriptor(record)
        if not descriptor.is_partitioned:
            raise TableNotPartitionedError(f"Table '{path}' is not partitioned.")
        return record, descriptor

    async def list_partition_infos(
        self, request: pb.ListPartitionInfosRequest, ctx: object
    ) -> pb.ListPartitionInfosResponse:
        path = table_path_of(request.table_path)
        record, descriptor = self._partitioned_table(path)
        wanted = (
            {kv.key: kv.value for kv in request.partial_partition_spec.partition_key_values}
            if request.HasField("partial_partition_spec")
            else {}
        )
        unknown = set(wanted) - set(descriptor.partition_keys)
        if unknown:
            from strom.common.errors import PartitionSpecInvalidError

            raise PartitionSpecInvalidError(
                f"{sorted(unknown)} are not partition keys of '{path}' "
                f"(partition keys: {descriptor.partition_keys})"
            )
        response = pb.ListPartitionInfosResponse()
        for partition in self.store.list_partitions(record.table_id):
            spec = parse_partition_name(descriptor.partition_keys, partition.name)
            if any(spec.get(k) != v for k, v in wanted.items()):
                continue
            info = response.partitions_info.add(partition_id=partition.partition_id)
            for key in descriptor.partition_keys:
                info.partition_spec.partition_key_values.add(key=key, value=spec[key])
        return response

    async def create_partition(
        self, request: pb.CreatePartitionRequest, ctx: object
    ) -> pb.CreatePartitionResponse:
        path = table_path_of(request.table_path)
        record, descriptor = self._partitioned_table(path)
        spec = {kv.key: kv.value for kv in request.partition_spec.partition_key_values}
        name = PARTITION_SEPARATOR.join(validate_partition_spec(path, descriptor.partition_keys, spec, True))
        validate_auto_partition_time(path, descriptor.partition_keys, spec, descriptor.properties)
        async with self._ddl_lock:
            if self.store.get_partition(record.table_id, name) is not None:
                if request.ignore_if_not_exists:  # Fluss's name for "ignore if exists" on this message
                    return pb.CreatePartitionResponse()
                raise PartitionAlreadyExistsError(f"Partition '{name}' of table '{path}' already exists.")
            _, assignments = await self._store_partition(record, descriptor, name)
        await self.controller.notify_leadership(assignments)
        return pb.CreatePartitionResponse()

    async def add_partition(self, record: TableRecord, descriptor: TableDescriptor, name: str) -> int:
        """Creates a partition with its buckets unless it exists (auto-partitioning); its id."""
        async with self._ddl_lock:
            existing = self.store.get_partition(record.table_id, name)
            if existing is not None:
                return existing.partition_id
            partition_id, assignments = await self._store_partition(record, descriptor, name)
        await self.controller.notify_leadership(assignments)
        return partition_id

    async def _store_partition(
        self, record: TableRecord, descriptor: TableDescriptor, name: str
    ) -> tuple[int, list[BucketAssignment]]:
        """Stores a new partition with its buckets (the caller holds the DDL lock)."""
        max_partitions = self.config.get(options.MAX_PARTITION_NUM)
        existing = self.store.list_partitions(record.table_id)
        if max_partitions is not None and len(existing) >= max_partitions:
            raise TooManyPartitionsError(
                f"Table '{record.database}.{record.name}' already has {len(existing)} partitions, the "
                f"maximum (max.partition.num = {max_partitions})."
            )
        replication_factor = descriptor.replication_factor()
        assert descriptor.bucket_count is not None
        partition_id = await self.store.next_id("partition")
        assignments = assign_replicas(
            record.table_id,
            partition_id,
            descriptor.bucket_count,
            replication_factor,
            self.membership.locations(self.placement_candidates()),
        )
        partition = PartitionRecord(partition_id, record.table_id, name, now_ms())

        def create(store: MetadataStore) -> None:
            store.create_partition(partition)
            store.put_buckets(assignments)

        await self.store.atomically(create)
        log.info("created partition %s of %s.%s (id %d)", name, record.database, record.name, partition_id)
        return partition_id, assignments

    async def drop_partition(self, request: pb.DropPartitionRequest, ctx: object) -> pb.DropPartitionResponse:
        path = table_path_of(request.table_path)
        record, descriptor = self._partitioned_table(path)
        spec = {kv.key: kv.value for kv in request.partition_spec.partition_key_values}
        name = PARTITION_SEPARATOR.join(validate_partition_spec(path, descriptor.partition_keys, spec, False))
        partition = self.store.get_partition(record.table_id, name)
        if partition is None:
            if request.ignore_if_not_exists:
                return pb.DropPartitionResponse()
            raise PartitionNotExistError(f"Partition '{name}' of table '{path}' does not exist.")
        await self.remove_partition(record, partition)
        return pb.DropPartitionResponse()

    async def remove_partition(self, record: TableRecord, partition: PartitionRecord) -> None:
        """Drops a partition and deletes its replicas (DropPartition and auto-partition retention)."""
        async with self._ddl_lock:
            if self.store.get_partition_by_id(partition.partition_id) is None:
                return  # dropped meanwhile (DropPartition and retention may race)
            buckets = [
                b
                for b in self.store.list_buckets(record.table_id)
                if b.partition_id == partition.partition_id
            ]
            await self.store.drop_partition(partition.partition_id)
        await self.controller.stop_replicas(buckets, delete=True)
        log.info("dropped partition %s of %s.%s", partition.name, record.database, record.name)

    # ---- metadata

    def _bucket_metadata(self, target: Any, assignments: list[BucketAssignment]) -> None:
        for a in sorted(assignments, key=lambda a: a.bucket_id):
            bucket = target.add(bucket_id=a.bucket_id, replica_id=a.replicas, leader_epoch=a.leader_epoch)
            if a.leader is not None:
                bucket.leader_id = a.leader

    def _table_metadata(self, target: Any, record: TableRecord) -> None:
        meta = target.add(
            table_id=record.table_id,
            schema_id=record.schema_id,
            table_json=with_lake_options(record.table_json, self.lake_options),
            created_time=record.created_time,
            modified_time=record.modified_time,
        )
        meta.table_path.database_name = record.database
        meta.table_path.table_name = record.name
        self._bucket_metadata(
            meta.bucket_metadata,
            [b for b in self.store.list_buckets(record.table_id) if b.partition_id is None],
        )

    def _partition_metadata(self, target: Any, partition: PartitionRecord) -> None:
        meta = target.add(
            table_id=partition.table_id, partition_name=partition.name, partition_id=partition.partition_id
        )
        self._bucket_metadata(
            meta.bucket_metadata,
            [
                b
                for b in self.store.list_buckets(partition.table_id)
                if b.partition_id == partition.partition_id
            ],
        )

    async def metadata(self, request: pb.MetadataRequest, ctx: object) -> pb.MetadataResponse:
        response = pb.MetadataResponse()
        # addresses of the listener the request came through (servers without it are left out)
        listener = ctx.session.listener if isinstance(ctx, RequestContext) else None
        node = self.coordinator_node
        host, port = endpoint_on(listener, node.listeners, (node.host, node.port)) or (node.host, node.port)
        response.coordinator_server.CopyFrom(pb.PbServerNode(node_id=node.node_id, host=host, port=port))
        for server in sorted(self.membership.servers.values(), key=lambda s: s.server_id):
            address = endpoint_on(listener, server.listeners, (server.host, server.port))
            if address is not None:
                entry = response.tablet_servers.add(
                    node_id=server.server_id, host=address[0], port=address[1]
                )
                if server.rack is not None:  # tablet-server.rack, as Fluss reports it
                    entry.rack = server.rack
        for path_message in request.table_path:
            self._table_metadata(response.table_metadata, self._table(table_path_of(path_message)))
        for physical in request.partitions_path:
            path = TablePath(physical.database_name, physical.table_name)
            record = self._table(path)
            partition = self.store.get_partition(record.table_id, physical.partition_name)
            if partition is None:
                raise PartitionNotExistError(
                    f"Partition '{physical.partition_name}' of table '{path}' does not exist."
                )
            self._partition_metadata(response.partition_metadata, partition)
        for partition_id in request.partitions_id:
            partition = self.store.get_partition_by_id(partition_id)
            if partition is None:
                raise PartitionNotExistError(f"Partition with id {partition_id} does not exist.")
            self._partition_metadata(response.partition_metadata, partition)
        return response

    # ---- remote storage credentials: local-directory storage needs none, and an empty token says so

    async def get_security_token(
        self, request: pb.GetFileSystemSecurityTokenRequest, ctx: object
    ) -> pb.GetFileSystemSecurityTokenResponse:
        return pb.GetFileSystemSecurityTokenResponse(schema="file", token=b"")


def _with_table(a: BucketAssignment, table_id: int, partition_id: int | None) -> BucketAssignment:
    return dataclasses.replace(a, table_id=table_id, partition_id=partition_id)
