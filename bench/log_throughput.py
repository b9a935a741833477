"""Log-table throughput: the official pyfluss client appending Arrow data into a Strom tablet server and
reading it back from the earliest offset, against references taken in the same run. Prints MB/s for
each and the ratio Strom / reference, and the tablet server's CPU seconds per GB against the CPU the
references themselves used (a ratio the load others put on a shared machine hardly moves).

The append reference is the write the log itself must do: the same bytes appended to a new file with
Strom's flush policy. With Fluss's defaults (`log.flush.interval-messages` unset: no fsync on append,
durability from replication; a segment is fsynced when it rolls at `log.segment.file-size`, 1 GiB,
which no bucket reaches here) that is a plain append with no fsync. Each reference run follows a
Strom run and its file is kept until the end, as the log's segments are: both grow the page cache.
Both figures are the median of `--runs`. The former reference (rewriting one file with an fsync, best
of 3) is printed too: deleting the file before each rewrite lets the kernel reuse the freed page-cache
pages, which costs a fraction of the CPU of taking new ones, so it measures a write a growing log
cannot do.

pyfluss runs on the same cores as the server, so the append also has a ceiling no server can pass:
the cores divided by pyfluss's own CPU per GB plus the file append's (a server that cost no more than
the write it must do). The benchmark prints that ceiling against the file append (the highest ratio
any server could reach here) and Strom against the ceiling.

    .venv/bin/python bench/log_throughput.py [--mb 200] [--buckets 2] [--columns 20] [--runs 3] [--large]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import fluss
import pyarrow as pa
from common import Row, cluster, cpu_seconds, parser, report, wide_batch


@dataclass
class StromRun:
    """One append and read-back: wall seconds, and the CPU seconds of the tablet server and of this
    process (pyfluss's threads) during each."""

    write_seconds: float
    read_seconds: float
    rows_read: int
    write_server_cpu: float
    write_client_cpu: float
    read_server_cpu: float
    read_client_cpu: float


async def strom_run(
    bootstrap: str, batch: pa.RecordBatch, count: int, buckets: int, name: str, server: int | None
) -> StromRun:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    admin = connection.get_admin()
    path = fluss.TablePath("fluss", name)
    schema = fluss.Schema(batch.schema)
    properties = {"table.log.arrow.compression.type": "NONE"}
    await admin.create_table(path, fluss.TableDescriptor(schema, bucket_count=buckets, properties=properties))
    table = await connection.get_table(path)
    writer = table.new_append().create_writer()
    server_cpu, client_cpu = cpu_seconds(server), cpu_seconds()
    start = time.perf_counter()
    for _ in range(count):
        writer.write_arrow_batch(batch)
    await writer.flush()
    write_seconds = time.perf_counter() - start
    write_server_cpu, write_client_cpu = cpu_seconds(server) - server_cpu, cpu_seconds() - client_cpu

    scanner = await table.new_scan().create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
    server_cpu, client_cpu = cpu_seconds(server), cpu_seconds()
    start = time.perf_counter()
    result = await scanner.to_arrow()
    read_seconds = time.perf_counter() - start
    read_server_cpu, read_client_cpu = cpu_seconds(server) - server_cpu, cpu_seconds() - client_cpu
    await connection.close()
    return StromRun(
        write_seconds,
        read_seconds,
        result.num_rows,
        write_server_cpu,
        write_client_cpu,
        read_server_cpu,
        read_client_cpu,
    )


def log_write_reference(path: Path, payload: bytes, count: int) -> tuple[float, float]:
    """Wall and CPU seconds to append the same bytes to a new file with the log's flush policy (no
    fsync on append, see the module doc): what the disk and page cache allow a growing log."""
    cpu = cpu_seconds()
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    for _ in range(count):
        os.write(fd, payload)
    os.close(fd)
    return time.perf_counter() - start, cpu_seconds() - cpu


def file_rewrite_reference(directory: Path, payload: bytes, count: int) -> float:
    """Seconds to rewrite one file with the same bytes and fsync it (the former reference; page-cache
    pages freed by the unlink are reused)."""
    path = directory / "rewrite.log"
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for _ in range(count):
        os.write(fd, payload)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - start


async def loopback_stream_reference(payload: bytes, count: int) -> float:
    """Seconds for one asyncio process to stream the same bytes to itself over a loopback socket: the
    ceiling of any Python server and client talking over TCP on this machine."""
    received = 0
    done = asyncio.get_running_loop().create_future()
    total = len(payload) * count

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(count):
            writer.write(payload)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    while received < total:
        chunk = await reader.read(1 << 22)
        if not chunk:
            break
        received += len(chunk)
    seconds = time.perf_counter() - start
    writer.close()
    server.close()
    done.cancel()
    assert received == total
    return seconds


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--mb", type=int, default=200, help="approximate data volume")
    p.add_argument("--buckets", type=int, default=2)
    p.add_argument("--columns", type=int, default=20, help="columns of the Arrow batches")
    args = p.parse_args()
    if args.smoke:
        args.mb, args.runs = 2, 1
    # batches of ~2 MB, what pyfluss's writer.batch-size (2 MiB) sends as one batch
    sample = wide_batch(1000, args.columns)
    batch = wide_batch(max(1000, 2_000_000 * 1000 // sample.nbytes), args.columns)
    payload = batch.serialize().to_pybytes()
    megabytes_wanted = args.mb * (5 if args.large else 1)
    count = max(1, megabytes_wanted * 1024 * 1024 // len(payload))
    megabytes = count * len(payload) / 1e6
    runs: list[StromRun] = []
    files, file_cpus = [], []
    with cluster() as running, tempfile.TemporaryDirectory() as tmp:
        server = running.tablet_servers[0].pid
        for run in range(args.runs):
            name = f"bench{run}"
            figures = asyncio.run(strom_run(running.bootstrap, batch, count, args.buckets, name, server))
            wrote = count * batch.num_rows
            assert figures.rows_read == wrote, f"read back {figures.rows_read} rows, wrote {wrote}"
            runs.append(figures)
            file_s, file_cpu = log_write_reference(Path(tmp) / f"log{run}", payload, count)
            files.append(file_s)
            file_cpus.append(file_cpu)
        rewrite_s = min(file_rewrite_reference(Path(tmp), payload, count) for _ in range(3))
    cpu = cpu_seconds()
    stream_s = statistics.median(asyncio.run(loopback_stream_reference(payload, count)) for _ in range(3))
    stream_cpu = (cpu_seconds() - cpu) / 3
    gigabytes = megabytes / 1000

    def per_gb(field: str) -> float:
        return statistics.median(getattr(r, field) for r in runs) / gigabytes

    append_mbps = megabytes / statistics.median(r.write_seconds for r in runs)
    read_mbps = megabytes / statistics.median(r.read_seconds for r in runs)
    file_mbps = megabytes / statistics.median(files)
    file_per_gb = statistics.median(file_cpus) / gigabytes
    # pyfluss and the tablet server share this machine's cores: even a server that spent no more CPU
    # per GB than the file append itself could not append faster than this.
    cores = os.cpu_count() or 1
    # a run too small for the CPU clock's 10 ms ticks (--smoke) can measure no CPU at all
    cpu_per_gb = per_gb("write_client_cpu") + file_per_gb
    ceiling_mbps = cores * 1000 / cpu_per_gb if cpu_per_gb else float("inf")
    report(
        [
            Row(
                f"append, pyfluss -> Strom, Arrow {args.columns} cols",
                append_mbps,
                file_mbps,
                "MB/s",
                "log-like file append, no fsync",
                target=">= 0.5",
            ),
            Row(
                f"append ceiling: {cores} cores / (pyfluss + file CPU)",
                ceiling_mbps,
                file_mbps,
                "MB/s",
                "log-like file append, no fsync",
                target="the append target needs >= 0.5",
            ),
            Row(
                "append vs that ceiling",
                append_mbps,
                ceiling_mbps,
                "MB/s",
                "cores / (pyfluss + file CPU)",
            ),
            Row(
                "append vs the former reference",
                append_mbps,
                megabytes / rewrite_s,
                "MB/s",
                "file rewrite+fsync (best of 3)",
            ),
            Row(
                "read, pyfluss <- Strom, from earliest",
                read_mbps,
                megabytes / stream_s,
                "MB/s",
                "asyncio loopback stream",
                target=">= 0.5",
            ),
            Row(
                "append: tablet server CPU s per GB",
                per_gb("write_server_cpu"),
                file_per_gb,
                "s/GB",
                "log-like file append, CPU",
                higher_is_better=False,
            ),
            Row(
                "append: pyfluss client CPU s per GB",
                per_gb("write_client_cpu"),
                file_per_gb,
                "s/GB",
                "log-like file append, CPU",
                higher_is_better=False,
            ),
            Row(
                "read: tablet server CPU s per GB",
                per_gb("read_server_cpu"),
                stream_cpu / gigabytes,
                "s/GB",
                "loopback stream, both ends' CPU",
                higher_is_better=False,
            ),
            Row(
                "read: pyfluss client CPU s per GB",
                per_gb("read_client_cpu"),
                stream_cpu / gigabytes,
                "s/GB",
                "loopback stream, both ends' CPU",
                higher_is_better=False,
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
