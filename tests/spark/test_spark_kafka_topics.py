"""What Kafka clients write to a topic is an ordinary lake-enabled log table: a librdkafka producer
writes records with keys and headers, the early segments are tiered to remote storage, and then a Kafka
consumer reads from offset 0 (the server serves the tiered batches itself), the tiering service copies
the topic into Iceberg (read back with pyiceberg), and Spark's `fluss` source reads it: all equal to what
was produced. A consumer group's commit whose segment of the offsets topic was tiered is still read
when the group loads. One cluster, one tablet server, one partition."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from harness import Cluster, add_kafka_listener
from pyiceberg.catalog import load_catalog
from test_spark_union_read import lake_config

from strom.client import Connection, TableDescriptor
from strom.server.kafka.offsets import OFFSETS_TOPIC, offsets_bucket
from strom.server.kafka.records import TOPIC_SCHEMA
from strom.spark.tiering.runner import LocalSplitRunner
from strom.spark.tiering.service import TieringService, TieringSettings

RECORDS = 300
PER_BATCH = 20  # a produce request of 20 records of 100 bytes: one 4 KB segment each, about


# key, value, headers
Record = tuple[Any, Any, Any]


def _expected() -> list[Record]:
    return [
        (b"k%d" % i, b"%03d" % i + b"x" * 97, [("source", b"kafka"), ("i", str(i).encode())])
        for i in range(RECORDS)
    ]


def test_a_kafka_topic_is_served_from_remote_storage_tiered_into_iceberg_and_read_by_spark(
    spark: Any, tmp_path: Path
) -> None:
    config = {
        **lake_config(tmp_path / "lake", "iceberg"),
        "log.segment.file-size": "4kb",
        "remote.log.task-interval-duration": "200ms",
    }
    cluster = Cluster(tmp_path / "cluster", tablet_servers=1, config=config)
    kafka_bootstrap = add_kafka_listener(cluster)
    cluster.start()
    try:
        _run(cluster, kafka_bootstrap, config, tmp_path, spark)
    finally:
        cluster.stop()


def _run(cluster: Cluster, kafka_bootstrap: str, config: dict[str, str], tmp_path: Path, spark: Any) -> None:
    async def create() -> None:  # a topic made in Fluss, with the lake and tiering options Kafka cannot set
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as connection:
            admin = connection.get_admin()
            await admin.create_database("kafka", ignore_if_exists=True)
            properties = {
                "table.datalake.enabled": "true",
                "table.datalake.freshness": "1s",
                "table.log.tiered.local-segments": "1",
            }
            descriptor = TableDescriptor(TOPIC_SCHEMA, bucket_count=1, properties=properties)
            await admin.create_table("kafka.events", descriptor)

    asyncio.run(create())
    expected = _expected()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, "acks": "all"})
    for i, (key, value, headers) in enumerate(expected):
        producer.produce("events", key=key, value=value, headers=headers, partition=0)
        if i % PER_BATCH == PER_BATCH - 1:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0
    del producer  # librdkafka's threads end with it (they would reconnect through the restart below)

    # the first segments go to remote storage and leave the local disk
    local = cluster.tablet_servers[0].data_dir / "kafka"
    (events_dir,) = local.glob("events-*/bucket-0/log")
    _wait_until_tiered(events_dir)

    # a Kafka consumer from offset 0 gets the tiered batches too, then the local ones
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: list[Record] = []
    offsets: list[int | None] = []
    try:
        assert consumer.get_watermark_offsets(TopicPartition("events", 0), timeout=10) == (0, RECORDS)
        consumer.assign([TopicPartition("events", 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert not message.error(), message.error()
            got.append((message.key(), message.value(), message.headers()))
            offsets.append(message.offset())
    finally:
        consumer.close()
    assert offsets == list(range(RECORDS))
    assert got == expected

    # the tiering service copies the topic into Iceberg as it copies any log table: one round, in
    # process (the `strom tiering` command runs the same service; tests/lake start it as a process)
    properties = {
        k.removeprefix("datalake.iceberg."): v for k, v in config.items() if k.startswith("datalake.iceberg.")
    }
    settings = TieringSettings(cluster.bootstrap, "iceberg", properties, poll_interval=0.2)
    asyncio.run(asyncio.wait_for(TieringService(settings, LocalSplitRunner()).run(max_rounds=1), 60))
    lake = load_catalog(**properties).load_table(("kafka", "events")).scan().to_arrow()

    def rows(table: list[dict[str, Any]]) -> list[Record]:
        return sorted((r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in table)

    assert rows(lake.to_pylist()) == sorted(expected)

    # Spark's fluss source reads the same records, the tiered ones included
    frame = spark.read.format("fluss").option("bootstrap.servers", cluster.bootstrap).load("kafka.events")
    read = [r.asDict(recursive=True) for r in frame.collect()]
    assert rows(read) == sorted(expected)

    # a consumer group's commit whose segment of the offsets topic was tiered away is still there when
    # a coordinator loads the group (after a restart: groups load once per leader epoch)
    def group(group_id: str) -> Consumer:
        return Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group_id, "enable.auto.commit": False}
        )

    kept = group("kept")
    kept.commit(offsets=[TopicPartition("events", 0, 123)], asynchronous=False)
    kept.close()
    bucket = offsets_bucket("kept")
    busy = group(next(f"busy{i}" for i in range(100) if offsets_bucket(f"busy{i}") == bucket))
    for i in range(40):  # commits of another group in that bucket: enough 4 KB segments to tier some
        busy.commit(offsets=[TopicPartition("events", 0, i)], asynchronous=False)
    busy.close()
    (offsets_dir,) = local.glob(f"{OFFSETS_TOPIC}-*/bucket-{bucket}/log")
    _wait_until_tiered(offsets_dir)  # the commit of "kept" is offset 0 of its bucket
    cluster.kill_tablet_server(0)
    cluster.start_tablet_server(0)
    kept = group("kept")
    try:
        (committed,) = kept.committed([TopicPartition("events", 0)], timeout=30)
    finally:
        kept.close()
    assert committed.offset == 123


def _wait_until_tiered(log_dir: Path) -> None:
    """Until the segment holding offset 0 is no longer on the local disk (tiered, then trimmed)."""
    deadline = time.monotonic() + 30
    while min(int(f.stem) for f in log_dir.glob("*.log")) == 0:
        assert time.monotonic() < deadline, f"the first segment of {log_dir} was not tiered"
        time.sleep(0.2)
