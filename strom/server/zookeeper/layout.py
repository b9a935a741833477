"""Fluss's znode layout and the JSON of each znode (Fluss's `ZkData` and its JSON serdes).

Everything lives under `zookeeper.path.root` (default /fluss):

    /metadata/databases/<db>                            DatabaseRegistration
    /metadata/databases/<db>/tables/<table>             TableRegistration (no schema)
    /metadata/databases/<db>/tables/<table>/schemas/<n> the schema with id n
    /metadata/databases/<db>/tables/<table>/partitions/<name>   PartitionRegistration
    /metadata/table_seqid, partition_seqid, writer_id   sequences (8-byte big-endian counters)
    /coordinators/ids/<id>                              a live coordinator (ephemeral)
    /coordinators/active                                the active coordinator (ephemeral)
    /coordinators/epoch                                 the coordinator epoch, as decimal text
    /tabletservers/ids/<id>                             a live tablet server (ephemeral)
    /tabletservers/tables/<table id>                    TableAssignment: replicas per bucket
    /tabletservers/partitions/<partition id>            PartitionAssignment
    .../buckets/<bucket>/leader_isr                     LeaderAndIsr of one bucket

Strom's own data has no place in Fluss's layout and lives under /strom: `documents/<key>` (the
store's documents: KV snapshot handles, lake snapshots, remote-log manifests, ACLs..., the key
percent-encoded into one znode name) and `sequences/<kind>` for id sequences Fluss does not have.
The JSON is written the way Fluss's Jackson serdes write it, and read leniently like them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from strom.server.store.base import BucketAssignment, DatabaseRecord, PartitionRecord, TableRecord

LISTENER_NAME = "FLUSS"  # Fluss's default internal listener name
NO_LEADER = -1  # Fluss's LeaderAndIsr.NO_LEADER


def dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class ZkPaths:
    root: str = "/fluss"

    def __post_init__(self) -> None:
        root = "/" + self.root.strip("/") if self.root.strip("/") else ""
        object.__setattr__(self, "root", root)

    # /metadata
    @property
    def databases(self) -> str:
        return f"{self.root}/metadata/databases"

    def database(self, name: str) -> str:
        return f"{self.databases}/{name}"

    def tables(self, database: str) -> str:
        return f"{self.database(database)}/tables"

    def table(self, database: str, table: str) -> str:
        return f"{self.tables(database)}/{table}"

    def schemas(self, database: str, table: str) -> str:
        return f"{self.table(database, table)}/schemas"

    def schema(self, database: str, table: str, schema_id: int) -> str:
        return f"{self.schemas(database, table)}/{schema_id}"

    def partitions(self, database: str, table: str) -> str:
        return f"{self.table(database, table)}/partitions"

    def partition(self, database: str, table: str, name: str) -> str:
        return f"{self.partitions(database, table)}/{name}"

    def sequence(self, kind: str) -> str:
        fluss_name = {"table": "table_seqid", "partition": "partition_seqid", "writer": "writer_id"}.get(kind)
        if fluss_name is not None:
            return f"{self.root}/metadata/{fluss_name}"
        return f"{self.root}/strom/sequences/{quote(kind, safe='')}"

    # /coordinators
    @property
    def coordinator_ids(self) -> str:
        return f"{self.root}/coordinators/ids"

    def coordinator_id(self, coordinator_id: str) -> str:
        return f"{self.coordinator_ids}/{coordinator_id}"

    @property
    def coordinator_active(self) -> str:
        return f"{self.root}/coordinators/active"

    @property
    def coordinator_epoch(self) -> str:
        return f"{self.root}/coordinators/epoch"

    # /tabletservers
    @property
    def server_ids(self) -> str:
        return f"{self.root}/tabletservers/ids"

    def server_id(self, server_id: int) -> str:
        return f"{self.server_ids}/{server_id}"

    @property
    def table_assignments(self) -> str:
        return f"{self.root}/tabletservers/tables"

    @property
    def partition_assignments(self) -> str:
        return f"{self.root}/tabletservers/partitions"

    def assignment(self, table_id: int, partition_id: int | None) -> str:
        if partition_id is None:
            return f"{self.table_assignments}/{table_id}"
        return f"{self.partition_assignments}/{partition_id}"

    def bucket(self, table_id: int, partition_id: int | None, bucket: int) -> str:
        return f"{self.assignment(table_id, partition_id)}/buckets/{bucket}"

    def leader_isr(self, table_id: int, partition_id: int | None, bucket: int) -> str:
        return f"{self.bucket(table_id, partition_id, bucket)}/leader_isr"

    # /strom
    @property
    def documents(self) -> str:
        return f"{self.root}/strom/documents"

    def document(self, key: str) -> str:
        return f"{self.documents}/{quote(key, safe='')}"

    @staticmethod
    def document_key(node_name: str) -> str:
        return unquote(node_name)


# ---- endpoints (CoordinatorAddress, TabletServerRegistration)


def listeners(host: str, port: int) -> str:
    return f"{LISTENER_NAME}://{host}:{port}"


def parse_listeners(text: str, internal: str = LISTENER_NAME) -> tuple[str, int]:
    """The internal listener's host and port from "NAME://host:port,..." (else the first one)."""
    endpoints = []
    for item in text.split(","):
        name, _, address = item.strip().partition("://")
        host, _, port_text = address.rpartition(":")
        endpoints.append((name, host.strip("[]"), int(port_text)))
    for name, host, port in endpoints:
        if name == internal:
            return host, port
    return endpoints[0][1], endpoints[0][2]


def coordinator_address(coordinator_id: str, host: str, port: int, advertised: str | None = None) -> bytes:
    """Fluss's CoordinatorAddress: every advertised listener (or the one given by host and port)."""
    return dumps({"version": 2, "id": coordinator_id, "listeners": advertised or listeners(host, port)})


def parse_coordinator_address(data: bytes, internal: str = LISTENER_NAME) -> tuple[str, str, int]:
    """(id, host, port) on the internal listener"""
    obj = json.loads(data)
    if obj.get("version") == 1:
        return str(obj["id"]), obj["host"], int(obj["port"])
    host, port = parse_listeners(obj["listeners"], internal)
    return str(obj["id"]), host, port


def tablet_server_registration(
    host: str,
    port: int,
    rack: str | None,
    register_time_ms: int,
    advertised: str | None = None,
    unclean_start: int | None = None,
) -> bytes:
    obj: dict[str, Any] = {
        "version": 4,
        "listeners": advertised or listeners(host, port),
        "register_timestamp": register_time_ms,
    }
    if rack is not None:
        obj["rack"] = rack
    if unclean_start is not None:
        # Strom-only (Fluss ignores it): this process (by its random id) started after an unclean
        # shutdown, so its replicas are not eligible to lead until back in the ISR (KIP-966)
        obj["strom_unclean_start"] = unclean_start
    return dumps(obj)


def registration_unclean_start(data: bytes) -> int | None:
    """The process id a registration carries when that server started after an unclean shutdown."""
    value = json.loads(data).get("strom_unclean_start")
    return None if value is None else int(value)


def parse_tablet_server_registration(
    data: bytes, internal: str = LISTENER_NAME
) -> tuple[str, int, str | None, str | None]:
    """(host, port, rack, every advertised listener) with host and port on the internal listener"""
    obj = json.loads(data)
    if obj.get("version") == 1:
        return obj["host"], int(obj["port"]), obj.get("rack"), None
    host, port = parse_listeners(obj["listeners"], internal)
    return host, port, obj.get("rack"), obj["listeners"]


# ---- databases and tables


def database_registration(record: DatabaseRecord) -> bytes:
    descriptor = json.loads(record.database_json)
    obj: dict[str, Any] = {"version": 1}
    if descriptor.get("comment") is not None:
        obj["comment"] = descriptor["comment"]
    obj["custom_properties"] = descriptor.get("custom_properties", {})
    obj["created_time"] = record.created_time
    obj["modified_time"] = record.modified_time
    return dumps(obj)


def parse_database_registration(name: str, data: bytes) -> DatabaseRecord:
    obj = json.loads(data)
    descriptor: dict[str, Any] = {"version": 1}
    if obj.get("comment") is not None:
        descriptor["comment"] = obj["comment"]
    descriptor["custom_properties"] = obj.get("custom_properties", {})
    return DatabaseRecord(name, dumps(descriptor), int(obj["created_time"]), int(obj["modified_time"]))


def table_registration(record: TableRecord) -> bytes:
    """Fluss's TableRegistration of a table: its table_json without the schema, plus id and times."""
    descriptor = json.loads(record.table_json)
    obj: dict[str, Any] = {"version": 1, "table_id": record.table_id}
    if descriptor.get("comment") is not None:
        obj["comment"] = descriptor["comment"]
    if descriptor.get("partition_key"):
        obj["partition_key"] = descriptor["partition_key"]
    if descriptor.get("bucket_key"):
        obj["bucket_key"] = descriptor["bucket_key"]
    obj["bucket_count"] = descriptor.get("bucket_count")
    obj["properties"] = descriptor.get("properties", {})
    obj["custom_properties"] = descriptor.get("custom_properties", {})
    obj["created_time"] = record.created_time
    obj["modified_time"] = record.modified_time
    return dumps(obj)


def parse_table_registration(
    database: str, name: str, data: bytes, schema_id: int, schema_json: bytes
) -> TableRecord:
    """The table's record again: the registration with its current schema put back in (as
    TableDescriptor.to_json writes table_json)."""
    obj = json.loads(data)
    descriptor: dict[str, Any] = {"version": 1, "schema": json.loads(schema_json)}
    if obj.get("comment") is not None:
        descriptor["comment"] = obj["comment"]
    descriptor["partition_key"] = obj.get("partition_key", [])
    if obj.get("bucket_count") is not None or obj.get("bucket_key"):  # has a distribution
        descriptor["bucket_key"] = obj.get("bucket_key", [])
    if obj.get("bucket_count") is not None:
        descriptor["bucket_count"] = obj["bucket_count"]
    descriptor["properties"] = obj.get("properties", {})
    descriptor["custom_properties"] = obj.get("custom_properties", {})
    return TableRecord(
        int(obj["table_id"]),
        database,
        name,
        schema_id,
        dumps(descriptor),
        int(obj["created_time"]),
        int(obj["modified_time"]),
    )


def partition_registration(record: PartitionRecord) -> bytes:
    # created_time is Strom's: Fluss keeps none, and its reader skips fields it does not know
    return dumps(
        {
            "version": 1,
            "table_id": record.table_id,
            "partition_id": record.partition_id,
            "created_time": record.created_time,
        }
    )


def parse_partition_registration(name: str, data: bytes, ctime_ms: int) -> PartitionRecord:
    obj = json.loads(data)
    return PartitionRecord(
        int(obj["partition_id"]), int(obj["table_id"]), name, int(obj.get("created_time", ctime_ms))
    )


# ---- bucket assignment and leadership


def assignment(table_id: int, partition_id: int | None, replicas: dict[int, tuple[int, ...]]) -> bytes:
    obj: dict[str, Any] = {"version": 1}
    if partition_id is not None:
        obj["table_id"] = table_id
    obj["buckets"] = {str(b): list(r) for b, r in sorted(replicas.items())}
    return dumps(obj)


def parse_assignment(data: bytes) -> tuple[int | None, dict[int, tuple[int, ...]]]:
    """(the table id of a partition's assignment, else None; replicas per bucket)"""
    obj = json.loads(data)
    table_id = obj.get("table_id")
    replicas = {int(b): tuple(int(r) for r in members) for b, members in obj["buckets"].items()}
    return (None if table_id is None else int(table_id)), replicas


def leader_and_isr(a: BucketAssignment, coordinator_epoch: int) -> bytes:
    return dumps(
        {
            "version": 2,
            "leader": NO_LEADER if a.leader is None else a.leader,
            "leader_epoch": a.leader_epoch,
            "isr": list(a.isr),
            "coordinator_epoch": coordinator_epoch,
            "bucket_epoch": a.bucket_epoch,
            "standby_replicas": [],
            # Strom's eligible leader replicas (KIP-966); Fluss has none and ignores the field
            "eligible_leader_replicas": list(a.elr),
        }
    )


def parse_leader_and_isr(
    table_id: int, partition_id: int | None, bucket: int, replicas: tuple[int, ...], data: bytes
) -> BucketAssignment:
    obj = json.loads(data)
    leader = int(obj["leader"])
    return BucketAssignment(
        table_id,
        partition_id,
        bucket,
        replicas,
        None if leader == NO_LEADER else leader,
        int(obj["leader_epoch"]),
        tuple(int(r) for r in obj["isr"]),
        int(obj.get("bucket_epoch", 0)),
        tuple(int(r) for r in obj.get("eligible_leader_replicas", ())),
    )


# ---- sequences and the coordinator epoch


def encode_counter(value: int) -> bytes:
    """Curator's DistributedAtomicLong: 8 bytes, big-endian (Fluss's ZkSequenceIDCounter)."""
    return value.to_bytes(8, "big", signed=True)


def decode_counter(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True) if len(data) == 8 else 0
