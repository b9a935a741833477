"""Write latency with small batches: the official pyfluss client appending 10 rows and waiting for the
acknowledgement (acks=all, one tablet server), p50 and p99 over many writes, against what any write
must pay on this machine, measured in the same run: an asyncio loopback round trip carrying the same
bytes plus appending them to a file.

    .venv/bin/python bench/write_latency.py [--writes 2000] [--large] [--json]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time

import fluss
import numpy as np
import pyarrow as pa
from common import Row, cluster, parser, report

ROWS_PER_WRITE = 10


def small_batch() -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(ROWS_PER_WRITE), pa.int64()), "v": pa.array(["x" * 40] * ROWS_PER_WRITE)}
    )


async def pyfluss_latencies(bootstrap: str, writes: int, name: str) -> list[float]:
    batch = small_batch()
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    path = fluss.TablePath("fluss", name)
    await connection.get_admin().create_table(
        path, fluss.TableDescriptor(fluss.Schema(batch.schema), bucket_count=1)
    )
    writer = (await connection.get_table(path)).new_append().create_writer()
    latencies = []
    for _ in range(writes):
        started = time.perf_counter()
        writer.write_arrow_batch(batch)
        await writer.flush()
        latencies.append((time.perf_counter() - started) * 1000)
    await connection.close()
    return latencies


async def reference_latencies(writes: int, payload: bytes) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(os.path.join(tmp, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                os.write(fd, data)
                writer.write(b"k")

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        latencies = []
        for _ in range(writes):
            started = time.perf_counter()
            writer.write(payload)
            await reader.readexactly(1)
            latencies.append((time.perf_counter() - started) * 1000)
        writer.close()
        server.close()
        os.close(fd)
    return latencies


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--writes", type=int, default=2000)
    args = p.parse_args()
    if args.smoke:
        args.writes, args.runs = 50, 1
    writes = args.writes * (5 if args.large else 1)
    payload = small_batch().serialize().to_pybytes()
    with cluster() as running:
        runs = [
            asyncio.run(pyfluss_latencies(running.bootstrap, writes, f"small{i}")) for i in range(args.runs)
        ]
    reference = asyncio.run(reference_latencies(writes, payload))
    p50 = statistics.median(float(np.percentile(r, 50)) for r in runs)
    p99 = statistics.median(float(np.percentile(r, 99)) for r in runs)
    report(
        [
            Row(
                f"write latency p50, pyfluss, {ROWS_PER_WRITE} rows, acks=all",
                p50,
                float(np.percentile(reference, 50)),
                "ms",
                "loopback RTT + file append",
                higher_is_better=False,
            ),
            Row(
                f"write latency p99, pyfluss, {ROWS_PER_WRITE} rows, acks=all",
                p99,
                float(np.percentile(reference, 99)),
                "ms",
                "loopback RTT + file append",
                higher_is_better=False,
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
