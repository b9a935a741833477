"""Several data directories per tablet server (`data.dirs`). A disk that fills: writes to its replicas
are refused with DISK_WRITE_LOCKED (and a log line), the other disk's replicas still take writes, reads
go on, and writes resume by themselves once space returns. A disk that fails: only its replicas go
offline, and their buckets move to other replicas. The disks are real file systems the test mounts
(tmpfs, ext4 on a loop device) and removes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster
from raw_table import Table, batch

from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.common.types import BIGINT, STRING
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.kv_batch import build_kv_batch
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.tablet.kv.recovery import table_key_encoder

DISK_WRITE_LOCKED = 70
PK_SCHEMA = Schema([Column("id", BIGINT()), Column("name", STRING())], primary_key=["id"])


def kv_batch(key: int) -> bytes:
    info = TableInfo(TablePath("fluss", "pk"), 0, 1, TableDescriptor(PK_SCHEMA, bucket_count=1), 0, 0)
    row = (key, f"v{key}")
    encoded = CompactedRowEncoder(PK_SCHEMA.row_type).encode(row)
    return build_kv_batch([(table_key_encoder(info).encode_key(row), encoded)], schema_id=1)


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
        # with equal replica counts a table goes where there is more free space, else to the
        # directory holding fewer replicas: big, small, big, small
        async with (
            Table(cluster, "on_big") as on_big,
            Table(cluster, "on_small") as on_small,
            Table(cluster, "pk_big", schema=PK_SCHEMA) as pk_big,
            Table(cluster, "pk_small", schema=PK_SCHEMA) as pk_small,
        ):
            assert (await on_big.produce(batch(0, 10))).error_code == 0
            assert (await on_small.produce(batch(0, 10))).error_code == 0
            assert (await pk_big.put_kv(kv_batch(1))).error_code == 0
            assert (await pk_small.put_kv(kv_batch(1))).error_code == 0
            for table, disk in ((on_big, big), (on_small, small_disk), (pk_big, big), (pk_small, small_disk)):
                assert list(disk.glob(f"fluss/{table.name}-{table.table_id}/bucket-0/log")), table.name

            filler.write_bytes(b"\0" * (5 << 20))  # 62% of the small disk, above the 50% limit

            async def small_refuses() -> bool:
                result = await on_small.produce(batch(10, 5))
                if result.error_code == 0:
                    return False
                assert result.error_code == DISK_WRITE_LOCKED, result.error_message
                assert str(small_disk) in result.error_message and "full" in result.error_message
                return True

            await until(small_refuses, "writes to the full disk's replica were never refused")
            assert (await pk_small.put_kv(kv_batch(2))).error_code == DISK_WRITE_LOCKED  # upserts too
            # only that disk's replicas: the others take writes
            assert (await on_big.produce(batch(10, 5))).error_code == 0
            assert (await pk_big.put_kv(kv_batch(2))).error_code == 0
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
            assert (await pk_small.put_kv(kv_batch(2))).error_code == 0
            assert "writes resume" in cluster.logs()

    try:
        asyncio.run(main())
    finally:
        cluster.stop()


@pytest.fixture
def failing_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An ext4 file system on a loop device, mounted errors=remount-ro: writing 'test' to its
    trigger_fs_error (the kernel's own hook) makes it fail as on an I/O error: every write after
    that gets EROFS."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    image, mountpoint = tmp_path / "disk.img", tmp_path / "failing-disk"
    mountpoint.mkdir()
    with image.open("wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(image), str(mountpoint)], check=True)
    try:
        device = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mountpoint)], check=True, capture_output=True, text=True
        ).stdout.strip()
        trigger = Path("/sys/fs/ext4") / Path(device).name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip("this kernel has no ext4 trigger_fs_error")
        yield mountpoint, trigger
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


async def _buckets(cluster: Cluster) -> dict[int, Any]:
    connection = await RpcConnection.connect(cluster.coordinator.host, cluster.coordinator.port)
    try:
        status = await connection.request(ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest())
    finally:
        connection.close()
    return {b.table_id: b for b in status.buckets}


def test_a_failed_disk_takes_only_its_replicas_offline(
    tmp_path: Path, failing_disk: tuple[Path, Path]
) -> None:
    mountpoint, trigger = failing_disk
    healthy_dir = tmp_path / "healthy-disk"
    cluster = Cluster(
        tmp_path / "cluster",
        2,
        {"default.replication.factor": "2", "server.data-disk.check-interval": "200ms"},
    )
    server = cluster.tablet_servers[0]
    server.config = {**server.config, "data.dirs": f"{healthy_dir},{mountpoint}"}
    cluster.start()

    async def main() -> None:
        async with Table(cluster, "healthy") as healthy, Table(cluster, "doomed") as doomed:
            assert (await healthy.produce(batch(0, 10))).error_code == 0
            assert (await doomed.produce(batch(0, 10))).error_code == 0
            assert list(mountpoint.glob(f"fluss/doomed-{doomed.table_id}/bucket-0/log"))
            assert list(healthy_dir.glob(f"fluss/healthy-{healthy.table_id}/bucket-0/log"))
            buckets = await _buckets(cluster)
            assert set(buckets[doomed.table_id].isr) == {0, 1} == set(buckets[healthy.table_id].isr)

            trigger.write_text("test\n")  # the disk fails: ext4 remounts itself read-only

            deadline = time.monotonic() + 20
            while True:
                buckets = await _buckets(cluster)
                if list(buckets[doomed.table_id].isr) == [1] and buckets[doomed.table_id].leader == 1:
                    break
                assert time.monotonic() < deadline, buckets[doomed.table_id]
                await asyncio.sleep(0.2)
            assert set(buckets[healthy.table_id].isr) == {0, 1}  # the other disk's replica stays

            # the bucket goes on at its new leader, with what it held
            doomed.leaders[0] = await RpcConnection.connect(
                cluster.tablet_servers[1].host, cluster.tablet_servers[1].port
            )
            doomed.leader = doomed.leaders[0]
            assert (await doomed.produce(batch(10, 5))).error_code == 0
            assert await doomed.offsets() == (0, 15)
            assert (await healthy.produce(batch(10, 5))).error_code == 0
            assert "data directory" in cluster.logs() and "failed" in cluster.logs()

    try:
        asyncio.run(main())
    finally:
        cluster.stop()
