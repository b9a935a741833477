"""Lookups of an expired partition answered from the lake (Paimon), on one tablet server's
`HistoricalLookup`: the time of a one-key lookup in a bucket of the partition's lake copy with the
lookup cache (`server.historical-partition.lookup-cache.max-rows`), against the same lookups with
the cache off (every lookup reads the bucket's lake files). The first cached lookup reads the lake
like an uncached one; the median is over the lookups after it.

    .venv/bin/python bench/historical_lookup.py [--rows 100000] [--json]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from common import Row, median_of, parser, report

from strom.common import types as T
from strom.common.partition import HISTORICAL_PARTITION_VALUE
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.lake.paimon.storage import PaimonLakeStorage
from strom.server.tablet.historical_lookup import HistoricalLookup
from strom.server.tablet.kv.recovery import table_key_encoder

OLD = "20200101"
BUCKETS = 2
PROPERTIES = {
    "table.auto-partition.enabled": "true",
    "table.auto-partition.time-unit": "DAY",
    "table.datalake.enabled": "true",
    "table.datalake.format": "paimon",
    "table.datalake.historical-partition.enabled": "true",
}


def table_info() -> TableInfo:
    schema = Schema(
        [Column("dt", T.STRING()), Column("id", T.BIGINT()), Column("v", T.STRING())], ["dt", "id"]
    )
    descriptor = TableDescriptor(
        schema=schema, partition_keys=["dt"], bucket_count=BUCKETS, properties=PROPERTIES
    )
    return TableInfo(TablePath("bench", "orders"), 1, 1, descriptor, 0, 0)


def tier(storage: PaimonLakeStorage, info: TableInfo, rows: int) -> dict[int, list[int]]:
    """One round holding `rows` rows of the old partition; the ids of each bucket."""
    from strom.common.bucketing import paimon_bucket
    from strom.record.key_encoder import PaimonKeyEncoder

    encoder = PaimonKeyEncoder([T.BIGINT()])  # the bucket key: the primary key less the partition key
    ids: dict[int, list[int]] = {b: [] for b in range(BUCKETS)}
    for i in range(rows):
        ids[paimon_bucket(encoder.encode([i]), BUCKETS)].append(i)
    results: list[Any] = []
    ends: dict[tuple[int | None, int], int] = {}
    for bucket, bucket_ids in ids.items():
        n = len(bucket_ids)
        batch = pa.table(
            {"dt": [OLD] * n, "id": pa.array(bucket_ids, pa.int64()), "v": [f"v{i}" for i in bucket_ids]}
        )
        with storage.writer(info, TableBucket(info.table_id, 100, bucket), OLD) as writer:
            kinds = np.zeros(n, np.int8)
            writer.write(batch, kinds, np.arange(n, dtype=np.int64), np.full(n, 1_700_000_000_000, np.int64))
            results.append(writer.complete())
        ends[(100, bucket)] = n
    storage.committer(info).commit(results, ends, partition_names={100: f"dt={OLD}"})
    return ids


def measure(rows: int, lookups: int, cached: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="strom-bench-historical-") as tmp:
        config = {"metastore": "filesystem", "warehouse": str(Path(tmp) / "warehouse")}
        storage = PaimonLakeStorage(config)
        info = table_info()
        storage.catalog().create_table(info)
        ids = tier(storage, info, rows)
        server_config = {f"datalake.paimon.{k}": v for k, v in config.items()} | {"datalake.format": "paimon"}
        server_config["server.historical-partition.lookup-cache.max-rows"] = str(rows if cached else 0)
        lookup = HistoricalLookup(server_config)
        encode = table_key_encoder(info).encode_key
        keys = iter(ids[0][: lookups + 1])

        def one() -> float:
            key = encode([OLD, next(keys), None])
            started = time.perf_counter()
            (found,) = asyncio.run(lookup.lookup(info, HISTORICAL_PARTITION_VALUE, 0, OLD, [key]))
            assert found is not None
            return (time.perf_counter() - started) * 1000

        one()  # the first lookup reads the lake either way
        return median_of(lookups, one)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=100_000)
    args = p.parse_args()
    rows = 2_000 if args.smoke else args.rows
    lookups = 3 if args.smoke else 15
    row = Row(
        path=f"one-key lookup in an expired partition ({rows:,} rows in the lake, {BUCKETS} buckets)",
        strom=measure(rows, lookups, cached=True),
        reference=measure(rows, lookups, cached=False),
        unit="ms",
        reference_name="no lookup cache",
        higher_is_better=False,
    )
    report([row], args.json)


if __name__ == "__main__":
    main()
