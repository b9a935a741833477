"""Log-table throughput: the official pyfluss client appending Arrow data into a local Strom cluster and
reading it back, against the physical reference of writing and reading the same bytes with plain file
I/O on the same disk. Prints MB/s for each and the ratio Strom / reference.

    .venv/bin/python bench/log_throughput.py [--mb 200] [--buckets 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import fluss
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness import Cluster


def make_batch(rows: int) -> pa.RecordBatch:
    ids = pa.array(range(rows), pa.int64())
    return pa.record_batch(
        {
            "id": ids,
            "name": pa.array([f"user-{i % 10000:05d}" for i in range(rows)]),
            "score": pa.array([float(i % 1000) for i in range(rows)], pa.float64()),
            "payload": pa.array([b"x" * 64] * rows, pa.binary()),
        }
    )


async def strom_run(
    bootstrap: str, batch: pa.RecordBatch, count: int, buckets: int
) -> tuple[float, float, int]:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    admin = connection.get_admin()
    path = fluss.TablePath("fluss", "bench")
    schema = fluss.Schema(batch.schema)
    properties = {"table.log.arrow.compression.type": "NONE"}
    await admin.create_table(path, fluss.TableDescriptor(schema, bucket_count=buckets, properties=properties))
    table = await connection.get_table(path)
    writer = table.new_append().create_writer()
    start = time.perf_counter()
    for _ in range(count):
        writer.write_arrow_batch(batch)
    await writer.flush()
    write_seconds = time.perf_counter() - start

    scanner = await table.new_scan().create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    start = time.perf_counter()
    result = await scanner.to_arrow()
    read_seconds = time.perf_counter() - start
    await connection.close()
    return write_seconds, read_seconds, result.num_rows


def reference_run(directory: Path, payload: bytes, count: int) -> tuple[float, float]:
    path = directory / "reference.log"
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for _ in range(count):
        os.write(fd, payload)
    os.close(fd)
    write_seconds = time.perf_counter() - start
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    return write_seconds, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="approximate data volume")
    parser.add_argument("--buckets", type=int, default=2)
    args = parser.parse_args()
    batch = make_batch(20_000)
    payload = batch.serialize().to_pybytes()
    count = max(1, args.mb * 1024 * 1024 // len(payload))
    megabytes = count * len(payload) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp) / "cluster", tablet_servers=1).start()
        try:
            write_s, read_s, rows = asyncio.run(strom_run(cluster.bootstrap, batch, count, args.buckets))
        finally:
            cluster.stop()
        assert rows == count * batch.num_rows, f"read back {rows} rows, wrote {count * batch.num_rows}"
        ref_write_s, ref_read_s = reference_run(Path(tmp), payload, count)
    print(f"data: {megabytes:.0f} MB in {count} Arrow batches of {batch.num_rows} rows")
    print(
        f"append  strom (pyfluss -> Strom) {megabytes / write_s:8.1f} MB/s   "
        f"reference (os.write) {megabytes / ref_write_s:8.1f} MB/s   ratio {ref_write_s / write_s:.3f}"
    )
    print(
        f"read    strom (pyfluss <- Strom) {megabytes / read_s:8.1f} MB/s   "
        f"reference (file read) {megabytes / ref_read_s:8.1f} MB/s   ratio {ref_read_s / read_s:.3f}"
    )


if __name__ == "__main__":
    main()
