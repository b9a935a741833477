"""A protocol fuzzer for Strom servers: valid requests for every API, mutated, sent as raw frames.

Used by tests/cluster/test_fuzz.py (a bounded, seeded run in `make test`) and bench/fuzz.py (long runs).
Each round sends a pipeline of frames on a fresh connection and reads the answers. What must hold:
every complete frame gets an answer with its request id, no answer is UNKNOWN_SERVER_ERROR (-1), and
the servers stay up. Frames whose length field is below the header size make the server close the
connection (by design); their round is not checked for answers.

Mutations: protobuf fields set to extreme values or cleared; bytes flipped, cut or appended; record
batch header fields forged with a valid CRC; unknown API keys and versions; oversized frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from harness import Cluster, add_client_listener, run_pyfluss

from strom.common.types import BIGINT, STRING
from strom.record.arrow_batch import build_arrow_log_batch
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import build_kv_batch
from strom.record.log_batch import write_crc
from strom.rpc.api import ApiKey, api_spec
from strom.rpc.client import RpcConnection
from strom.rpc.framing import RESPONSE_HEADER, encode_request
from strom.rpc.gen import fluss_api_pb2 as pb

UNKNOWN_SERVER_ERROR = -1
FUZZ_DATABASE = "fuzzdata"
EXTREME_INTS = (0, -1, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 255, 65536)
EXTREME_STRINGS = ("", "../../escape-fuzz", "/tmp/escape-fuzz", "a" * 300, "\u00e9\u0000x", "fluss", ".")
LOG_HEADER_FIELDS = {  # offset, format of forgeable LogRecordBatch header fields (V0/V1)
    "magic": (12, "<b"),
    "schema_id": (25, "<h"),
    "attributes": (27, "<b"),
    "last_offset_delta": (28, "<i"),
    "writer_id": (32, "<q"),
    "batch_sequence": (40, "<i"),
    "record_count": (44, "<i"),
}


@dataclass
class Target:
    """Where templates point: ids of tables the fuzz may write, read or alter."""

    log_table_id: int
    pk_table_id: int
    log_batch: bytes  # a valid batch for the log table
    kv_batch: bytes  # a valid KV batch for the PK table
    scratch_database: str = "fuzz_scratch"
    database: str = FUZZ_DATABASE  # not among the mutation strings, so mutations rarely drop it
    log_table: str = "fuzz_log"
    pk_table: str = "fuzz_pk"


@dataclass
class Findings:
    frames: int = 0
    answered: int = 0
    errors_by_code: dict[int, int] = field(default_factory=dict)
    unknown_server_errors: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    closed_rounds: int = 0

    def merge(self, other: Findings) -> None:
        self.frames += other.frames
        self.answered += other.answered
        for code, n in other.errors_by_code.items():
            self.errors_by_code[code] = self.errors_by_code.get(code, 0) + n
        self.unknown_server_errors += other.unknown_server_errors
        self.unanswered += other.unanswered
        self.closed_rounds += other.closed_rounds


def _path(message: Any, database: str, table: str) -> Any:
    message.database_name = database
    message.table_name = table
    return message


def templates(t: Target) -> dict[ApiKey, Callable[[], Message]]:
    """One valid request per API a client (or a forger) can send."""

    def with_path(message: Any, table: str, database: str = t.database) -> Any:
        _path(message.table_path, database, table)
        return message

    def produce() -> Message:
        request = pb.ProduceLogRequest(acks=1, table_id=t.log_table_id, timeout_ms=5000)
        request.buckets_req.add(bucket_id=0, records=t.log_batch)
        return request

    def put_kv() -> Message:
        request = pb.PutKvRequest(acks=1, table_id=t.pk_table_id, timeout_ms=5000)
        request.buckets_req.add(bucket_id=0, records=t.kv_batch)
        return request

    def fetch() -> Message:
        request = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1 << 16, max_wait_ms=10)
        table = request.tables_req.add(table_id=t.log_table_id, projection_pushdown_enabled=False)
        table.buckets_req.add(bucket_id=0, fetch_offset=0, max_fetch_bytes=1 << 16)
        return request

    def metadata() -> Message:
        request = pb.MetadataRequest()
        _path(request.table_path.add(), t.database, t.log_table)
        return request

    def lookup() -> Message:
        request = pb.LookupRequest(table_id=t.pk_table_id)
        request.buckets_req.add(bucket_id=0, keys=[b"\x01", b"\x02"])
        return request

    def prefix_lookup() -> Message:
        request = pb.PrefixLookupRequest(table_id=t.pk_table_id)
        request.buckets_req.add(bucket_id=0, keys=[b"\x01"])
        return request

    def notify_leader() -> Message:
        request = pb.NotifyLeaderAndIsrRequest(coordinator_epoch=0)
        entry = request.notify_buckets_leader_req.add(
            leader=0, leader_epoch=9, replicas=[0], isr=[0], bucket_epoch=0
        )
        _path(entry.physical_table_path, "../../escape-fuzz", t.log_table)
        entry.table_bucket.table_id = t.log_table_id
        entry.table_bucket.bucket_id = 7
        return request

    def stop_replica() -> Message:
        request = pb.StopReplicaRequest(coordinator_epoch=0)
        entry = request.stop_replicas_req.add(leader_epoch=99, delete=True)
        entry.table_bucket.table_id = t.log_table_id
        entry.table_bucket.bucket_id = 0
        return request

    spec = pb.PbPartitionSpec(partition_key_values=[pb.PbKeyValue(key="p", value="1")])
    return {
        ApiKey.API_VERSIONS: lambda: pb.ApiVersionsRequest(
            client_software_name="fuzz", client_software_version="1"
        ),
        ApiKey.CREATE_DATABASE: lambda: pb.CreateDatabaseRequest(
            database_name=t.scratch_database, ignore_if_exists=True
        ),
        ApiKey.DROP_DATABASE: lambda: pb.DropDatabaseRequest(
            database_name=t.scratch_database, ignore_if_not_exists=True, cascade=True
        ),
        ApiKey.LIST_DATABASES: lambda: pb.ListDatabasesRequest(include_summary=True),
        ApiKey.DATABASE_EXISTS: lambda: pb.DatabaseExistsRequest(database_name=t.database),
        ApiKey.GET_DATABASE_INFO: lambda: pb.GetDatabaseInfoRequest(database_name=t.database),
        ApiKey.CREATE_TABLE: lambda: with_path(
            pb.CreateTableRequest(
                table_json=b'{"version":1,"schema":{"version":1,"columns":[{"name":"a","data_type":'
                b'{"type":"INTEGER"},"id":0}]},"partition_key":[],"bucket_count":1,"properties":{}}',
                ignore_if_exists=True,
            ),
            "t",
            t.scratch_database,
        ),
        ApiKey.DROP_TABLE: lambda: with_path(
            pb.DropTableRequest(ignore_if_not_exists=True), "t", t.scratch_database
        ),
        ApiKey.GET_TABLE_INFO: lambda: with_path(pb.GetTableInfoRequest(), t.log_table),
        ApiKey.LIST_TABLES: lambda: pb.ListTablesRequest(database_name=t.database),
        ApiKey.TABLE_EXISTS: lambda: with_path(pb.TableExistsRequest(), t.log_table),
        ApiKey.GET_TABLE_SCHEMA: lambda: with_path(pb.GetTableSchemaRequest(), t.log_table),
        ApiKey.LIST_PARTITION_INFOS: lambda: with_path(pb.ListPartitionInfosRequest(), t.log_table),
        ApiKey.CREATE_PARTITION: lambda: with_path(
            pb.CreatePartitionRequest(partition_spec=spec, ignore_if_not_exists=True), t.log_table
        ),
        ApiKey.DROP_PARTITION: lambda: with_path(
            pb.DropPartitionRequest(partition_spec=spec, ignore_if_not_exists=True), t.log_table
        ),
        ApiKey.GET_METADATA: metadata,
        ApiKey.PRODUCE_LOG: produce,
        ApiKey.FETCH_LOG: fetch,
        ApiKey.PUT_KV: put_kv,
        ApiKey.LOOKUP: lookup,
        ApiKey.PREFIX_LOOKUP: prefix_lookup,
        ApiKey.LIMIT_SCAN: lambda: pb.LimitScanRequest(table_id=t.pk_table_id, bucket_id=0, limit=10),
        ApiKey.LIST_OFFSETS: lambda: pb.ListOffsetsRequest(
            follower_server_id=-1, offset_type=1, table_id=t.log_table_id, bucket_id=[0]
        ),
        ApiKey.INIT_WRITER: lambda: pb.InitWriterRequest(
            table_path=[pb.PbTablePath(database_name=t.database, table_name=t.log_table)]
        ),
        ApiKey.GET_LATEST_KV_SNAPSHOTS: lambda: with_path(pb.GetLatestKvSnapshotsRequest(), t.pk_table),
        ApiKey.GET_KV_SNAPSHOT_METADATA: lambda: pb.GetKvSnapshotMetadataRequest(
            table_id=t.pk_table_id, bucket_id=0, snapshot_id=0
        ),
        ApiKey.LIST_KV_SNAPSHOTS: lambda: pb.ListKvSnapshotsRequest(table_id=t.pk_table_id),
        ApiKey.LIST_REMOTE_LOG_MANIFESTS: lambda: pb.ListRemoteLogManifestsRequest(table_id=t.log_table_id),
        ApiKey.GET_LAKE_SNAPSHOT: lambda: with_path(pb.GetLakeSnapshotRequest(), t.log_table),
        ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: lambda: pb.GetFileSystemSecurityTokenRequest(),
        ApiKey.LIST_ACLS: lambda: pb.ListAclsRequest(
            acl_filter=pb.PbAclFilter(resource_type=1, operation_type=1, permission_type=1)
        ),
        # Fluss 1.0
        ApiKey.GET_TABLE_STATS: lambda: pb.GetTableStatsRequest(
            table_id=t.pk_table_id, buckets_req=[pb.PbTableStatsReqForBucket(bucket_id=0)]
        ),
        ApiKey.REGISTER_PRODUCER_OFFSETS: lambda: pb.RegisterProducerOffsetsRequest(
            producer_id="fuzz-producer",
            table_offsets=[
                pb.PbProducerTableOffsets(
                    table_id=t.log_table_id, bucket_offsets=[pb.PbBucketOffset(bucket_id=0, log_end_offset=3)]
                )
            ],
            ttl_ms=60_000,
        ),
        ApiKey.GET_PRODUCER_OFFSETS: lambda: pb.GetProducerOffsetsRequest(producer_id="fuzz-producer"),
        ApiKey.DELETE_PRODUCER_OFFSETS: lambda: pb.DeleteProducerOffsetsRequest(producer_id="fuzz-producer"),
        ApiKey.ACQUIRE_KV_SNAPSHOT_LEASE: lambda: pb.AcquireKvSnapshotLeaseRequest(
            lease_id="fuzz-lease",
            lease_duration_ms=60_000,
            snapshots_to_lease=[
                pb.PbKvSnapshotLeaseForTable(
                    table_id=t.pk_table_id,
                    bucket_snapshots=[pb.PbKvSnapshotLeaseForBucket(bucket_id=0, snapshot_id=0)],
                )
            ],
        ),
        ApiKey.RELEASE_KV_SNAPSHOT_LEASE: lambda: pb.ReleaseKvSnapshotLeaseRequest(
            lease_id="fuzz-lease", buckets_to_release=[pb.PbTableBucket(table_id=t.pk_table_id, bucket_id=0)]
        ),
        ApiKey.DROP_KV_SNAPSHOT_LEASE: lambda: pb.DropKvSnapshotLeaseRequest(lease_id="fuzz-lease"),
        ApiKey.DESCRIBE_CLUSTER_CONFIGS: lambda: pb.DescribeClusterConfigsRequest(),
        ApiKey.SCAN_KV: lambda: pb.ScanKvRequest(
            bucket_scan_req=pb.PbScanReqForBucket(table_id=t.pk_table_id, bucket_id=0, limit=5),
            call_seq_id=0,
            batch_size_bytes=1024,
        ),
        ApiKey.GET_CLUSTER_HEALTH: lambda: pb.GetClusterHealthRequest(),
        ApiKey.ALTER_DATABASE: lambda: pb.AlterDatabaseRequest(
            database_name=t.scratch_database,
            ignore_if_not_exists=True,
            config_changes=[pb.PbAlterConfig(config_key="fuzz", config_value="1", op_type=0)],
        ),
        # a key that is not dynamic: refused, whatever the mutations make of the value
        ApiKey.ALTER_CLUSTER_CONFIGS: lambda: pb.AlterClusterConfigsRequest(
            alter_configs=[pb.PbAlterConfig(config_key="table.log.ttl", config_value="1h", op_type=0)]
        ),
        # internal APIs: a client connection must change nothing with them
        ApiKey.NOTIFY_LEADER_AND_ISR: notify_leader,
        ApiKey.STOP_REPLICA: stop_replica,
        ApiKey.UPDATE_METADATA: lambda: pb.UpdateMetadataRequest(coordinator_epoch=0),
        ApiKey.ADJUST_ISR: lambda: pb.AdjustIsrRequest(serverId=0),
        ApiKey.LAKE_TIERING_HEARTBEAT: lambda: pb.LakeTieringHeartbeatRequest(request_table=True),
    }


# ---- mutations


def _mutate_message(rng: random.Random, message: Message, depth: int = 0) -> None:
    fields = message.DESCRIPTOR.fields
    if not fields:
        return
    for _ in range(rng.randint(1, 3)):
        f = rng.choice(fields)
        if f.is_repeated:
            container = getattr(message, f.name)
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if container and depth < 4 and rng.random() < 0.7:
                    _mutate_message(rng, rng.choice(container), depth + 1)
                elif rng.random() < 0.5:
                    del container[:]
                else:
                    container.add()
            else:
                del container[:]
                for _ in range(rng.randint(0, 3)):
                    value = _scalar(rng, f)
                    if value is not None:
                        container.append(value)
            continue
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if rng.random() < 0.3:
                message.ClearField(f.name)
            elif depth < 4:
                _mutate_message(rng, getattr(message, f.name), depth + 1)
            continue
        if rng.random() < 0.2:
            message.ClearField(f.name)
            continue
        value = _scalar(rng, f)
        if value is not None:
            with contextlib.suppress(ValueError, TypeError):
                setattr(message, f.name, value)


def _scalar(rng: random.Random, f: FieldDescriptor) -> Any:
    if f.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if f.type in (FieldDescriptor.TYPE_STRING,):
        return rng.choice(EXTREME_STRINGS)
    if f.type == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice((0, 1, 8, 64, 600)))
    if f.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice((0.0, -1.0, 1e308, float("nan")))
    bits = (
        64
        if f.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64)
        else 32
    )
    value = rng.choice(EXTREME_INTS)
    if f.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32):
        return abs(value) % (1 << bits)
    limit = 1 << (bits - 1)
    return max(-limit, min(limit - 1, value))


def _forge_batch(rng: random.Random, records: bytes) -> bytes:
    buf = bytearray(records)
    if len(buf) < 48:
        return records
    if rng.random() < 0.3:
        for _ in range(rng.randint(1, 8)):  # garbage body, valid CRC
            buf[rng.randrange(48, len(buf))] = rng.randrange(256)
    else:
        name = rng.choice(list(LOG_HEADER_FIELDS))
        offset, fmt = LOG_HEADER_FIELDS[name]
        size = struct.calcsize(fmt)
        bits = size * 8
        struct.pack_into(
            fmt, buf, offset, max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, rng.choice(EXTREME_INTS)))
        )
    write_crc(buf, 0, len(buf))
    return bytes(buf)


def mutated_frame(rng: random.Random, key: ApiKey, message: Message, request_id: int) -> bytes:
    """One request frame: a mutation of `message`, or of its bytes, or of the frame around it."""
    choice = rng.random()
    version = 0
    if key in (ApiKey.PUT_KV,):
        version = 2
    if choice < 0.45:
        _mutate_message(rng, message)
        body = message.SerializePartialToString()
    elif choice < 0.6 and key in (ApiKey.PRODUCE_LOG, ApiKey.PUT_KV):
        entry = message.buckets_req[0]
        entry.records = _forge_batch(rng, entry.records)
        body = message.SerializePartialToString()
    elif choice < 0.85:
        body = bytearray(message.SerializePartialToString())
        for _ in range(rng.randint(1, 6)):
            operation = rng.random()
            if body and operation < 0.5:
                body[rng.randrange(len(body))] = rng.randrange(256)
            elif body and operation < 0.75:
                del body[rng.randrange(len(body)) :]
            else:
                body += rng.randbytes(rng.randint(1, 32))
        body = bytes(body)
    elif choice < 0.93:
        body = message.SerializePartialToString()
        key = rng.choice((0, 999, 1065, 5000, 9003, 32767, -1))  # type: ignore[assignment]
    else:
        body = message.SerializePartialToString()
        version = rng.choice((-1, 1, 3, 200))
    return encode_request(int(key), version, request_id, body)


# ---- a cluster to fuzz (for tests/cluster/test_fuzz.py and bench/fuzz.py)

# short timeouts so the limits show within a test
FUZZ_CLUSTER_CONFIG = {
    "rpc.frame-timeout": "2s",
    "netty.connection.max-idle-time": "3s",
    "rpc.connection.max-pending-requests": "64",
    "log.fetch.max-wait-time": "2s",  # whatever max_wait_ms a mutated fetch asks for
}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class FuzzCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.cluster = Cluster(base / "cluster", tablet_servers=2, config=FUZZ_CLUSTER_CONFIG)
        self.bootstrap = add_client_listener(self.cluster)
        self.cluster.start()
        client_ports = self.cluster.client_ports
        self.coordinator = ("127.0.0.1", client_ports[self.cluster.coordinator.port])
        self.tablets = [("127.0.0.1", client_ports[s.port]) for s in self.cluster.tablet_servers.values()]
        self.processes = [self.cluster.coordinator, *self.cluster.tablet_servers.values()]
        self.memory_before = {p.pid: rss(p.pid) for p in self.processes if p.pid is not None}

    def all_alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)


REFERENCE = [(i, f"kept-{i}") for i in range(200)]


def seed_tables(fc: FuzzCluster) -> None:
    async def body(conn: Any) -> None:
        admin = conn.get_admin()
        await admin.create_database("kept", ignore_if_exists=True)
        await admin.create_database(FUZZ_DATABASE, ignore_if_exists=True)
        schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
        await admin.create_table(
            fluss.TablePath("kept", "reference"),
            fluss.TableDescriptor(
                fluss.Schema(schema), bucket_count=1, properties={"table.replication.factor": "2"}
            ),
        )
        for name, pk in (("fuzz_log", None), ("fuzz_pk", ["id"])):
            descriptor = fluss.TableDescriptor(fluss.Schema(schema, primary_keys=pk), bucket_count=1)
            await admin.create_table(fluss.TablePath(FUZZ_DATABASE, name), descriptor)
        table = await conn.get_table(fluss.TablePath("kept", "reference"))
        writer = table.new_append().create_writer()
        writer.write_arrow(pa.table({"id": [i for i, _ in REFERENCE], "v": [v for _, v in REFERENCE]}))
        await writer.flush()

    run_pyfluss(fc.bootstrap, body)


def read_reference(fc: FuzzCluster) -> list[tuple[int, str]]:
    async def body(conn: Any) -> list[tuple[int, str]]:
        table = await conn.get_table(fluss.TablePath("kept", "reference"))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
        rows: list[tuple[int, str]] = []
        deadline = time.monotonic() + 30
        while len(rows) < len(REFERENCE) and time.monotonic() < deadline:
            got = await scanner.poll_arrow(300)
            rows.extend(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True))
        # Valid requests among the mutations may append to it (a table id is a small integer); what was
        # written before must stay exactly as it was.
        return rows[: len(REFERENCE)]

    return run_pyfluss(fc.bootstrap, body)


def table_ids(fc: FuzzCluster, *paths: tuple[str, str]) -> list[int]:
    async def main() -> list[int]:
        conn = await RpcConnection.connect(*fc.coordinator)
        try:
            ids = []
            for database, name in paths:
                request = pb.GetTableInfoRequest()
                request.table_path.database_name, request.table_path.table_name = database, name
                ids.append((await conn.request(ApiKey.GET_TABLE_INFO, request)).table_id)
            return ids
        finally:
            conn.close()

    return asyncio.run(main())


def fuzz_target(fc: FuzzCluster) -> Target:
    log_id, pk_id = table_ids(fc, (FUZZ_DATABASE, "fuzz_log"), (FUZZ_DATABASE, "fuzz_pk"))
    records = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    row = CompactedRowEncoder([BIGINT().copy(nullable=False), STRING()]).encode((1, "a"))
    key = CompactedKeyEncoder([BIGINT().copy(nullable=False)]).encode([1])
    return Target(
        log_table_id=log_id,
        pk_table_id=pk_id,
        log_batch=build_arrow_log_batch(records, schema_id=1),
        kv_batch=build_kv_batch([(key, row)], schema_id=1),
    )


# ---- sending


async def run_round(
    host: str, port: int, frames: list[tuple[int, str, bytes]], timeout: float = 20.0
) -> Findings:
    """Send `frames` (request id, description, bytes) pipelined on one connection; read the answers."""
    findings = Findings(frames=len(frames))
    reader, writer = await asyncio.open_connection(host, port)
    expected = {request_id: what for request_id, what, _ in frames}
    try:
        writer.write(b"".join(frame for _, _, frame in frames))
        await writer.drain()
        buffer = b""
        deadline = asyncio.get_running_loop().time() + timeout
        while expected:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), remaining)
            except TimeoutError:
                break
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= RESPONSE_HEADER.size:
                length, kind, request_id = RESPONSE_HEADER.unpack_from(buffer, 0)
                if len(buffer) < 4 + length:
                    break
                body = buffer[RESPONSE_HEADER.size : 4 + length]
                buffer = buffer[4 + length :]
                what = expected.pop(request_id, None)
                if what is None:
                    continue
                findings.answered += 1
                if kind == 1:
                    error = pb.ErrorResponse()
                    error.ParseFromString(body)
                    findings.errors_by_code[error.error_code] = (
                        findings.errors_by_code.get(error.error_code, 0) + 1
                    )
                    if error.error_code == UNKNOWN_SERVER_ERROR:
                        findings.unknown_server_errors.append(f"{what}: {error.error_message}")
        findings.unanswered = [what for what in expected.values()]
    finally:
        writer.close()
    return findings


# what tablet servers serve (the rest goes to the coordinator); a tenth of the frames go to the wrong one
TABLET_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.PRODUCE_LOG,
        ApiKey.FETCH_LOG,
        ApiKey.PUT_KV,
        ApiKey.LOOKUP,
        ApiKey.PREFIX_LOOKUP,
        ApiKey.LIMIT_SCAN,
        ApiKey.LIST_OFFSETS,
        ApiKey.GET_TABLE_STATS,
        ApiKey.INIT_WRITER,
        ApiKey.GET_METADATA,
        ApiKey.GET_TABLE_INFO,
        ApiKey.LIST_TABLES,
        ApiKey.GET_FILESYSTEM_SECURITY_TOKEN,
        ApiKey.NOTIFY_LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
    }
)


def frame_batch(
    rng: random.Random, target: Target, count: int, first_id: int, tablet: bool = False
) -> list[tuple[int, str, bytes]]:
    """`count` mutated frames for a tablet server (or the coordinator), ids from `first_id`."""
    catalogue = templates(target)
    served = [k for k in catalogue if (k in TABLET_APIS) == tablet]
    every = list(catalogue)
    frames = []
    for i in range(count):
        key = rng.choice(served if rng.random() < 0.9 else every)
        request_id = first_id + i
        frames.append(
            (request_id, f"{key.name} #{request_id}", mutated_frame(rng, key, catalogue[key](), request_id))
        )
    return frames


def api_of(frame: bytes) -> str:
    key = struct.unpack_from(">h", frame, 4)[0]
    try:
        return api_spec(key).key.name
    except (KeyError, ValueError):
        return f"key {key}"
