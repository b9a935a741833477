"""Several data directories per tablet server (`data.dirs`), and a disk that fills: writes to its
replicas are refused with DISK_WRITE_LOCKED (and a log line), the other disk's replicas still take
writes, reads go on, and writes resume by themselves once space returns. The full disk is a real
8 MB tmpfs the test mounts (and removes)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from harness import Cluster
from raw_table import Table, batch

DISK_WRITE_LOCKED = 70


@pytest.fixture
def disks(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two small file systems of the test's own (tmpfs): the host's disk usage plays no part."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []
    try:
        for name, size in (("big-disk", "64m"), ("small-disk", "8m")):
            path = tmp_path / name
            path.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
            mounted.append(path)
        yield mounted
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_refuses_writes_to_its_replicas_and_recovers(tmp_path: Path, disks: list[Path]) -> None:
    big, small_disk = disks
    cluster = Cluster(
        tmp_path / "cluster",
        1,
        {
            "data.dirs": f"{big},{small_disk}",
            "server.data-disk.check-interval": "100ms",
            "server.data-disk.write-limit-ratio": "0.5",
            "server.data-disk.write-recover-ratio": "0.3",
        },
    ).start()
    filler = small_disk / "filler"

    async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 15
        while not await condition():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.1)

    async def main() -> None:
        # equal replica counts: the first table goes where there is more free space, the second to
        # the directory holding fewer replicas
        async with Table(cluster, "on_big") as on_big, Table(cluster, "on_small") as on_small:
            assert (await on_big.produce(batch(0, 10))).error_code == 0
            assert (await on_small.produce(batch(0, 10))).error_code == 0
            assert list(big.glob(f"fluss/on_big-{on_big.table_id}/bucket-0/log"))
            assert list(small_disk.glob(f"fluss/on_small-{on_small.table_id}/bucket-0/log"))

            filler.write_bytes(b"\0" * (5 << 20))  # 62% of the small disk, above the 50% limit

            async def small_refuses() -> bool:
                result = await on_small.produce(batch(10, 5))
                if result.error_code == 0:
                    return False
                assert result.error_code == DISK_WRITE_LOCKED, result.error_message
                assert str(small_disk) in result.error_message and "full" in result.error_message
                return True

            await until(small_refuses, "writes to the full disk's replica were never refused")
            # only that disk's replicas: the other one takes writes
            assert (await on_big.produce(batch(10, 5))).error_code == 0
            # reads go on
            fetched = await on_small.fetch(0)
            assert fetched.error_code == 0 and fetched.high_watermark >= 10 and fetched.records
            assert "reached the write limit" in cluster.logs()

            filler.unlink()  # space returns: writes resume by themselves

            async def small_accepts() -> bool:
                result = await on_small.produce(batch(10, 5))
                assert result.error_code in (0, DISK_WRITE_LOCKED), result.error_message
                return result.error_code == 0

            await until(small_accepts, "writes did not resume after space returned")
            assert "writes resume" in cluster.logs()

    try:
        asyncio.run(main())
    finally:
        cluster.stop()
