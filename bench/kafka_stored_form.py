"""What storing Kafka topics as Arrow costs: the conversion each produce and fetch pays on a tablet
server, next to keeping Kafka's batches as they came (which costs nothing but leaves pyfluss, Spark
and lake tiering unable to read the topic).

    python bench/kafka_stored_form.py [--records 200000] [--value-bytes 100]

Prints records/s and MB/s of Kafka batch -> Fluss Arrow batch (produce: CRC check, decode, Arrow
build) and Fluss Arrow batch -> Kafka batch (fetch), and the stored size of both forms.
"""

from __future__ import annotations

import argparse
import os
import time

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from strom.server.kafka.records import (
    TOPIC_SCHEMA,
    decode_producer_batch,
    split_batches,
    to_fluss_batch,
    to_kafka_batches,
)

BATCH_RECORDS = 500  # about what a producer with default linger and 16 KiB batches sends per partition


def kafka_batches(records: int, value_bytes: int) -> list[bytes]:
    batches = []
    now = int(time.time() * 1000)
    for start in range(0, records, BATCH_RECORDS):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(start, min(records, start + BATCH_RECORDS)):
            builder.append(
                i - start, now, b"key-%d" % i, os.urandom(value_bytes // 2).hex().encode(), [("h", b"v")]
            )
        batches.append(bytes(builder.build()))
    return batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    arrow_schema = TOPIC_SCHEMA.to_arrow_schema()
    batches = kafka_batches(args.records, args.value_bytes)
    kafka_size = sum(len(b) for b in batches)

    started = time.perf_counter()
    fluss = [
        to_fluss_batch(decode_producer_batch(v, arrow_schema), 1) for b in batches for v in split_batches(b)
    ]
    produce = time.perf_counter() - started
    fluss_size = sum(len(b) for b in fluss)

    started = time.perf_counter()
    back = [to_kafka_batches(b, arrow_schema) for b in fluss]
    fetch = time.perf_counter() - started
    assert sum(len(b) for b in back) > 0

    mb = kafka_size / 1e6
    print(
        f"{args.records} records of {args.value_bytes}-byte values in {len(batches)} batches, "
        f"{mb:.1f} MB as Kafka batches"
    )
    print(f"produce (Kafka -> Arrow): {args.records / produce:,.0f} records/s, {mb / produce:.1f} MB/s")
    print(f"fetch   (Arrow -> Kafka): {args.records / fetch:,.0f} records/s, {mb / fetch:.1f} MB/s")
    print(
        f"stored size: Arrow {fluss_size / 1e6:.1f} MB, Kafka batches {mb:.1f} MB "
        f"(ratio {fluss_size / kafka_size:.2f})"
    )


if __name__ == "__main__":
    main()
