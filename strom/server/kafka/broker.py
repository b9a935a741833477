"""What a tablet server answers to Kafka requests.

Each handler takes the decoded kio request and returns the response as a dict (see
`messages.build`). Writes and reads go through the tablet server's own `LogService`, in process, so a
Kafka produce is checked, replicated and acknowledged exactly as a Fluss one (acks, ISR, high
watermark, long-poll fetches); metadata and topic changes go to the coordinator.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from strom.common import config as options
from strom.common.config import LogFormat
from strom.common.errors import (
    CorruptRecordError,
    DatabaseNotExistError,
    FlussError,
    InvalidConfigError,
    InvalidTableError,
    NotLeaderOrFollowerError,
    TableNotExistError,
    UnknownWriterIdError,
)
from strom.common.table_descriptor import TableDescriptor
from strom.rpc.api import ApiKey as FlussApi
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext, Session
from strom.security.acl import OperationType
from strom.security.layer import SecurityLayer
from strom.server.kafka import errors as kafka
from strom.server.kafka.access import KafkaAccess
from strom.server.kafka.groups import GroupCoordinator, GroupError
from strom.server.kafka.messages import ApiKey
from strom.server.kafka.offsets import OFFSETS_BUCKETS, OFFSETS_TOPIC, OffsetsStore, offsets_bucket
from strom.server.kafka.records import (
    TOPIC_SCHEMA,
    ProducerBatch,
    UnsupportedBatch,
    decode_producer_batch,
    is_topic_schema,
    split_batches,
    to_fluss_batch,
    to_kafka_batches,
)
from strom.server.tablet.log.writer_state import KAFKA_WRITER_BIT, is_kafka_writer
from strom.server.tablet.log_service import OFFSET_EARLIEST, OFFSET_LATEST, OFFSET_TIMESTAMP, LogService
from strom.server.tablet.remote_log import read_remote_batches
from strom.server.tablet.replica_manager import Replica, ReplicaManager

log = logging.getLogger(__name__)

# API key -> (min, max) version served; each is a version kio has a data type for.
SERVED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 9),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 5),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    # answered by the listener; v0 of the handshake (raw tokens outside Kafka's framing) is not served
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
_GROUP_KEY = 0  # FindCoordinator key type of a consumer group (1 is a transactional id)
_NO_TRANSACTIONS = "Strom does not support Kafka transactions: drop transactional.id (idempotence works)"
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
_DEFAULT_CONFIG = 5  # Kafka's ConfigSource.DEFAULT_CONFIG
_TOPIC_CONFIG = 1  # ConfigSource.DYNAMIC_TOPIC_CONFIG
_STATIC_BROKER_CONFIG = 4

CLUSTER_ID = "strom"
_READ, _WRITE, _DROP, _DESCRIBE = (
    OperationType.READ,
    OperationType.WRITE,
    OperationType.DROP,
    OperationType.DESCRIBE,
)
_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1


@dataclass
class BrokerContext:
    """What the handlers need from the tablet server that hosts them."""

    server_id: int
    database: str
    replicas: ReplicaManager
    log_service: LogService
    # a request to the active coordinator; raises FlussError on an error answer
    coordinator: Callable[[FlussApi, Message], Awaitable[Any]]
    # every live tablet server's Kafka address: node id -> (host, port)
    brokers: Callable[[], dict[int, tuple[str, int]]]
    # the server's security layer: its authorizer decides the ACLs of Kafka requests (access.py)
    security: SecurityLayer | None = None


class Broker:
    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.handlers: dict[int, Callable[[Any, int, Session], Awaitable[dict[str, Any] | None]]] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
        }
        self.access = KafkaAccess(context.security, context.database)
        self.groups = GroupCoordinator()
        self.offsets = OffsetsStore(context.log_service, lambda: _context(Session(peer="kafka-groups")))
        self._replica_index: dict[tuple[str, int], Replica] = {}  # (topic, partition) -> replica
        self._topic_tables: set[tuple[int, int]] = set()  # (table id, schema id) with the topic schema
        self._loaded: dict[str, int] = {}  # group id -> the offsets bucket's leader epoch it was read in

    # ---- ApiVersions

    async def api_versions(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        return api_versions_response(kafka.NONE)

    # ---- Metadata

    async def metadata(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        asked = None if request.topics is None else [t.name for t in request.topics]
        if version == 0 and asked == []:
            asked = None  # v0 has no null: an empty list means every topic
        existing = await self._topic_names()
        # the offsets topic is internal: listed only when asked for by name; a listing shows only the
        # topics the caller may describe, a topic asked for by name is refused whether or not it exists
        if asked is None:
            names = self.access.describable(session, [n for n in existing if n != OFFSETS_TOPIC])
            denied: set[str] = set()
        else:
            names = asked
            denied = {n for n in names if not self.access.topic(session, _DESCRIBE, n)}
        found = [n for n in names if n in existing and n not in denied]
        tables = await self._table_metadata(found)
        brokers = self.context.brokers()
        topics: list[dict[str, Any]] = []
        for name in names:
            table = tables.get(name)
            if name in denied:
                topics.append(
                    {"error_code": kafka.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []}
                )
                continue
            if table is None:
                topics.append(
                    {"error_code": kafka.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
                )
                continue
            partitions = []
            for bucket in sorted(table.bucket_metadata, key=lambda b: b.bucket_id):
                leader = bucket.leader_id if bucket.HasField("leader_id") else -1
                replicas = list(bucket.replica_id)
                partitions.append(
                    {
                        "error_code": kafka.NONE if leader in brokers else kafka.LEADER_NOT_AVAILABLE,
                        "partition_index": bucket.bucket_id,
                        "leader_id": leader if leader in brokers else -1,
                        "leader_epoch": bucket.leader_epoch if bucket.HasField("leader_epoch") else -1,
                        "replica_nodes": replicas,
                        # Fluss's Metadata carries no ISR; the live replicas stand in for it
                        "isr_nodes": [r for r in replicas if r in brokers],
                        "offline_replicas": [r for r in replicas if r not in brokers],
                    }
                )
            topics.append(
                {
                    "error_code": kafka.NONE,
                    "name": name,
                    "is_internal": name == OFFSETS_TOPIC,
                    "partitions": partitions,
                }
            )
        return {
            "throttle_time": 0,
            "brokers": [{"node_id": n, "host": h, "port": p} for n, (h, p) in sorted(brokers.items())],
            "cluster_id": CLUSTER_ID,
            # CreateTopics goes to the controller; any tablet server passes it to the coordinator
            "controller_id": self.context.server_id,
            "topics": topics,
        }

    async def _topic_names(self) -> list[str]:
        try:
            listed = await self.context.coordinator(
                FlussApi.LIST_TABLES, pb.ListTablesRequest(database_name=self.context.database)
            )
        except DatabaseNotExistError:
            return []
        return list(listed.table_name)

    async def _table_metadata(self, names: list[str]) -> dict[str, pb.PbTableMetadata]:
        """Metadata of the tables among `names` that have the topic schema (others are not topics)."""
        if not names:
            return {}
        request = pb.MetadataRequest()
        for name in names:
            request.table_path.add(database_name=self.context.database, table_name=name)
        response = await self.context.coordinator(FlussApi.GET_METADATA, request)
        tables = {}
        for table in response.table_metadata:
            descriptor = TableDescriptor.from_json_bytes(table.table_json)
            if is_topic_schema(descriptor.schema) and _is_plain_log(descriptor):
                tables[table.table_path.table_name] = table
        return tables

    # ---- Produce

    async def produce(self, request: Any, version: int, session: Session) -> dict[str, Any] | None:
        if any(t.name == OFFSETS_TOPIC for t in request.topic_data):
            return _produce_error(request, kafka.INVALID_TOPIC_EXCEPTION, f"{OFFSETS_TOPIC} is internal")
        if request.transactional_id is not None:
            return _produce_error(
                request, kafka.UNSUPPORTED_FOR_MESSAGE_FORMAT, "transactions are not supported"
            )
        acks = int(request.acks)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        responses = []
        for topic in request.topic_data:
            results: dict[int, dict[str, Any]] = {}
            fluss = pb.ProduceLogRequest(acks=acks, timeout_ms=timeout_ms, table_id=-1)
            allowed = self.access.topic(session, _WRITE, topic.name)
            for partition in topic.partition_data:
                index = int(partition.index)
                if not allowed:
                    results[index] = _partition_error(
                        index, kafka.TOPIC_AUTHORIZATION_FAILED, f"no WRITE permission on topic {topic.name}"
                    )
                    continue
                try:
                    replica = self._leader(topic.name, index)
                    fluss.table_id = replica.bucket.table_id
                    data = b"".join(
                        to_fluss_batch(
                            _idempotent(decode_producer_batch(batch, replica.arrow_schema())),
                            replica.table_info.schema_id,
                        )
                        for batch in split_batches(partition.records or b"")
                    )
                except UnsupportedBatch as e:
                    results[index] = _partition_error(index, kafka.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(e))
                    continue
                except FlussError as e:
                    if isinstance(e, CorruptRecordError):
                        log.warning("refused a Kafka batch for %s-%d: %s", topic.name, index, e.message)
                    results[index] = _partition_error(index, kafka.kafka_code(e), e.message)
                    continue
                fluss.buckets_req.add(bucket_id=index, records=data)
            if fluss.buckets_req:
                answer = await self.context.log_service.produce_log(fluss, _context(session))
                for bucket in answer.buckets_resp:
                    code = kafka.kafka_code_of(bucket.error_code) if bucket.HasField("error_code") else 0
                    results[bucket.bucket_id] = {
                        "index": bucket.bucket_id,
                        "error_code": code,
                        "base_offset": bucket.base_offset if code == kafka.NONE else -1,
                        "record_errors": [],
                        "error_message": bucket.error_message if code != kafka.NONE else None,
                    }
            responses.append(
                {
                    "name": topic.name,
                    "partition_responses": [results[int(p.index)] for p in topic.partition_data],
                }
            )
        if acks == 0:
            return None  # Kafka answers no acks=0 produce
        return {"responses": responses, "throttle_time": 0}

    def _leader(self, topic: str, partition: int) -> Replica:
        """The replica this server leads for a topic partition, or the Fluss error to answer."""
        hosted = self.context.replicas.replicas
        replica = self._replica_index.get((topic, partition))
        if replica is None or hosted.get(replica.bucket) is not replica:
            # not seen yet, or the replica was replaced or stopped: look again (once, not per request)
            replica = next(
                (
                    r
                    for r in hosted.values()
                    if r.database == self.context.database
                    and r.table == topic
                    and r.bucket.bucket == partition
                    and r.bucket.partition_id is None
                ),
                None,
            )
            if replica is None:
                self._replica_index.pop((topic, partition), None)
                raise NotLeaderOrFollowerError(
                    f"server {self.context.server_id} holds no replica of {topic}-{partition}"
                )
            self._replica_index[(topic, partition)] = replica
        shape = (replica.bucket.table_id, replica.table_info.schema_id)
        if shape not in self._topic_tables:
            if not is_topic_schema(replica.table_info.schema) or not _is_plain_log_info(replica):
                raise InvalidConfigError(f"table {self.context.database}.{topic} is not a Kafka topic")
            self._topic_tables.add(shape)
        return self.context.replicas.leader_replica(replica.bucket)

    # ---- Fetch

    async def fetch(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        fluss = pb.FetchLogRequest(
            follower_server_id=-1,
            max_bytes=max(int(request.max_bytes), 1),
            max_wait_ms=int(request.max_wait.total_seconds() * 1000),
            min_bytes=int(request.min_bytes),
        )
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        # (table idx, bucket idx) -> topic, partition, its replica, fetch offset, partition max bytes
        asked: dict[tuple[int, int], tuple[str, int, Replica, int, int]] = {}
        tables: dict[int, Any] = {}
        for topic in request.topics:
            allowed = self.access.topic(session, _READ, topic.topic)
            for partition in topic.partitions:
                index = int(partition.partition)
                if not allowed:
                    answers[(topic.topic, index)] = _fetch_error(index, kafka.TOPIC_AUTHORIZATION_FAILED)
                    continue
                try:
                    replica = self._leader(topic.topic, index)
                except FlussError as e:
                    answers[(topic.topic, index)] = _fetch_error(index, kafka.kafka_code(e))
                    continue
                table_id = replica.bucket.table_id
                if table_id not in tables:
                    tables[table_id] = (
                        len(tables),
                        fluss.tables_req.add(table_id=table_id, projection_pushdown_enabled=False),
                    )
                t, table_req = tables[table_id]
                asked[(t, len(table_req.buckets_req))] = (
                    topic.topic,
                    index,
                    replica,
                    int(partition.fetch_offset),
                    int(partition.partition_max_bytes),
                )
                table_req.buckets_req.add(
                    bucket_id=index,
                    fetch_offset=int(partition.fetch_offset),
                    max_fetch_bytes=int(partition.partition_max_bytes),
                )
        if asked:
            encoded = await self.context.log_service.fetch_log(fluss, _context(session))
            answer = pb.FetchLogResponse.FromString(b"".join(bytes(c) for c in encoded.chunks))
            for t, table in enumerate(answer.tables_resp):
                for b, bucket in enumerate(table.buckets_resp):
                    name, index, replica, offset, max_bytes = asked[(t, b)]
                    if bucket.HasField("remote_log_fetch_info") and not bucket.error_code:
                        answers[(name, index)] = await self._fetched_remote(
                            index, bucket, replica, offset, max_bytes
                        )
                    else:
                        answers[(name, index)] = self._fetched(index, bucket, replica)
        return {
            "throttle_time": 0,
            "error_code": kafka.NONE,
            "session_id": 0,  # no fetch sessions: every fetch is a full one
            "responses": [
                {
                    "topic": topic.topic,
                    "partitions": [answers[(topic.topic, int(p.partition))] for p in topic.partitions],
                }
                for topic in request.topics
            ],
        }

    async def _fetched_remote(
        self, index: int, bucket: pb.PbFetchLogRespForBucket, replica: Replica, offset: int, max_bytes: int
    ) -> dict[str, Any]:
        """A fetch below the local log start. A Fluss client is told where the tiered segments are and
        downloads them itself; a Kafka client knows nothing of remote storage, so the server reads the
        batches from the segment holding the offset (in a thread: it is file or object-store I/O) and
        answers with them as with local ones."""
        remote = replica.remote
        if remote is None:  # the remote log went away since the read (the replica was stopped)
            return _fetch_error(index, kafka.NOT_LEADER_OR_FOLLOWER, bucket)
        try:
            stored = await asyncio.get_running_loop().run_in_executor(
                None, read_remote_batches, remote, offset, max(max_bytes, 1)
            )
        except OSError as e:
            log.warning("Kafka fetch of %s-%d at %d: reading remote storage failed: %s",
                        replica.table, index, offset, e)  # fmt: skip
            return _fetch_error(index, kafka.KAFKA_STORAGE_ERROR, bucket)
        if not stored:  # the segment expired meanwhile: the offset is no longer in the log, as Kafka says
            return _fetch_error(index, kafka.OFFSET_OUT_OF_RANGE, bucket)
        return self._answer_records(index, bucket, replica, stored)

    def _fetched(self, index: int, bucket: pb.PbFetchLogRespForBucket, replica: Replica) -> dict[str, Any]:
        if bucket.HasField("error_code") and bucket.error_code:
            return _fetch_error(index, kafka.kafka_code_of(bucket.error_code), bucket)
        return self._answer_records(index, bucket, replica, bucket.records)

    def _answer_records(
        self, index: int, bucket: pb.PbFetchLogRespForBucket, replica: Replica, stored: bytes
    ) -> dict[str, Any]:
        records = to_kafka_batches(stored, replica.arrow_schema()) if stored else b""
        return {
            "partition_index": index,
            "error_code": kafka.NONE,
            "high_watermark": bucket.high_watermark,
            "last_stable_offset": bucket.high_watermark,
            "log_start_offset": bucket.log_start_offset,
            "aborted_transactions": [],
            "records": records,
        }

    # ---- ListOffsets

    async def list_offsets(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        topics = []
        for topic in request.topics:
            partitions = []
            allowed = self.access.topic(session, _DESCRIBE, topic.name)
            for partition in topic.partitions:
                index = int(partition.partition_index)
                timestamp = int(partition.timestamp)
                entry: dict[str, Any] = {"partition_index": index, "error_code": kafka.NONE}
                if not allowed:
                    partitions.append({**entry, "error_code": kafka.TOPIC_AUTHORIZATION_FAILED})
                    continue
                try:
                    replica = self._leader(topic.name, index)
                    fluss = pb.ListOffsetsRequest(
                        follower_server_id=-1, table_id=replica.bucket.table_id, bucket_id=[index]
                    )
                    if timestamp == _EARLIEST_TIMESTAMP:
                        fluss.offset_type = OFFSET_EARLIEST
                    elif timestamp == _LATEST_TIMESTAMP:
                        fluss.offset_type = OFFSET_LATEST
                    elif timestamp >= 0:
                        fluss.offset_type = OFFSET_TIMESTAMP
                        fluss.startTimestamp = timestamp
                    else:
                        entry["error_code"] = kafka.INVALID_REQUEST  # -3 (max timestamp) and others
                        partitions.append(entry)
                        continue
                    answer = await self.context.log_service.list_offsets(fluss, _context(session))
                    result = answer.buckets_resp[0]
                    if result.HasField("error_code") and result.error_code:
                        entry["error_code"] = kafka.kafka_code_of(result.error_code)
                    else:
                        entry["offset"] = result.offset
                        entry["timestamp"] = -1
                        entry["leader_epoch"] = replica.leader_epoch
                except FlussError as e:
                    entry["error_code"] = kafka.kafka_code(e)
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    # ---- InitProducerId

    async def init_producer_id(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        if request.transactional_id is not None:  # (a client that skipped FindCoordinator)
            return {
                "throttle_time": 0,
                "error_code": kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_epoch": -1,
            }
        if not self.access.idempotent_write(session):
            return {
                "throttle_time": 0,
                "error_code": kafka.CLUSTER_AUTHORIZATION_FAILED,
                "producer_epoch": -1,
            }
        # Unique without a round trip, as Fluss writer ids are; bit 62 tells the log Kafka's sequence
        # numbering from Fluss's (writer_state.py). Epochs are not used: every producer gets epoch 0,
        # and a producer that asks again (KIP-360) simply gets a new id.
        producer_id = KAFKA_WRITER_BIT | secrets.randbits(61)
        return {"throttle_time": 0, "error_code": kafka.NONE, "producer_id": producer_id, "producer_epoch": 0}

    # ---- DescribeConfigs

    async def describe_configs(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        results = []
        for resource in request.resources:
            result: dict[str, Any] = {
                "error_code": kafka.NONE,
                "error_message": None,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": [],
            }
            try:
                if resource.resource_type == _TOPIC_RESOURCE:
                    if not self.access.topic(session, _DESCRIBE, resource.resource_name):
                        results.append({**result, "error_code": kafka.TOPIC_AUTHORIZATION_FAILED})
                        continue
                    configs = await self._topic_configs(resource.resource_name)
                elif resource.resource_type == _BROKER_RESOURCE:
                    if not self.access.cluster(session, _DESCRIBE):
                        results.append({**result, "error_code": kafka.CLUSTER_AUTHORIZATION_FAILED})
                        continue
                    configs = self._broker_configs()
                else:
                    raise InvalidConfigError(f"resource type {resource.resource_type} has no configs here")
            except FlussError as e:
                result.update(error_code=kafka.kafka_code(e), error_message=e.message)
                results.append(result)
                continue
            wanted = resource.configuration_keys
            result["configs"] = [
                {
                    "name": name,
                    "value": value,
                    "read_only": True,
                    "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [],
                    "documentation": None,
                }
                for name, (value, source) in configs.items()
                if not wanted or name in wanted
            ]
            results.append(result)
        return {"throttle_time": 0, "results": results}

    async def _topic_configs(self, name: str) -> dict[str, tuple[str, int]]:
        """The Kafka settings clients read, from the topic's table (Kafka's names and units)."""
        if name not in await self._topic_names():
            raise _unknown_topic(name)
        tables = await self._table_metadata([name])
        if name not in tables:
            raise _unknown_topic(name)
        properties = TableDescriptor.from_json_bytes(tables[name].table_json).table_config
        ttl = properties.get(options.TABLE_LOG_TTL)
        ttl_source = _TOPIC_CONFIG if options.TABLE_LOG_TTL.key in properties else _DEFAULT_CONFIG
        min_isr = str(self.context.log_service.min_in_sync_replicas)
        return {
            "cleanup.policy": ("delete", _DEFAULT_CONFIG),
            "retention.ms": (str(int(ttl.total_seconds() * 1000)), ttl_source),
            "retention.bytes": ("-1", _DEFAULT_CONFIG),
            "message.timestamp.type": ("CreateTime", _DEFAULT_CONFIG),
            "compression.type": ("producer", _DEFAULT_CONFIG),
            "min.insync.replicas": (min_isr, _STATIC_BROKER_CONFIG),
        }

    def _broker_configs(self) -> dict[str, tuple[str, int]]:
        return {
            "broker.id": (str(self.context.server_id), _STATIC_BROKER_CONFIG),
            "auto.create.topics.enable": ("false", _STATIC_BROKER_CONFIG),
            "min.insync.replicas": (
                str(self.context.log_service.min_in_sync_replicas),
                _STATIC_BROKER_CONFIG,
            ),
        }

    # ---- consumer groups

    async def find_coordinator(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "throttle_time": 0,
            "error_message": None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
        if getattr(request, "key_type", _GROUP_KEY) != _GROUP_KEY:
            # A transactional producer asks for its transaction coordinator first. Clients retry
            # COORDINATOR_NOT_AVAILABLE until their timeout (a hang to the user), but stop at once on
            # TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error in librdkafka and kafka-python
            # (both tested): no transactional id may be used here, since there are no transactions.
            return {
                **answer,
                "error_code": kafka.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "error_message": _NO_TRANSACTIONS,
            }
        if not self.access.group(session, _DESCRIBE, request.key):
            return {**answer, "error_code": kafka.GROUP_AUTHORIZATION_FAILED}
        brokers = self.context.brokers()
        try:
            table = await self._offsets_table(len(brokers))
        except FlussError as e:
            return {**answer, "error_code": kafka.COORDINATOR_NOT_AVAILABLE, "error_message": e.message}
        bucket = offsets_bucket(request.key)
        leader = next(
            (b.leader_id for b in table.bucket_metadata if b.bucket_id == bucket and b.HasField("leader_id")),
            None,
        )
        if leader is None or leader not in brokers:
            return {**answer, "error_code": kafka.COORDINATOR_NOT_AVAILABLE}
        host, port = brokers[leader]
        return {**answer, "error_code": kafka.NONE, "node_id": leader, "host": host, "port": port}

    async def _offsets_table(self, brokers: int) -> pb.PbTableMetadata:
        """The offsets topic's metadata; created on first use, replicated on up to 3 servers."""
        tables = (
            await self._table_metadata([OFFSETS_TOPIC]) if OFFSETS_TOPIC in await self._topic_names() else {}
        )
        if OFFSETS_TOPIC not in tables:
            await self._create_topic(
                OFFSETS_TOPIC, OFFSETS_BUCKETS, max(1, min(3, brokers)), ignore_if_exists=True
            )
            tables = await self._table_metadata([OFFSETS_TOPIC])
        if OFFSETS_TOPIC not in tables:
            raise _unknown_topic(OFFSETS_TOPIC)
        return tables[OFFSETS_TOPIC]

    def _require_group(self, session: Session, operation: OperationType, group_id: str) -> None:
        if not self.access.group(session, operation, group_id):
            raise GroupError(
                kafka.GROUP_AUTHORIZATION_FAILED, f"no {operation.name} permission on group {group_id}"
            )

    async def _coordinate(self, group_id: str) -> Replica:
        """This server's leader replica of the group's offsets bucket, with the group's commits
        loaded; GroupError(NOT_COORDINATOR) when another server leads it."""
        try:
            replica = self._leader(OFFSETS_TOPIC, offsets_bucket(group_id))
        except FlussError as e:
            raise GroupError(kafka.NOT_COORDINATOR, f"group {group_id}: {e.message}") from e
        if self._loaded.get(group_id) != replica.leader_epoch:
            try:
                offsets = await self.offsets.read(replica, group_id)
            except FlussError as e:
                raise GroupError(kafka.COORDINATOR_LOAD_IN_PROGRESS, e.message) from e
            except OSError as e:  # remote storage unreadable: the client retries, the log says why
                log.warning("loading the commits of group %s from remote storage failed: %s", group_id, e)
                raise GroupError(kafka.COORDINATOR_LOAD_IN_PROGRESS, str(e)) from e
            self.groups.load(group_id, offsets)
            self._loaded[group_id] = replica.leader_epoch
        self.groups.expire_sessions()
        return replica

    async def join_group(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        failed: dict[str, Any] = {
            "throttle_time": 0,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": request.member_id,
            "members": [],
        }
        try:
            self._require_group(session, _READ, request.group_id)
            await self._coordinate(request.group_id)
            session_timeout = request.session_timeout.total_seconds()
            rebalance = getattr(request, "rebalance_timeout", request.session_timeout).total_seconds()
            result = await self.groups.join(
                request.group_id,
                request.member_id,
                session.attributes.get("kafka_client_id") or "",
                session.host,
                session_timeout,
                rebalance if rebalance > 0 else session_timeout,
                request.protocol_type,
                [(p.name, p.metadata) for p in request.protocols],
            )
        except GroupError as e:
            return {**failed, "error_code": e.code}
        return {
            "throttle_time": 0,
            "error_code": kafka.NONE,
            "generation_id": result.generation,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name,
            "leader": result.leader,
            "member_id": result.member_id,
            "members": [{"member_id": m, "metadata": data} for m, data in result.members],
        }

    async def sync_group(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        try:
            self._require_group(session, _READ, request.group_id)
            await self._coordinate(request.group_id)
            assignment, group = await self.groups.sync(
                request.group_id,
                int(request.generation_id),
                request.member_id,
                {a.member_id: a.assignment for a in request.assignments},
            )
        except GroupError as e:
            return {"throttle_time": 0, "error_code": e.code, "assignment": b""}
        return {
            "throttle_time": 0,
            "error_code": kafka.NONE,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "assignment": assignment,
        }

    async def heartbeat(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        try:
            self._require_group(session, _READ, request.group_id)
            await self._coordinate(request.group_id)
            self.groups.heartbeat(request.group_id, int(request.generation_id), request.member_id)
        except GroupError as e:
            return {"throttle_time": 0, "error_code": e.code}
        return {"throttle_time": 0, "error_code": kafka.NONE}

    async def leave_group(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        ids = [m.member_id for m in request.members] if hasattr(request, "members") else [request.member_id]
        results = []
        error = kafka.NONE
        for member_id in ids:
            code = kafka.NONE
            try:
                self._require_group(session, _READ, request.group_id)
                await self._coordinate(request.group_id)
                self.groups.leave(request.group_id, member_id)
            except GroupError as e:
                code = error = e.code
            results.append({"member_id": member_id, "group_instance_id": None, "error_code": code})
        return {"throttle_time": 0, "error_code": error, "members": results}

    async def offset_commit(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        generation = int(getattr(request, "generation_id_or_member_epoch", -1))
        code = kafka.NONE
        # Kafka: READ on the group for the request, READ on each topic for its offsets
        unreadable = {t.name for t in request.topics if not self.access.topic(session, _READ, t.name)}
        offsets = {
            (t.name, int(p.partition_index)): (int(p.committed_offset), p.committed_metadata)
            for t in request.topics
            if t.name not in unreadable
            for p in t.partitions
        }
        try:
            self._require_group(session, _READ, request.group_id)
            replica = await self._coordinate(request.group_id)
            self.groups.check_commit(request.group_id, generation, request.member_id)
            if offsets:
                # stored (acks=all) before it is answered: a new coordinator reads it from the log
                await self.offsets.write(replica, request.group_id, offsets)
            self.groups.commit(request.group_id, offsets)
        except GroupError as e:
            code = e.code
        except FlussError as e:
            log.warning("committing offsets of group %s failed: %s", request.group_id, e.message)
            code = kafka.kafka_code(e)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": kafka.TOPIC_AUTHORIZATION_FAILED
                            if t.name in unreadable and code == kafka.NONE
                            else code,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    async def offset_fetch(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        try:
            self._require_group(session, _DESCRIBE, request.group_id)
            await self._coordinate(request.group_id)
        except GroupError as e:
            return {"throttle_time": 0, "topics": [], "error_code": e.code}
        committed = self.groups.committed(request.group_id)
        denied: set[str] = set()
        if request.topics is None:
            # every committed topic the caller may describe; the others are left out, as Kafka does
            asked: dict[str, list[int]] = {}
            visible = set(self.access.describable(session, sorted({name for name, _ in committed})))
            for name, partition in sorted(committed):
                if name in visible:
                    asked.setdefault(name, []).append(partition)
        else:
            asked = {t.name: [int(i) for i in t.partition_indexes] for t in request.topics}
            denied = {n for n in asked if not self.access.topic(session, _DESCRIBE, n)}
        topics = []
        for name, partitions in asked.items():
            entries = []
            for partition in partitions:
                offset, metadata = (-1, "") if name in denied else committed.get((name, partition), (-1, ""))
                entries.append(
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "metadata": metadata,
                        "error_code": kafka.TOPIC_AUTHORIZATION_FAILED if name in denied else kafka.NONE,
                    }
                )
            topics.append({"name": name, "partitions": entries})
        return {"throttle_time": 0, "topics": topics, "error_code": kafka.NONE}

    async def list_groups(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        mine: list[dict[str, Any]] = []
        for group in self.groups.groups.values():
            if not self.access.group(session, _DESCRIBE, group.group_id, quiet=True):
                continue  # Kafka lists only the groups the caller may describe

            try:
                self._leader(OFFSETS_TOPIC, offsets_bucket(group.group_id))
            except FlussError:
                continue  # coordinated elsewhere now
            mine.append({"group_id": group.group_id, "protocol_type": group.protocol_type or ""})
        return {"throttle_time": 0, "error_code": kafka.NONE, "groups": mine}

    async def describe_groups(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        described = []
        for group_id in request.groups:
            entry: dict[str, Any] = {
                "error_code": kafka.NONE,
                "group_id": group_id,
                "group_state": "Dead",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
            try:
                self._require_group(session, _DESCRIBE, group_id)
                await self._coordinate(group_id)
            except GroupError as e:
                described.append({**entry, "error_code": e.code})
                continue
            group = self.groups.groups.get(group_id)
            if group is not None:
                entry.update(
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=group.protocol_name or "",
                    members=[
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": dict(m.protocols).get(group.protocol_name or "", b""),
                            "member_assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                )
            described.append(entry)
        return {"throttle_time": 0, "groups": described}

    # ---- CreateTopics / DeleteTopics

    async def create_topics(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        results = []
        for topic in request.topics:
            result: dict[str, Any] = {"name": topic.name, "error_code": kafka.NONE, "error_message": None}
            try:
                if topic.assignments:
                    raise InvalidConfigError(
                        "manual replica assignments are not supported; give a partition count"
                    )
                if topic.configs:
                    names = ", ".join(c.name for c in topic.configs)
                    raise InvalidConfigError(f"topic configs are not supported (got {names})")
                if topic.name == OFFSETS_TOPIC:
                    raise InvalidTableError(f"{OFFSETS_TOPIC} is the internal topic of committed offsets")
                if not self.access.create_topics(session):
                    results.append(
                        {
                            **result,
                            "error_code": kafka.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": f"no CREATE permission on database {self.context.database}",
                        }
                    )
                    continue
                if not request.validate_only:
                    await self._create_topic(
                        topic.name,
                        int(topic.num_partitions),
                        int(topic.replication_factor),
                        ignore_if_exists=False,
                    )
                result["num_partitions"] = int(topic.num_partitions)
                result["replication_factor"] = int(topic.replication_factor)
            except FlussError as e:
                result.update(error_code=kafka.kafka_code(e), error_message=e.message)
            results.append(result)
        return {"throttle_time": 0, "topics": results}

    async def _create_topic(
        self, name: str, partitions: int, replication: int, *, ignore_if_exists: bool
    ) -> None:
        """A log table of the topic schema (and the database, when it is the first)."""
        properties = {options.TABLE_LOG_FORMAT.key: LogFormat.ARROW.value}
        if replication > 0:
            properties[options.TABLE_REPLICATION_FACTOR.key] = str(replication)
        descriptor = TableDescriptor(
            TOPIC_SCHEMA, bucket_count=partitions if partitions > 0 else None, properties=properties
        )
        await self.context.coordinator(
            FlussApi.CREATE_DATABASE,
            pb.CreateDatabaseRequest(database_name=self.context.database, ignore_if_exists=True),
        )
        await self.context.coordinator(
            FlussApi.CREATE_TABLE,
            pb.CreateTableRequest(
                table_path=pb.PbTablePath(database_name=self.context.database, table_name=name),
                table_json=descriptor.to_json_bytes(),
                ignore_if_exists=ignore_if_exists,
            ),
        )

    async def delete_topics(self, request: Any, version: int, session: Session) -> dict[str, Any]:
        results = []
        for name in request.topic_names:
            result: dict[str, Any] = {"name": name, "error_code": kafka.NONE, "error_message": None}
            try:
                if name == OFFSETS_TOPIC:
                    raise InvalidTableError(f"{OFFSETS_TOPIC} is the internal topic of committed offsets")
                if not self.access.topic(session, _DROP, name):
                    results.append(
                        {
                            **result,
                            "error_code": kafka.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": f"no DROP permission on topic {name}",
                        }
                    )
                    continue
                if name not in await self._topic_names() or not await self._table_metadata([name]):
                    raise _unknown_topic(name)  # tables of other schemas are not topics: not dropped here
                await self.context.coordinator(
                    FlussApi.DROP_TABLE,
                    pb.DropTableRequest(
                        table_path=pb.PbTablePath(database_name=self.context.database, table_name=name),
                        ignore_if_not_exists=False,
                    ),
                )
            except FlussError as e:
                result.update(error_code=kafka.kafka_code(e), error_message=e.message)
            results.append(result)
        return {"throttle_time": 0, "responses": results}


def api_versions_response(error_code: int) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(SERVED_VERSIONS.items())
        ],
        "throttle_time": 0,
    }


def _idempotent(batch: ProducerBatch) -> ProducerBatch:
    """A batch of an idempotent producer must carry an id this listener handed out."""
    if batch.producer_id >= 0 and not is_kafka_writer(batch.producer_id):
        raise UnknownWriterIdError(
            f"producer id {batch.producer_id} was not handed out by InitProducerId here"
        )
    return batch


def _unknown_topic(name: str) -> FlussError:
    return TableNotExistError(f"topic {name} does not exist")


def _is_plain_log(descriptor: TableDescriptor) -> bool:
    """A topic is an unpartitioned ARROW log table."""
    log_format = descriptor.table_config.get(options.TABLE_LOG_FORMAT)
    return not descriptor.has_primary_key and not descriptor.partition_keys and log_format is LogFormat.ARROW


def _is_plain_log_info(replica: Replica) -> bool:
    info = replica.table_info
    return not info.has_primary_key and not info.is_partitioned and info.log_format is LogFormat.ARROW


def _context(session: Session) -> RequestContext:
    return RequestContext(api_version=0, peer=session.peer, session=session)


def _partition_error(index: int, code: int, message: str) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _produce_error(request: Any, code: int, message: str) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    _partition_error(int(p.index), code, message) for p in t.partition_data
                ],
            }
            for t in request.topic_data
        ],
        "throttle_time": 0,
    }


def _fetch_error(index: int, code: int, bucket: pb.PbFetchLogRespForBucket | None = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": bucket.high_watermark
        if bucket is not None and bucket.HasField("high_watermark")
        else -1,
        "log_start_offset": bucket.log_start_offset
        if bucket is not None and bucket.HasField("log_start_offset")
        else -1,
        "aborted_transactions": [],
        "records": None,
    }
