"""Files in remote storage that no metadata refers to are deleted by the coordinator's sweep: a segment
a crash left outside the manifest (once older than the grace period; a fresh one is kept, as an upload
in flight would be), the snapshots of a table that no longer exists, and a dropped table's remote log,
which dropping alone left behind. Segments the manifest lists stay."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path

from harness import Cluster
from raw_table import Table, batch

from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb


async def _until(condition, what: str, timeout: float = 20) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def _plant(directory: Path, age_s: float) -> Path:
    directory.mkdir(parents=True)
    f = directory / "00000000000000000000.log"
    f.write_bytes(b"x" * 100)
    then = time.time() - age_s
    os.utime(f, (then, then))
    return directory


def test_orphans_and_dropped_tables_leave_remote_storage(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path,
        1,
        {
            "log.segment.file-size": "4kb",
            "remote.log.task-interval-duration": "200ms",
            "remote.orphan-cleanup.interval": "500ms",
            "remote.orphan-cleanup.grace-period": "30s",
        },
    ).start()
    remote = tmp_path / "remote"

    async def main() -> None:
        async with Table(cluster, "tiered") as table:
            bucket_dir = remote / "log" / "fluss" / f"tiered-{table.table_id}" / "0"
            for i in range(8):
                assert (await table.produce(batch(i * 100, 100))).error_code == 0

            def listed() -> set[str]:
                try:
                    manifest = json.loads((bucket_dir / "manifest.json").read_text())
                except (OSError, ValueError):
                    return set()
                return {s["segment_id"] for s in manifest["segments"]}

            await _until(lambda: len(listed()) >= 1, "no segments were tiered")
            stale = _plant(bucket_dir / str(uuid.uuid4()), age_s=3600)  # a crash mid-upload, long ago
            fresh = _plant(bucket_dir / str(uuid.uuid4()), age_s=0)  # an upload in flight
            ghost = _plant(remote / "kv" / "fluss" / "gone-987654" / "0" / "snap-3", age_s=0)

            await _until(lambda: not stale.exists() and not ghost.parent.parent.exists(), "orphans stayed")
            assert fresh.exists()  # younger than the grace period
            assert all((bucket_dir / s).is_dir() for s in listed())  # what the manifest lists stays

            request = pb.DropTableRequest(ignore_if_not_exists=False)
            request.table_path.database_name = "fluss"
            request.table_path.table_name = "tiered"
            await table.coordinator.request(ApiKey.DROP_TABLE, request)
            await _until(lambda: not bucket_dir.parent.exists(), "the dropped table's remote log stayed")
        assert "orphan file(s)" in cluster.logs()

    try:
        asyncio.run(main())
    finally:
        cluster.stop()
