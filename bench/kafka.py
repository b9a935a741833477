"""Kafka clients on Strom: confluent-kafka (librdkafka) producing and consuming through the Kafka
listener, next to pyfluss appending and reading the same records as Arrow through the Fluss protocol,
and a file append of the same Kafka batch bytes, all in one run on one tablet server. Prints MB/s
(of record keys and values) for each and the ratios.

It also measures the stored form alone, in this process: the conversion every produce pays (Kafka
batches: CRC check, decode, Arrow batch) and every fetch pays (Arrow batch to a Kafka batch), against
the file append that storing Kafka's batches as they came would cost instead.

    .venv/bin/python bench/kafka.py [--records 200000] [--value-bytes 200] [--smoke]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import fluss
import pyarrow as pa
from common import Row, parser, report
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import Cluster, add_kafka_listener

from strom.server.kafka.records import TOPIC_SCHEMA

PARTITIONS = 2


def records(count: int, value_bytes: int) -> tuple[list[bytes], list[bytes]]:
    keys = [b"key-%08d" % i for i in range(count)]
    value = os.urandom(value_bytes // 2).hex().encode()
    return keys, [value] * count


def kafka_produce(bootstrap: str, keys: list[bytes], values: list[bytes]) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("bench", PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    start = time.perf_counter()
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        while True:
            try:
                producer.produce("bench", value, key, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def kafka_consume(bootstrap: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "fetch.max.bytes": 16 << 20})
    consumer.assign([TopicPartition("bench", p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    while got < count:
        for message in consumer.consume(10_000, 1.0):
            if not message.error():
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


async def pyfluss_run(bootstrap: str, keys: list[bytes], values: list[bytes]) -> tuple[float, float]:
    arrow_schema = TOPIC_SCHEMA.to_arrow_schema()
    now = int(time.time() * 1000)
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    admin = connection.get_admin()
    path = fluss.TablePath("fluss", "bench")
    descriptor = fluss.TableDescriptor(fluss.Schema(arrow_schema), bucket_count=PARTITIONS)
    await admin.create_table(path, descriptor)
    table = await connection.get_table(path)
    writer = table.new_append().create_writer()
    step = 5000
    batches = [
        pa.RecordBatch.from_arrays(
            [
                pa.array(keys[i : i + step], arrow_schema.field(0).type),
                pa.array(values[i : i + step], arrow_schema.field(1).type),
                pa.array([[]] * len(keys[i : i + step]), arrow_schema.field(2).type),
                pa.array([now] * len(keys[i : i + step]), pa.int64()).cast(arrow_schema.field(3).type),
            ],
            schema=arrow_schema,
        )
        for i in range(0, len(keys), step)
    ]
    start = time.perf_counter()
    for batch in batches:
        writer.write_arrow_batch(batch)
    await writer.flush()
    write = time.perf_counter() - start
    scanner = await table.new_scan().create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(PARTITIONS)})
    start = time.perf_counter()
    result = await scanner.to_arrow()
    read = time.perf_counter() - start
    assert result.num_rows == len(keys)
    await connection.close()
    return write, read


def file_append(keys: list[bytes], values: list[bytes]) -> float:
    """The reference: the same records as Kafka batches appended to a file (no fsync, as the log)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    with tempfile.NamedTemporaryFile() as out:
        start = time.perf_counter()
        for first in range(0, len(keys), 5000):
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            for i in range(first, min(len(keys), first + 5000)):
                builder.append(i - first, 0, keys[i], values[i], [])
            os.write(out.fileno(), builder.build())
        return time.perf_counter() - start


@contextlib.contextmanager
def cluster_with_kafka() -> Iterator[tuple[str, str]]:
    """One coordinator and one tablet server with a Kafka listener: (Fluss bootstrap, Kafka bootstrap)."""
    with tempfile.TemporaryDirectory() as tmp:
        running = Cluster(Path(tmp) / "cluster", tablet_servers=1)
        kafka_bootstrap = add_kafka_listener(running)
        running.start()
        try:
            yield running.bootstrap, kafka_bootstrap
        finally:
            running.stop()


def conversions(keys: list[bytes], values: list[bytes]) -> tuple[float, float, float]:
    """Seconds to turn the records' Kafka batches into Fluss Arrow batches and back, and the ratio of
    the stored sizes (Arrow / Kafka)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from strom.server.kafka.records import (
        decode_producer_batch,
        split_batches,
        to_fluss_batch,
        to_kafka_batches,
    )

    arrow_schema = TOPIC_SCHEMA.to_arrow_schema()
    kafka_batches = []
    for first in range(0, len(keys), 500):  # about what a producer sends per partition and request
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(first, min(len(keys), first + 500)):
            builder.append(i - first, 0, keys[i], values[i], [("h", b"v")])
        kafka_batches.append(bytes(builder.build()))
    start = time.perf_counter()
    stored = [
        to_fluss_batch(decode_producer_batch(view, arrow_schema), 1)
        for batch in kafka_batches
        for view in split_batches(batch)
    ]
    produce = time.perf_counter() - start
    start = time.perf_counter()
    for batch in stored:
        to_kafka_batches(batch, arrow_schema)
    fetch = time.perf_counter() - start
    return produce, fetch, sum(map(len, stored)) / sum(map(len, kafka_batches))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--value-bytes", type=int, default=200)
    args = p.parse_args()
    count = 2000 if args.smoke else args.records * (5 if args.large else 1)
    keys, values = records(count, args.value_bytes)
    mb = (sum(map(len, keys)) + sum(map(len, values))) / 1e6
    with cluster_with_kafka() as (fluss_bootstrap, kafka_bootstrap):
        produce = kafka_produce(kafka_bootstrap, keys, values)
        consume = kafka_consume(kafka_bootstrap, count)
        write, read = asyncio.run(pyfluss_run(fluss_bootstrap, keys, values))
    reference = file_append(keys, values)
    to_arrow, to_kafka, size_ratio = conversions(keys, values)
    print(f"stored size: Arrow / Kafka batches = {size_ratio:.2f}", file=sys.stderr)
    rows = [
        Row("produce conversion, Kafka batch -> Arrow", mb / to_arrow, mb / reference, "MB/s", "file append"),
        Row("fetch conversion, Arrow -> Kafka batch", mb / to_kafka, mb / reference, "MB/s", "file append"),
        Row("produce, confluent-kafka -> Strom (Kafka)", mb / produce, mb / write, "MB/s", "pyfluss append"),
        Row("consume, Strom (Kafka) -> confluent-kafka", mb / consume, mb / read, "MB/s", "pyfluss read"),
        Row("produce, confluent-kafka -> Strom (Kafka)", mb / produce, mb / reference, "MB/s", "file append"),
    ]
    report(rows, args.json)


if __name__ == "__main__":
    main()
