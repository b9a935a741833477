"""Primary-key upserts: `strom.client` writing Arrow batches into a PK table (one tablet server,
acks=all), against the physical reference of putting the same key and value bytes into RocksDB with
rocksdict WriteBatches of the same size in the same run.

    .venv/bin/python bench/pk_upsert.py [--rows 200000] [--large] [--json]
"""

from __future__ import annotations

import asyncio
import tempfile
import time

import numpy as np
import pyarrow as pa
from common import Row, cluster, median_of, parser, report

from strom.client import Connection
from strom.client.upsert.kv_records import KvRecordEncoder
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath

BATCH_ROWS = 10_000


def make_table(rows: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            "name": pa.array([f"user-{i:08d}" for i in range(rows)]),
            "score": pa.array(ids.astype(np.float64) * 0.5),
            "count": pa.array((ids % 1000).astype(np.int32)),
            "active": pa.array(ids % 2 == 0),
            "note": pa.array([f"note {i % 977}" for i in range(rows)]),
        }
    )


async def strom_upserts(bootstrap: str, data: pa.Table, name: str) -> float:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        admin = connection.get_admin()
        schema = Schema.from_arrow_schema(data.schema, primary_key=["id"])
        await admin.create_table(f"fluss.{name}", TableDescriptor(schema, bucket_count=1))
        writer = (await connection.get_table(f"fluss.{name}")).new_upsert().create_writer()
        started = time.perf_counter()
        for batch in data.to_batches(BATCH_ROWS):
            writer.write_arrow_batch(batch)
        await writer.flush()
        return time.perf_counter() - started


def encoded(data: pa.Table) -> tuple[list[bytes], list[bytes]]:
    """The key and value bytes the tablet server stores for these rows."""
    schema = Schema.from_arrow_schema(data.schema, primary_key=["id"])
    info = TableInfo(TablePath("fluss", "ref"), 1, 1, TableDescriptor(schema, bucket_count=1), 0, 0)
    encoder = KvRecordEncoder(info, [0], None)
    keys: list[bytes] = []
    values: list[bytes] = []
    for batch in data.to_batches(BATCH_ROWS):
        keys.extend(encoder.keys(batch).to_pylist())
        values.extend(encoder.values(batch).to_pylist())
    return keys, values


def rocksdb_reference(keys: list[bytes], values: list[bytes]) -> float:
    from rocksdict import Options, Rdict, WriteBatch

    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(tmp, Options(raw_mode=True))  # bytes as they are, as the tablet server stores them
        started = time.perf_counter()
        for start in range(0, len(keys), BATCH_ROWS):
            batch = WriteBatch(raw_mode=True)
            for k, v in zip(
                keys[start : start + BATCH_ROWS], values[start : start + BATCH_ROWS], strict=True
            ):
                batch.put(k, v)
            db.write(batch)
        db.flush()
        seconds = time.perf_counter() - started
        db.close()
    return seconds


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    args = p.parse_args()
    if args.smoke:
        args.rows, args.runs = 5_000, 1
    rows = args.rows * (5 if args.large else 1)
    data = make_table(rows)
    keys, values = encoded(data)
    with cluster() as running:
        counter = iter(range(1000))
        strom_s = median_of(
            args.runs, lambda: asyncio.run(strom_upserts(running.bootstrap, data, f"pk{next(counter)}"))
        )
    reference_s = median_of(args.runs, lambda: rocksdb_reference(keys, values))
    report(
        [
            Row(
                f"PK upsert, strom.client Arrow, {rows // 1000}k x 6 cols",
                rows / strom_s,
                rows / reference_s,
                "rows/s",
                "rocksdict WriteBatch",
                target=">= 0.25",
            )
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
