"""The coordinator's metadata store: the single source of truth for the cluster's metadata.

`MetadataStore` is the interface, with two implementations: `SqliteMetadataStore` (sqlite.py), the
embedded default of a single coordinator (one file under its data directory), and
`ZooKeeperMetadataStore` (zookeeper.py), Fluss's znode layout on ZooKeeper, used when
`zookeeper.address` is set so that several coordinators can stand for election (election.py).
The interface is synchronous, and the coordinator never calls a store's writes from its event loop:
it holds the store through `OrderedStore` (ordered.py), which runs them on a thread of their own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DatabaseRecord:
    name: str
    database_json: bytes
    created_time: int
    modified_time: int


@dataclass(frozen=True, slots=True)
class TableRecord:
    table_id: int
    database: str
    name: str
    schema_id: int
    table_json: bytes
    created_time: int
    modified_time: int


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    partition_id: int
    table_id: int
    name: str
    created_time: int


@dataclass(frozen=True, slots=True)
class BucketAssignment:
    """Replica placement and leadership of one bucket (of a table, or of one of its partitions)."""

    table_id: int
    partition_id: int | None
    bucket_id: int
    replicas: tuple[int, ...]
    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    bucket_epoch: int = 0
    # Eligible leader replicas (Kafka's KIP-966): replicas out of the ISR that still hold every
    # acknowledged record. They joined when the ISR shrank below `log.replica.min-in-sync-replicas-number`
    # (no acks=all write commits after that) and leave when they restart after an unclean shutdown.
    elr: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[int, int | None, int]:
        return (self.table_id, self.partition_id, self.bucket_id)


class MetadataStore(ABC):
    """Durable metadata. Every method is atomic; `transaction()` groups several into one."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]: ...

    @abstractmethod
    def next_id(self, kind: str) -> int:
        """A new id from the named sequence ("table", "partition", "writer"...), never reused."""

    @abstractmethod
    def bump_coordinator_epoch(self) -> int: ...

    # databases
    @abstractmethod
    def create_database(self, record: DatabaseRecord) -> None: ...

    @abstractmethod
    def get_database(self, name: str) -> DatabaseRecord | None: ...

    @abstractmethod
    def list_databases(self) -> list[DatabaseRecord]: ...

    @abstractmethod
    def update_database(self, record: DatabaseRecord) -> None:
        """Replaces the descriptor and modified time of an existing database (AlterDatabase)."""

    @abstractmethod
    def drop_database(self, name: str) -> None: ...

    # tables and schemas
    @abstractmethod
    def create_table(self, record: TableRecord, schema_json: bytes) -> None: ...

    @abstractmethod
    def get_table(self, database: str, name: str) -> TableRecord | None: ...

    @abstractmethod
    def get_table_by_id(self, table_id: int) -> TableRecord | None: ...

    @abstractmethod
    def list_tables(self, database: str | None = None) -> list[TableRecord]: ...

    @abstractmethod
    def update_table(self, record: TableRecord) -> None: ...

    @abstractmethod
    def drop_table(self, table_id: int) -> None:
        """Removes the table with its schemas, partitions and bucket assignments."""

    @abstractmethod
    def add_schema(self, table_id: int, schema_id: int, schema_json: bytes) -> None: ...

    @abstractmethod
    def get_schema(self, table_id: int, schema_id: int) -> bytes | None: ...

    # partitions
    @abstractmethod
    def create_partition(self, record: PartitionRecord) -> None: ...

    @abstractmethod
    def get_partition(self, table_id: int, name: str) -> PartitionRecord | None: ...

    @abstractmethod
    def get_partition_by_id(self, partition_id: int) -> PartitionRecord | None: ...

    @abstractmethod
    def list_partitions(self, table_id: int) -> list[PartitionRecord]: ...

    @abstractmethod
    def drop_partition(self, partition_id: int) -> None:
        """Removes the partition with its bucket assignments."""

    # bucket assignment and leadership
    @abstractmethod
    def put_buckets(self, assignments: list[BucketAssignment]) -> None: ...

    @abstractmethod
    def list_buckets(self, table_id: int | None = None) -> list[BucketAssignment]: ...

    # small documents keyed by a path-like string (kv snapshots, lake snapshots, manifests...)
    @abstractmethod
    def put_document(self, key: str, value: bytes) -> None: ...

    @abstractmethod
    def get_document(self, key: str) -> bytes | None: ...

    @abstractmethod
    def list_documents(self, prefix: str) -> list[tuple[str, bytes]]: ...

    @abstractmethod
    def delete_documents(self, prefix: str) -> None: ...

    @abstractmethod
    def close(self) -> None: ...
