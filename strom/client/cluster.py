"""What the client knows about the cluster at one moment: servers, tables, partitions, bucket leaders.

A `Cluster` is immutable. Each Metadata reply produces a new one merged into the previous (as in
Fluss's client): the server lists are replaced, table and partition entries in the reply replace
their old entries, and everything else is kept. Readers therefore always see a consistent snapshot,
even while a refresh is under way.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from strom.common.errors import UnknownServerError
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.rpc.api import ServerType
from strom.rpc.gen import fluss_api_pb2 as pb


@dataclass(frozen=True, slots=True)
class ServerNode:
    """A coordinator or tablet server as the Metadata reply describes it."""

    id: int
    host: str
    port: int
    server_type: ServerType
    rack: str | None = None

    @property
    def uid(self) -> str:
        """Fluss's connection name for the node: ``cs-<id>`` or ``ts-<id>``."""
        prefix = "cs" if self.server_type == ServerType.COORDINATOR else "ts"
        return f"{prefix}-{self.id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.address} ({self.uid})"

    @classmethod
    def from_pb(cls, node: pb.PbServerNode, server_type: ServerType) -> ServerNode:
        rack = node.rack if node.HasField("rack") else None
        return cls(node.node_id, node.host, node.port, server_type, rack)


@dataclass(frozen=True, slots=True)
class BucketLocation:
    """Where one bucket lives: its leader (None while it has none) and its replicas."""

    physical_path: PhysicalTablePath
    table_bucket: TableBucket
    leader: int | None
    replicas: tuple[int, ...]
    leader_epoch: int | None = None


@dataclass(frozen=True)
class Cluster:
    coordinator: ServerNode | None = None
    tablet_servers: Mapping[int, ServerNode] = field(default_factory=dict)
    tables: Mapping[TablePath, TableInfo] = field(default_factory=dict)
    # Partition (table path + partition name) -> partition id.
    partitions: Mapping[PhysicalTablePath, int] = field(default_factory=dict)
    # Bucket locations per table (partition_name None) or per partition.
    buckets: Mapping[PhysicalTablePath, tuple[BucketLocation, ...]] = field(default_factory=dict)

    # ------------------------------------------------------------------ indexes

    @cached_property
    def _table_paths_by_id(self) -> dict[int, TablePath]:
        return {info.table_id: path for path, info in self.tables.items()}

    @cached_property
    def _partition_paths_by_id(self) -> dict[int, PhysicalTablePath]:
        return {pid: path for path, pid in self.partitions.items()}

    @cached_property
    def _locations_by_bucket(self) -> dict[TableBucket, BucketLocation]:
        return {loc.table_bucket: loc for locations in self.buckets.values() for loc in locations}

    # ------------------------------------------------------------------ servers

    def server_nodes(self) -> list[ServerNode]:
        """The coordinator (if known) followed by the live tablet servers by id."""
        nodes = [self.coordinator] if self.coordinator is not None else []
        return nodes + [self.tablet_servers[i] for i in sorted(self.tablet_servers)]

    def tablet_server(self, server_id: int) -> ServerNode | None:
        return self.tablet_servers.get(server_id)

    def random_tablet_server(self, exclude: Collection[int] = ()) -> ServerNode | None:
        candidates = [node for i, node in self.tablet_servers.items() if i not in exclude]
        return random.choice(candidates) if candidates else None

    # ------------------------------------------------------------------ tables and partitions

    def table_info(self, path: TablePath) -> TableInfo | None:
        return self.tables.get(path)

    def table_id(self, path: TablePath) -> int | None:
        info = self.tables.get(path)
        return None if info is None else info.table_id

    def table_path(self, table_id: int) -> TablePath | None:
        return self._table_paths_by_id.get(table_id)

    def partition_id(self, path: PhysicalTablePath) -> int | None:
        return self.partitions.get(path)

    def partition_path(self, partition_id: int) -> PhysicalTablePath | None:
        return self._partition_paths_by_id.get(partition_id)

    def partition_name(self, partition_id: int) -> str | None:
        path = self._partition_paths_by_id.get(partition_id)
        return None if path is None else path.partition_name

    def partition_ids(self, table_path: TablePath) -> dict[str, int]:
        """The known partitions of a table: name -> id."""
        return {
            p.partition_name: pid
            for p, pid in self.partitions.items()
            if p.table_path == table_path and p.partition_name is not None
        }

    # ------------------------------------------------------------------ buckets

    def bucket_location(self, bucket: TableBucket) -> BucketLocation | None:
        return self._locations_by_bucket.get(bucket)

    def bucket_locations(self, path: PhysicalTablePath) -> tuple[BucketLocation, ...]:
        return self.buckets.get(path, ())

    def leader_for(self, bucket: TableBucket) -> ServerNode | None:
        """The live tablet server leading `bucket`; None when unknown, leaderless or the leader is gone."""
        location = self._locations_by_bucket.get(bucket)
        if location is None or location.leader is None:
            return None
        return self.tablet_servers.get(location.leader)

    def available_buckets(self, path: PhysicalTablePath) -> list[BucketLocation]:
        """Buckets of a table or partition whose leader is a live tablet server."""
        return [
            loc
            for loc in self.buckets.get(path, ())
            if loc.leader is not None and loc.leader in self.tablet_servers
        ]

    # ------------------------------------------------------------------ new snapshots

    def with_metadata(self, response: pb.MetadataResponse) -> Cluster:
        """This snapshot updated with a Metadata reply."""
        coordinator = (
            ServerNode.from_pb(response.coordinator_server, ServerType.COORDINATOR)
            if response.HasField("coordinator_server")
            else self.coordinator
        )
        servers = {
            s.node_id: ServerNode.from_pb(s, ServerType.TABLET_SERVER) for s in response.tablet_servers
        }
        tables = dict(self.tables)
        partitions = dict(self.partitions)
        buckets = dict(self.buckets)
        for meta in response.table_metadata:
            info = _table_info(meta)
            old = tables.get(info.table_path)
            if old is not None and old.table_id != info.table_id:
                # The table was dropped and created again: nothing of the old one applies.
                _drop_table_entries(info.table_path, partitions, buckets)
            tables[info.table_path] = info
            path = PhysicalTablePath(info.table_path)
            buckets[path] = _locations(path, info.table_id, None, meta.bucket_metadata)
        paths_by_id = {info.table_id: path for path, info in tables.items()}
        for meta in response.partition_metadata:
            table_path = paths_by_id.get(meta.table_id)
            if table_path is None:
                continue  # a partition of a table we do not know; we could not name it
            path = PhysicalTablePath(table_path, meta.partition_name)
            partitions[path] = meta.partition_id
            buckets[path] = _locations(path, meta.table_id, meta.partition_id, meta.bucket_metadata)
        return Cluster(coordinator, servers, tables, partitions, buckets)

    def with_servers_of(self, other: Cluster) -> Cluster:
        """This snapshot's tables with `other`'s coordinator and tablet servers (after a re-bootstrap)."""
        return replace(
            self, coordinator=other.coordinator or self.coordinator, tablet_servers=dict(other.tablet_servers)
        )

    def with_table_info(self, info: TableInfo) -> Cluster:
        """A fresher TableInfo of a cached table (from GetTableInfo); a re-created table is forgotten."""
        old = self.tables.get(info.table_path)
        if old is None:
            return self
        if old.table_id != info.table_id:
            return self.without_table(info.table_path)
        return replace(self, tables={**self.tables, info.table_path: info})

    def without_buckets(self, paths: Iterable[PhysicalTablePath]) -> Cluster:
        """Forget the bucket locations of these tables or partitions (they are looked up again)."""
        drop = set(paths)
        if not drop & self.buckets.keys():
            return self
        return replace(self, buckets={p: b for p, b in self.buckets.items() if p not in drop})

    def without_table(self, table_path: TablePath) -> Cluster:
        """Forget a table entirely, with its partitions."""
        if table_path not in self.tables and not any(p.table_path == table_path for p in self.buckets):
            return self
        tables = {p: i for p, i in self.tables.items() if p != table_path}
        partitions = dict(self.partitions)
        buckets = dict(self.buckets)
        _drop_table_entries(table_path, partitions, buckets)
        return Cluster(self.coordinator, self.tablet_servers, tables, partitions, buckets)

    def without_partition(self, path: PhysicalTablePath) -> Cluster:
        """Forget one partition: its id and its bucket locations."""
        if path not in self.partitions and path not in self.buckets:
            return self
        return replace(
            self,
            partitions={p: i for p, i in self.partitions.items() if p != path},
            buckets={p: b for p, b in self.buckets.items() if p != path},
        )

    def without_server(self, server_id: int) -> Cluster:
        """Treat a tablet server as gone until the next Metadata reply lists it again."""
        if server_id not in self.tablet_servers:
            return self
        return replace(self, tablet_servers={i: n for i, n in self.tablet_servers.items() if i != server_id})


def _table_info(meta: pb.PbTableMetadata) -> TableInfo:
    path = TablePath(meta.table_path.database_name, meta.table_path.table_name)
    try:
        descriptor = TableDescriptor.from_json_bytes(meta.table_json)
        return TableInfo(
            path,
            meta.table_id,
            meta.schema_id,
            descriptor,
            meta.created_time,
            meta.modified_time,
            meta.remote_data_dir if meta.HasField("remote_data_dir") else None,
        )
    except ValueError as e:
        raise UnknownServerError(f"Unreadable metadata of table {path} (id {meta.table_id}): {e}") from e


def _locations(
    path: PhysicalTablePath, table_id: int, partition_id: int | None, bucket_metadata: Iterable[Any]
) -> tuple[BucketLocation, ...]:
    return tuple(
        BucketLocation(
            path,
            TableBucket(table_id, partition_id, b.bucket_id),
            b.leader_id if b.HasField("leader_id") else None,
            tuple(b.replica_id),
            b.leader_epoch if b.HasField("leader_epoch") else None,
        )
        for b in bucket_metadata
    )


def _drop_table_entries(
    table_path: TablePath,
    partitions: dict[PhysicalTablePath, int],
    buckets: dict[PhysicalTablePath, tuple[BucketLocation, ...]],
) -> None:
    for path in [p for p in partitions if p.table_path == table_path]:
        del partitions[path]
    for path in [p for p in buckets if p.table_path == table_path]:
        del buckets[path]
