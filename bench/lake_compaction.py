"""Lake compaction (`table.datalake.auto-compaction`): a 4-bucket log table tiered in many small rounds
into Iceberg, Lance and Delta Lake, then compacted by the committers' `compact_buckets`. Per format: the data
files of the latest snapshot and a full scan's time with the format's own reader, after compaction
against before it (in the same run, on the same table).

    .venv/bin/python bench/lake_compaction.py [--rounds 200] [--large] [--json]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from common import Row, median_of, parser, report

from strom.common import types as T
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.lake import load_lake_storage
from strom.lake.interface import LakeStorage

BUCKETS = 4
FORMATS = ["iceberg", "lance", "delta"]


def storage_for(lake_format: str, base: Path) -> LakeStorage:
    if lake_format == "iceberg":
        props = {"type": "sql", "uri": f"sqlite:///{base}/catalog.db", "warehouse": f"file://{base}/iceberg"}
        return load_lake_storage("iceberg", props)
    return load_lake_storage(lake_format, {"warehouse": str(base / lake_format)})


def table_info(lake_format: str) -> TableInfo:
    schema = Schema([Column("id", T.BIGINT()), Column("user", T.STRING()), Column("amount", T.DOUBLE())])
    properties = {"table.datalake.enabled": "true", "table.datalake.format": lake_format}
    descriptor = TableDescriptor(schema=schema, bucket_count=BUCKETS, properties=properties)
    return TableInfo(TablePath("bench", "events"), 1, 1, descriptor, 0, 0)


def tier_rounds(storage: LakeStorage, info: TableInfo, rounds: int, rows_per_bucket: int) -> None:
    """`rounds` tiering rounds, each one split of `rows_per_bucket` rows per bucket and one commit."""
    ends = dict.fromkeys(range(BUCKETS), 0)
    for _ in range(rounds):
        results = []
        for bucket in range(BUCKETS):
            start = ends[bucket]
            ids = np.arange(start, start + rows_per_bucket, dtype=np.int64) * BUCKETS + bucket
            batch = pa.table({"id": ids, "user": [f"u{i % 1000}" for i in ids], "amount": ids * 0.5})
            with storage.writer(info, TableBucket(info.table_id, None, bucket)) as writer:
                offsets = np.arange(start, start + rows_per_bucket, dtype=np.int64)
                writer.write(batch, None, offsets, np.full(rows_per_bucket, 1_700_000_000_000, np.int64))
                results.append(writer.complete())
            ends[bucket] = start + rows_per_bucket
        storage.committer(info).commit(results, {(None, b): o for b, o in ends.items()})


def scan(storage: LakeStorage, info: TableInfo) -> tuple[int, int]:
    """A full scan with the format's own reader: (rows, data files of the latest snapshot)."""
    catalog: Any = storage.catalog()
    if storage.format == "iceberg":
        table = catalog.load_table(info.table_path)
        files = len(list(table.scan().plan_files()))
        return table.scan().to_arrow().num_rows, files
    if storage.format == "lance":
        dataset = catalog.open(info.table_path)
        files = sum(len(f.metadata.files) for f in dataset.get_fragments())
        return dataset.to_table().num_rows, files
    table = catalog.open(info.table_path)
    return table.to_pyarrow_table().num_rows, table.get_add_actions(flatten=True).num_rows


def measure(lake_format: str, rounds: int, rows_per_bucket: int, runs: int) -> Row:
    with tempfile.TemporaryDirectory(prefix="strom-bench-compaction-") as tmp:
        storage = storage_for(lake_format, Path(tmp))
        info = table_info(lake_format)
        storage.catalog().create_table(info)
        tier_rounds(storage, info, rounds, rows_per_bucket)
        expected, files_before = scan(storage, info)

        def timed() -> float:
            started = time.perf_counter()
            rows, _ = scan(storage, info)
            assert rows == expected, (rows, expected)
            return (time.perf_counter() - started) * 1000

        before = median_of(runs, timed)
        committer = storage.committer(info)
        started = time.perf_counter()
        # as the tiering service calls it after a round: every bucket the round wrote
        committer.compact_buckets([(bucket, None) for bucket in range(BUCKETS)])
        compact_ms = (time.perf_counter() - started) * 1000
        _, files_after = scan(storage, info)
        after = median_of(runs, timed)
    return Row(
        path=f"full scan, {lake_format}, {rounds} rounds: {files_before} -> {files_after} files "
        f"(compaction {compact_ms:,.0f} ms)",
        strom=after,
        reference=before,
        unit="ms",
        reference_name="before compaction",
        higher_is_better=False,
    )


def main() -> None:
    args = parser(__doc__).parse_args()
    rounds = 5 if args.smoke else (1000 if args.large else 200)
    runs = 1 if args.smoke else args.runs
    report([measure(f, rounds, 250, runs) for f in FORMATS], args.json)


if __name__ == "__main__":
    main()
