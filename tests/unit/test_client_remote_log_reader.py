"""RemoteLogReader: tiered segments are downloaded ahead of the reader, client.scanner.remote-log.
prefetch-num of them per bucket, read from their local copies (from the batch holding the fetch
offset), deleted once the reader moved past them, and all removed on close. The "remote" storage
is a local directory, as with `strom local`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from log_batch_maker import make_batch

from strom.client.scanner.remote_log_reader import RemoteLogReader, remote_segment_path
from strom.record.log_batch import iter_batches
from strom.rpc.gen import fluss_api_pb2 as pb

SEGMENTS = 5
BATCHES = 3  # per segment
RECORDS = 10  # per batch


def _remote_log(root: Path) -> tuple[str, list[pb.PbRemoteLogSegment]]:
    tablet_dir = str(root / "log" / "db" / "t-1" / "0")
    segments = []
    for i in range(SEGMENTS):
        start = i * BATCHES * RECORDS
        segment = pb.PbRemoteLogSegment(
            remote_log_segment_id=f"seg-{i}",
            remote_log_start_offset=start,
            remote_log_end_offset=start + BATCHES * RECORDS,
            segment_size_in_bytes=0,
        )
        data = b"".join(
            make_batch(b"x" * 32, records=RECORDS, base_offset=start + k * RECORDS) for k in range(BATCHES)
        )
        path = Path(remote_segment_path(tablet_dir, segment))
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        segment.segment_size_in_bytes = len(data)
        segments.append(segment)
    return tablet_dir, segments


def _info(tablet_dir: str, segments: list[pb.PbRemoteLogSegment], first: int) -> pb.PbRemoteLogFetchInfo:
    """What a leader answers for an offset in segment `first`: that segment and every later one."""
    info = pb.PbRemoteLogFetchInfo(remote_log_tablet_dir=tablet_dir, first_start_pos=0)
    info.remote_log_segments.extend(segments[first:])
    return info


def _offsets(data: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_batches(data)]


def test_segments_are_downloaded_ahead_read_locally_and_removed(tmp_path: Path) -> None:
    tablet_dir, segments = _remote_log(tmp_path / "remote")
    tmpdir = tmp_path / "io"

    async def main() -> None:
        reader = RemoteLogReader(str(tmpdir), prefetch_num=2, download_threads=2)
        try:
            # offset 15 lies in the second batch of segment 0: the first batch is skipped
            assert _offsets(await reader.read(_info(tablet_dir, segments, 0), 15)) == [10, 20]
            assert reader.downloaded(tablet_dir) == ["seg-0", "seg-1"]  # one segment ahead, no more
            await asyncio.sleep(0.2)
            local = sorted(p.name for p in tmpdir.rglob("*.log"))
            assert local == [f"{0:020d}.log", f"{30:020d}.log"]

            # segment 1 was downloaded ahead: it is read from the local copy even once the remote
            # file is gone
            Path(remote_segment_path(tablet_dir, segments[1])).unlink()
            assert _offsets(await reader.read(_info(tablet_dir, segments, 1), 30)) == [30, 40, 50]
            assert reader.downloaded(tablet_dir) == ["seg-1", "seg-2"]  # segment 0 is behind
            await asyncio.sleep(0.2)
            local = sorted(p.name for p in tmpdir.rglob("*.log"))
            assert local == [f"{30:020d}.log", f"{60:020d}.log"]
        finally:
            await reader.close()
        assert list(tmpdir.rglob("*.log")) == []

    asyncio.run(main())


def test_a_missing_remote_segment_is_an_error_for_the_read_that_needs_it(tmp_path: Path) -> None:
    tablet_dir, segments = _remote_log(tmp_path / "remote")
    path = Path(remote_segment_path(tablet_dir, segments[0]))
    data = path.read_bytes()
    path.unlink()

    async def main() -> None:
        reader = RemoteLogReader(str(tmp_path / "io"), prefetch_num=1, download_threads=1)
        try:
            with pytest.raises(OSError):
                await reader.read(_info(tablet_dir, segments, 0), 0)
            path.write_bytes(data)  # back (a storage hiccup): the next read downloads it again
            assert _offsets(await reader.read(_info(tablet_dir, segments, 0), 0)) == [0, 10, 20]
        finally:
            await reader.close()

    asyncio.run(main())
