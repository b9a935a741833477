"""What the power-cut file system of the fault tests (tests/faults/lazyfs.py) costs: appends with
os.write to a file through a LazyMount against the same appends to a plain directory on the same disk,
and pyfluss appending to a tablet server whose data directory is on a LazyMount against one on the
plain disk. Not a Strom figure: it tells how much slower a fault campaign's servers write.

    .venv/bin/python bench/lazyfs_overhead.py [--large] [--runs 3] [--json] [--smoke]
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import fluss
from common import Row, median_of, parser, report, wide_batch
from faults.lazyfs import LazyMount
from harness import Cluster, run_pyfluss


def append_mb_per_s(directory: Path, total: int, chunk: int, fsync_every: int) -> float:
    data = os.urandom(chunk)
    path = directory / f"append-{chunk}-{time.monotonic_ns()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        started = time.perf_counter()
        for i in range(total // chunk):
            os.write(fd, data)
            if fsync_every and (i + 1) % fsync_every == 0:
                os.fsync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return total / seconds / 1e6


@contextlib.contextmanager
def places() -> Iterator[tuple[Path, Path]]:
    """A plain directory and a LazyMount over a directory next to it, on the same file system."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain"
        plain.mkdir()
        with LazyMount(Path(tmp) / "backing", Path(tmp) / "mnt") as mount:
            yield plain, mount.mountpoint


def pyfluss_mb_per_s(data_dir_on_mount: bool, total: int, runs: int) -> float:
    batch = wide_batch(10_000)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp) / "cluster", tablet_servers=1)
        data_dir = cluster.tablet_servers[0].data_dir
        mount = LazyMount(Path(tmp) / "disk", data_dir) if data_dir_on_mount else None
        if mount is not None:
            mount.start()
        try:
            cluster.start()

            async def body(connection: fluss.FlussConnection) -> float:
                results = []
                for run in range(runs):
                    path = fluss.TablePath("fluss", f"overhead_{run}")
                    await connection.get_admin().create_table(
                        path, fluss.TableDescriptor(fluss.Schema(batch.schema), bucket_count=1)
                    )
                    writer = (await connection.get_table(path)).new_append().create_writer()
                    started = time.perf_counter()
                    written = 0
                    while written < total:
                        writer.write_arrow_batch(batch)
                        written += batch.nbytes
                    await writer.flush()
                    results.append(written / (time.perf_counter() - started) / 1e6)
                return sorted(results)[len(results) // 2]

            result: float = run_pyfluss(cluster.bootstrap, body, timeout=600)
            return result
        finally:
            cluster.stop()
            if mount is not None:
                mount.stop()


def main() -> None:
    args = parser(__doc__).parse_args()
    total = (256 if args.large else 64) << 20
    fluss_total = (512 if args.large else 128) << 20
    if args.smoke:
        total, fluss_total, args.runs = 2 << 20, 8 << 20, 1
    rows: list[Row] = []
    with places() as (plain, mounted):
        for chunk, fsync_every, label in (
            (4 << 10, 0, "append 4 KiB writes"),
            (64 << 10, 0, "append 64 KiB writes"),
            (1 << 20, 0, "append 1 MiB writes"),
            (64 << 10, 16, "append 64 KiB, fsync every 1 MiB"),
        ):
            lazy = median_of(
                args.runs, functools.partial(append_mb_per_s, mounted, total, chunk, fsync_every)
            )
            direct = median_of(
                args.runs, functools.partial(append_mb_per_s, plain, total, chunk, fsync_every)
            )
            rows.append(Row(f"{label}, LazyMount", lazy, direct, "MB/s", "plain dir"))
    rows.append(
        Row(
            "pyfluss append, data dir on LazyMount",
            pyfluss_mb_per_s(True, fluss_total, args.runs),
            pyfluss_mb_per_s(False, fluss_total, args.runs),
            "MB/s",
            "plain dir",
        )
    )
    report(rows, args.json)


if __name__ == "__main__":
    main()
