"""Reading batches of a remote segment on the server (for segments of an older schema) and the schema
ids recorded for each uploaded segment."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from log_batch_maker import make_batch

from strom.record.arrow_batch import build_arrow_log_batch
from strom.record.log_batch import iter_batches
from strom.server.tablet.remote_log import RemoteLog, RemoteSegment, oldest_schema_id, read_remote_batches


def remote_with_one_segment(tmp_path: Path) -> tuple[RemoteLog, list[bytes]]:
    batches = [make_batch(b"x" * 100, records=10, base_offset=base) for base in (100, 110, 120)]
    segment = tmp_path / "seg-1" / f"{100:020d}.log"
    segment.parent.mkdir()
    segment.write_bytes(b"".join(batches))
    remote = RemoteLog(str(tmp_path), [RemoteSegment("seg-1", 100, 130, segment.stat().st_size, 0, 1)])
    return remote, batches


def test_reads_from_the_batch_holding_the_offset_up_to_max_bytes(tmp_path: Path) -> None:
    remote, batches = remote_with_one_segment(tmp_path)
    assert read_remote_batches(remote, 115, 1) == batches[1]  # at least the one batch
    assert read_remote_batches(remote, 110, 10_000) == batches[1] + batches[2]
    two = read_remote_batches(remote, 100, len(batches[0]) + len(batches[1]) + 5)
    assert [h.base_offset for _, h in iter_batches(two)] == [100, 110]
    assert read_remote_batches(remote, 130, 10_000) == b""  # past the remote log


def test_the_oldest_schema_id_of_a_segment(tmp_path: Path) -> None:
    remote, _ = remote_with_one_segment(tmp_path)
    with open(tmp_path / "seg-1" / f"{100:020d}.log", "rb") as f:
        assert oldest_schema_id(f) == 1
    segment = remote.segments[0]
    assert not segment.needs_current_schema(1) and segment.needs_current_schema(2)
    assert RemoteSegment("old-manifest", 0, 10, 1, 0).needs_current_schema(1)  # unknown: rebuilt


def test_remote_segments_of_statistics_batches_are_read_by_their_headers(tmp_path: Path) -> None:
    """V1 and V2 headers are longer than V0's 48 bytes: the header-only reads must take enough."""
    records = pa.record_batch([pa.array(range(10), pa.int64())], names=["id"])
    batches = [
        build_arrow_log_batch(
            records, schema_id=schema_id, base_offset=base, statistics_columns=[0], magic=magic
        )
        for base, schema_id, magic in ((100, 2, 1), (110, 1, 2))
    ]
    segment = tmp_path / "seg-1" / f"{100:020d}.log"
    segment.parent.mkdir()
    segment.write_bytes(b"".join(batches))
    remote = RemoteLog(str(tmp_path), [RemoteSegment("seg-1", 100, 120, segment.stat().st_size, 0, 1)])
    with open(segment, "rb") as f:
        assert oldest_schema_id(f) == 1
    assert read_remote_batches(remote, 115, 1) == batches[1]
