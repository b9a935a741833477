"""Kafka clients against `strom local --config kafka.enabled=true`: real Kafka clients (kafka-python,
confluent-kafka's librdkafka) create topics, produce and consume; pyfluss reads what they wrote as a
table; raw requests check what clients do not show (a corrupt batch is refused and nothing is stored,
ListOffsets, the long poll). One cluster for every check: the suite is near its time budget."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import json
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fluss
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import NewTopic
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import CommitFailedError, RebalanceInProgressError, TransactionalIdAuthorizationFailedError
from kafka.structs import OffsetAndMetadata
from kio.index import load_request_schema, load_response_schema
from kio.schema.fetch.v11.request import FetchPartition, FetchTopic
from kio.schema.list_offsets.v4.request import ListOffsetsPartition, ListOffsetsTopic
from kio.schema.metadata.v4.request import MetadataRequestTopic
from kio.schema.produce.v7.request import PartitionProduceData, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i64
from test_strom_local import start_local, stop, wait_ready

from strom.server.launcher import free_port


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("kafka")
    process = start_local(data_dir, free_port(), "--tablet-servers", "3", "--config", "kafka.enabled=true")
    try:
        assert process.stdout is not None
        output = wait_ready(process) + process.stdout.readline()
        cluster = json.loads((data_dir / "cluster.json").read_text())
        assert f"Kafka clients: bootstrap.servers = {cluster['kafka_bootstrap']}" in output
        yield cluster
    finally:
        stop(process)


def _kafka_servers(cluster: dict[str, Any]) -> list[str]:
    servers: list[str] = cluster["kafka_bootstrap"].split(",")
    assert len(servers) == 3
    return servers


class RawKafka:
    """One Kafka connection speaking requests encoded by kio, for what clients do not expose."""

    def __init__(self, address: str, tls: ssl.SSLContext | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.correlation = 0

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        out = io.BytesIO()
        entity_writer(RequestHeader)(
            out,
            RequestHeader(
                request_api_key=i16(api_key),
                request_api_version=i16(version),
                correlation_id=i32(self.correlation),
                client_id="raw",
            ),
        )
        schema = load_request_schema(api_key, version)
        entity_writer(schema)(out, schema(**fields))
        body = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        header, used = entity_reader(ResponseHeader)(frame, 0)
        assert header.correlation_id == self.correlation
        return entity_reader(load_response_schema(api_key, version))(frame, used)[0]

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _leader_address(cluster: dict[str, Any], topic: str, partition: int) -> str:
    """The Kafka address of a partition's leader, from a Metadata answer."""
    raw = RawKafka(_kafka_servers(cluster)[0])
    try:
        answer = raw.request(
            3, 4, topics=(MetadataRequestTopic(name=TopicName(topic)),), allow_auto_topic_creation=False
        )
    finally:
        raw.close()
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}
    (found,) = answer.topics
    leader = next(p.leader_id for p in found.partitions if p.partition_index == partition)
    return brokers[leader]


def test_kafka_clients_produce_and_consume_and_pyfluss_reads_the_topic(local: dict[str, Any]) -> None:
    servers = _kafka_servers(local)
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic("orders", 3, 2)])
        assert "orders" in admin.list_topics()
        with pytest.raises(Exception, match="TopicAlreadyExists"):
            admin.create_topics([NewTopic("orders", 3, 2)])
    finally:
        admin.close()

    # kafka-python: acks=all, gzip, keys, a null value, headers
    producer = KafkaProducer(
        bootstrap_servers=servers, acks="all", compression_type="gzip", enable_idempotence=False
    )
    sent = []
    for i in range(30):
        value = None if i == 7 else b"v%d" % i
        headers = [("source", b"kafka-python"), ("i", str(i).encode())]
        sent.append(producer.send("orders", key=b"k%d" % i, value=value, headers=headers, partition=i % 3))
    producer.flush()
    offsets = [f.get(10).offset for f in sent]
    producer.close()
    assert sorted(offsets[0::3]) == list(range(10))  # partition 0 got offsets 0..9

    # librdkafka: lz4, batches of many records
    rd = Producer({"bootstrap.servers": local["kafka_bootstrap"], "compression.type": "lz4", "linger.ms": 20})
    for i in range(30, 60):
        rd.produce(
            "orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, timestamp=1_700_000_000_000 + i
        )
    assert rd.flush(15) == 0

    consumer = KafkaConsumer(bootstrap_servers=servers, consumer_timeout_ms=3000, enable_auto_commit=False)
    consumer.assign([KafkaTopicPartition("orders", p) for p in range(3)])
    consumer.seek_to_beginning()
    got = {(m.partition, m.offset): m for m in consumer}
    consumer.close()
    assert len(got) == 60
    first = got[(1, 0)]
    assert (first.key, first.value, first.headers) == (
        b"k1",
        b"v1",
        [("source", b"kafka-python"), ("i", b"1")],
    )
    assert got[(1, 2)].value is None  # record 7
    assert {m.key for m in got.values()} == {b"k%d" % i for i in range(60)}
    assert got[(0, 19)].timestamp == 1_700_000_000_057  # the last librdkafka record of partition 0

    rc = Consumer(
        {"bootstrap.servers": local["kafka_bootstrap"], "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        assert rc.get_watermark_offsets(TopicPartition("orders", 0), timeout=10) == (0, 20)
        rc.assign([TopicPartition("orders", 2, 15)])
        messages: list[Any] = []
        deadline = time.monotonic() + 15
        while len(messages) < 5 and time.monotonic() < deadline:
            m = rc.poll(1)
            if m is not None and not m.error():
                messages.append(m)
        assert [m.offset() for m in messages] == [15, 16, 17, 18, 19]
    finally:
        rc.close()

    # pyfluss reads the topic as a table: the same records, offsets and all
    async def read() -> Any:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": local["bootstrap"]})
        )
        table = await connection.get_table(fluss.TablePath("kafka", "orders"))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(3)})
        return await asyncio.wait_for(scanner.to_arrow(), 30)

    rows = asyncio.run(read()).to_pylist()
    assert len(rows) == 60
    by_key = {r["key"]: r for r in rows}
    assert by_key[b"k4"]["value"] == b"v4"
    assert by_key[b"k4"]["headers"] == [
        {"key": "source", "value": b"kafka-python"},
        {"key": "i", "value": b"4"},
    ]
    assert by_key[b"k7"]["value"] is None
    assert int(by_key[b"k40"]["timestamp"].timestamp() * 1000) == 1_700_000_000_040


def test_aiokafka_produces_idempotently_and_a_group_consumes_and_commits(local: dict[str, Any]) -> None:
    """aiokafka, the asyncio client: an idempotent acks=all producer, then a consumer group member
    that reads from the earliest offset and commits; a later member of the group starts after it."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    servers = _kafka_servers(local)
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic("aio", 2, 2)])
    finally:
        admin.close()

    async def produce() -> list[tuple[int, int]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=servers, acks="all", enable_idempotence=True, compression_type="gzip"
        )
        await producer.start()
        try:
            sent = [
                await producer.send_and_wait(
                    "aio", b"v%d" % i, key=b"k%d" % i, partition=i % 2, headers=[("n", str(i).encode())]
                )
                for i in range(20)
            ]
        finally:
            await producer.stop()
        return [(m.partition, m.offset) for m in sent]

    async def consume(expected: int) -> list[Any]:
        consumer = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=servers,
            group_id="aio-readers",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            got: list[Any] = []
            deadline = time.monotonic() + 20
            while len(got) < expected and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(records)
            await consumer.commit()
            if expected == 0:  # nothing may come after the committed offsets
                got.extend(r for rs in (await consumer.getmany(timeout_ms=1000)).values() for r in rs)
        finally:
            await consumer.stop()
        return got

    positions = asyncio.run(produce())
    assert sorted(positions) == sorted((p, o) for p in range(2) for o in range(10))
    records = asyncio.run(consume(20))
    assert sorted((r.key, r.value) for r in records) == sorted((b"k%d" % i, b"v%d" % i) for i in range(20))
    assert {r.headers for r in records if r.key == b"k3"} == {(("n", b"3"),)}
    assert asyncio.run(consume(0)) == []


def _kcat() -> str:
    """kcat's path (Debian's package; older releases call it kafkacat). `make test` installs it
    (scripts/install_kcat.sh): under CI a missing kcat fails the test, naming what is missing."""
    found = shutil.which("kcat") or shutil.which("kafkacat")
    if found is None:
        message = "kcat is missing: `make test` installs Debian's kcat (scripts/install_kcat.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_kcat_produces_and_consumes_and_pyfluss_reads_what_it_wrote(local: dict[str, Any]) -> None:
    kcat = _kcat()
    servers = local["kafka_bootstrap"]
    admin = KafkaAdminClient(bootstrap_servers=_kafka_servers(local), request_timeout_ms=15000)
    admin.create_topics([NewTopic("kcat", 2, 1)])
    admin.close()

    def run(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            [kcat, "-b", servers, *args], input=stdin, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert 'topic "kcat" with 2 partitions' in run("-L", "-t", "kcat")
    # keys split off at ':', two headers on every record; partition 1 snappy-compressed
    for partition, codec in ((0, "none"), (1, "snappy")):
        lines = "".join(f"k{partition}{i}:v{partition}{i}\n" for i in range(5))
        run("-P", "-t", "kcat", "-p", str(partition), "-z", codec, "-K", ":",
            "-H", "source=kcat", "-H", f"p={partition}", stdin=lines)  # fmt: skip
    out = run("-C", "-t", "kcat", "-o", "beginning", "-e", "-q", "-f", "%p|%o|%k|%s|%h\n")
    consumed = sorted(tuple(line.split("|")) for line in out.splitlines())
    assert consumed == sorted(
        (str(p), str(i), f"k{p}{i}", f"v{p}{i}", f"source=kcat,p={p}") for p in range(2) for i in range(5)
    )

    async def read() -> Any:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": local["bootstrap"]})
        )
        table = await connection.get_table(fluss.TablePath("kafka", "kcat"))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(2)})
        return await asyncio.wait_for(scanner.to_arrow(), 30)

    rows = asyncio.run(read()).to_pylist()
    assert sorted((r["key"], r["value"], tuple(h["value"] for h in r["headers"])) for r in rows) == sorted(
        (f"k{p}{i}".encode(), f"v{p}{i}".encode(), (b"kcat", str(p).encode()))
        for p in range(2)
        for i in range(5)
    )
    assert all([h["key"] for h in r["headers"]] == ["source", "p"] for r in rows)


def test_a_transactional_producer_fails_at_once_with_a_clear_error(local: dict[str, Any]) -> None:
    """No transactions: the transaction coordinator is refused with a fatal error, not left unavailable
    (which clients retry until their timeout)."""
    producer = Producer({"bootstrap.servers": local["kafka_bootstrap"], "transactional.id": "t"})
    started = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    error = refused.value.args[0]
    assert error.fatal() and error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert "does not support Kafka transactions" in error.str()
    assert time.monotonic() - started < 10
    kafka_python = KafkaProducer(bootstrap_servers=_kafka_servers(local), transactional_id="t2")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            kafka_python.init_transactions()
    finally:
        kafka_python.close(0)


def test_corrupt_batches_are_refused_and_nothing_is_stored(local: dict[str, Any]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=_kafka_servers(local), request_timeout_ms=15000)
    admin.create_topics([NewTopic("raw", 1, 1)])
    admin.close()
    raw = RawKafka(_leader_address(local, "raw", 0))
    try:

        def produce(records: bytes) -> Any:
            data = (
                TopicProduceData(
                    name=TopicName("raw"),
                    partition_data=(PartitionProduceData(index=i32(0), records=Records(records)),),
                ),
            )
            answer = raw.request(0, 7, acks=i16(-1), timeout=_ms(5000), topic_data=data)
            return answer.responses[0].partition_responses[0]

        good = _batch([b"a", b"b"])
        bad = bytearray(good)
        bad[-1] ^= 0xFF  # the last value byte: the CRC no longer matches
        refused = produce(bytes(bad))
        assert refused.error_code.value == 2  # CORRUPT_MESSAGE
        truncated = produce(good[:-3])
        assert truncated.error_code.value == 2
        accepted = produce(good)
        assert (accepted.error_code.value, accepted.base_offset) == (0, 0)  # nothing before it was stored

        def list_offset(timestamp: int) -> int:
            topics = (
                ListOffsetsTopic(
                    name=TopicName("raw"),
                    partitions=(ListOffsetsPartition(partition_index=i32(0), timestamp=i64(timestamp)),),
                ),
            )
            answer = raw.request(2, 4, replica_id=i32(-1), isolation_level=0, topics=topics)
            result = answer.topics[0].partitions[0]
            assert result.error_code.value == 0
            return int(result.offset)

        assert (list_offset(-2), list_offset(-1)) == (0, 2)
        assert list_offset(int(time.time() * 1000) + 60_000) == 2  # after every record: the log end

        # Fetch at the log end long-polls for max_wait, then answers empty
        topics = (
            FetchTopic(
                topic=TopicName("raw"),
                partitions=(
                    FetchPartition(partition=i32(0), fetch_offset=i64(2), partition_max_bytes=i32(1 << 20)),
                ),
            ),
        )
        started = time.monotonic()
        answer = raw.request(
            1, 11, max_wait=_ms(600), min_bytes=i32(1), topics=topics, forgotten_topics_data=()
        )
        assert time.monotonic() - started >= 0.5
        assert not answer.responses[0].partitions[0].records
    finally:
        raw.close()


def test_undecodable_frames_close_the_connection_and_the_server_goes_on(local: dict[str, Any]) -> None:
    address = _kafka_servers(local)[0]
    for frame in (
        struct.pack(">hhi", 0, 7, 1) + b"\x00\x03raw\xff\xff",  # Produce v7 cut short after the header
        struct.pack(">hhi", 0, 99, 2) + b"\x00\x03raw",  # a version not served
        struct.pack(">hhi", 77, 0, 3) + b"\x00\x03raw",  # an API not served
    ):
        raw = RawKafka(address)
        try:
            raw.sock.sendall(struct.pack(">i", len(frame)) + frame)
            assert raw.sock.recv(16) == b""  # closed, as a broker does
        finally:
            raw.close()
    raw = RawKafka(address)
    try:  # ApiVersions of a version not served: answered in v0 with UNSUPPORTED_VERSION and the list
        frame = struct.pack(">hhi", 18, 9, 5) + b"\x00\x03raw"
        raw.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", raw._read(4))[0]
        body = raw._read(size)
        assert struct.unpack_from(">ih", body) == (5, 35)
        assert raw.request(3, 4, topics=None, allow_auto_topic_creation=False).brokers  # still served
    finally:
        raw.close()


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _batch(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, int(time.time() * 1000), None, value, [])
    return bytes(builder.build())


def test_delete_topics_drops_the_table(local: dict[str, Any]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=_kafka_servers(local), request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic("gone", 2, 1)])
        admin.delete_topics(["gone"])
        deadline = time.monotonic() + 10
        while "gone" in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "gone" not in admin.list_topics()
    finally:
        admin.close()

    async def exists() -> bool:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": local["bootstrap"]})
        )
        admin = connection.get_admin()
        return bool(await admin.table_exists(fluss.TablePath("kafka", "gone")))

    assert not asyncio.run(exists())


def test_a_consumer_group_splits_partitions_and_rebalances_when_a_member_leaves(
    local: dict[str, Any],
) -> None:
    servers = _kafka_servers(local)
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=15000)
    admin.create_topics([NewTopic("grouped", 6, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=servers, enable_idempotence=False)
    for i in range(60):
        producer.send("grouped", b"%d" % i, partition=i % 6)
    producer.flush()
    producer.close()

    assignments: dict[int, list[int]] = {}
    seen: set[tuple[int, int]] = set()
    stop: set[int] = set()
    errors: list[BaseException] = []

    def member(i: int) -> None:
        try:
            consumer = KafkaConsumer(
                "grouped",
                bootstrap_servers=servers,
                group_id="g",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=300,
                partition_assignment_strategy=[RangePartitionAssignor],
            )
            while i not in stop:
                for records in consumer.poll(300).values():
                    seen.update((r.partition, r.offset) for r in records)
                assignments[i] = sorted(tp.partition for tp in consumer.assignment())
                if len(seen) == 60:
                    # a rebalance under way refuses the commit; the next round commits
                    with contextlib.suppress(CommitFailedError, RebalanceInProgressError):
                        consumer.commit()

            consumer.close()  # LeaveGroup
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    def until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline and not errors:
            time.sleep(0.1)
        assert not errors, errors
        assert condition(), assignments

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        until(lambda: len(seen) == 60 and all(len(assignments.get(i, [])) == 2 for i in range(3)))
        assert sorted(p for owned in assignments.values() for p in owned) == list(range(6))
        stop.add(2)
        threads[2].join()
        until(lambda: sorted(assignments[0] + assignments[1]) == list(range(6)))
    finally:
        stop.update(range(3))
        for thread in threads:
            thread.join()
    reader = KafkaConsumer(bootstrap_servers=servers, group_id="g", enable_auto_commit=False)
    try:
        assert [reader.committed(KafkaTopicPartition("grouped", p)) for p in range(6)] == [10] * 6
    finally:
        reader.close()


def test_a_server_sigkill_loses_no_committed_offset_and_duplicates_no_idempotent_write(
    local: dict[str, Any],
) -> None:
    """Last in this module: it kills the tablet server that coordinates a group and leads a partition
    an idempotent producer (acks=all, RF 3) is writing to. The offsets topic has a replica on another."""
    servers = _kafka_servers(local)
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=15000)
    admin.create_topics([NewTopic("tracked", 3, 3)])
    admin.close()
    consumer = KafkaConsumer(bootstrap_servers=servers, group_id="survivor", enable_auto_commit=False)
    partitions = [KafkaTopicPartition("tracked", p) for p in range(2)]
    consumer.assign(partitions)
    consumer.commit(
        {partitions[0]: OffsetAndMetadata(41, "", -1), partitions[1]: OffsetAndMetadata(7, "", -1)}
    )
    consumer.close()
    raw = RawKafka(servers[0])
    try:
        coordinator = int(raw.request(10, 1, key="survivor", key_type=0).node_id)  # FindCoordinator
    finally:
        raw.close()
    victim = next(s for s in local["servers"] if s["role"] == "tablet-server" and s["id"] == coordinator)
    survivor = next(a for s, a in zip(local["servers"][1:], servers, strict=True) if s["id"] != coordinator)
    victim_address = next(
        a for s, a in zip(local["servers"][1:], servers, strict=True) if s["id"] == coordinator
    )
    # the partition the victim leads (Fluss spreads the three leaders over the three servers)
    partition = next(p for p in range(3) if _leader_address(local, "tracked", p) == victim_address)

    producer = Producer(
        {
            "bootstrap.servers": local["kafka_bootstrap"],
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
        }
    )
    failures: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(error)

    count = 2000
    for i in range(count):
        producer.produce("tracked", value=b"%d" % i, partition=partition, on_delivery=delivered)
        if i == count // 3:
            assert producer.flush(15) == 0
            os.kill(victim["pid"], signal.SIGKILL)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures

    deadline = time.monotonic() + 30
    committed: list[int | None] = []
    while time.monotonic() < deadline:
        reader = KafkaConsumer(bootstrap_servers=[survivor], group_id="survivor", request_timeout_ms=5000)
        try:
            committed = [reader.committed(p) for p in partitions]
        except Exception:  # the coordinator is moving: ask again
            committed = []
        finally:
            reader.close()
        if committed == [41, 7]:
            break
        time.sleep(0.5)
    assert committed == [41, 7]

    values = KafkaConsumer(bootstrap_servers=[survivor], consumer_timeout_ms=3000, enable_auto_commit=False)
    values.assign([KafkaTopicPartition("tracked", partition)])
    values.seek_to_beginning()
    written = [int(m.value) for m in values]
    values.close()
    assert written == list(range(count))  # each once, in order
