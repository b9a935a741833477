"""What `log.flush.interval-messages: 1` costs: acknowledged writes that survive a power cut of every
replica, against Fluss's default (no fsync on append; durability from replication).

Two clusters of three tablet servers, one after the other, identical but for the flush option; an RF-3
table in each, written by the official pyfluss client with acks=all:
- small writes: 10 rows per write, each awaited (p50 and p99 latency);
- bulk appends: 1 MB Arrow batches, as fast as the client sends them (MB/s).
Each row prints the flushed figure as "strom", the default as the reference, and their ratio (higher is
better, so a ratio of 0.5 means flushing halves throughput or doubles latency). The fsyncs run on the
disk of this machine; on a shared machine the other tenants' writes make them slower and noisier.

    .venv/bin/python bench/flush_cost.py [--writes 300] [--mb 60] [--runs 1] [--json] [--smoke]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import fluss
import numpy as np
import pyarrow as pa
from common import Row, cluster, parser, report, wide_batch

ROWS_PER_WRITE = 10
DEFAULT = "default (no fsync on append)"


def small_batch() -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(ROWS_PER_WRITE), pa.int64()), "v": pa.array(["x" * 40] * ROWS_PER_WRITE)}
    )


async def create(connection: Any, name: str, schema: pa.Schema) -> Any:
    path = fluss.TablePath("fluss", name)
    descriptor = fluss.TableDescriptor(
        fluss.Schema(schema), bucket_count=1, properties={"table.replication.factor": "3"}
    )
    await connection.get_admin().create_table(path, descriptor)
    return (await connection.get_table(path)).new_append().create_writer()  # acks=all


async def measure(bootstrap: str, writes: int, mb: int, run: int) -> tuple[list[float], float]:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        small = small_batch()
        writer = await create(connection, f"small{run}", small.schema)
        latencies = []
        for _ in range(writes):
            started = time.perf_counter()
            writer.write_arrow_batch(small)
            await writer.flush()
            latencies.append((time.perf_counter() - started) * 1000)

        bulk = wide_batch(4000)  # about 1 MB
        writer = await create(connection, f"bulk{run}", bulk.schema)
        count = max(1, mb * 1024 * 1024 // bulk.nbytes)
        started = time.perf_counter()
        for _ in range(count):
            writer.write_arrow_batch(bulk)
        await writer.flush()
        throughput = count * bulk.nbytes / (1024 * 1024) / (time.perf_counter() - started)
        return latencies, throughput
    finally:
        await connection.close()


def run_cluster(flush: bool, writes: int, mb: int, runs: int) -> tuple[float, float, float]:
    config = {"log.flush.interval-messages": "1"} if flush else {}
    with cluster(tablet_servers=3, config=config) as running:
        results = [asyncio.run(measure(running.bootstrap, writes, mb, i)) for i in range(runs)]
    p50 = statistics.median(float(np.percentile(r[0], 50)) for r in results)
    p99 = statistics.median(float(np.percentile(r[0], 99)) for r in results)
    throughput = statistics.median(r[1] for r in results)
    return p50, p99, throughput


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--mb", type=int, default=60)
    p.set_defaults(runs=1)
    args = p.parse_args()
    if args.smoke:
        args.writes, args.mb = 20, 2
    scale = 5 if args.large else 1
    base = run_cluster(False, args.writes * scale, args.mb * scale, args.runs)
    flushed = run_cluster(True, args.writes * scale, args.mb * scale, args.runs)
    report(
        [
            Row("flush every message: write p50, RF 3, 10 rows", flushed[0], base[0], "ms", DEFAULT, False),
            Row("flush every message: write p99, RF 3, 10 rows", flushed[1], base[1], "ms", DEFAULT, False),
            Row("flush every message: append, RF 3, 1 MB batches", flushed[2], base[2], "MB/s", DEFAULT),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
