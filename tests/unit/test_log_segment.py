"""LogSegment and its sparse offset and time indexes, without a tablet around them."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_batch_maker import make_batch, split_batches

from strom.record.log_batch import patch_offset_and_timestamp
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.offset_index import OffsetIndex
from strom.server.tablet.log.segment import LogSegment, segment_file_name
from strom.server.tablet.log.sparse_index import CorruptIndexError
from strom.server.tablet.log.time_index import TimeIndex

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)


def fill(segment: LogSegment, count: int, *, start_offset: int = 100, records: int = 3) -> list[bytes]:
    """Append `count` batches of `records` records with timestamps 1000, 1010, ...; one write each."""
    written = []
    offset = start_offset
    for i in range(count):
        batch = bytearray(make_batch(bytes([i % 251]) * (50 + i % 7 * 40), records=records))
        ts = 1000 + 10 * i
        patch_offset_and_timestamp(batch, 0, offset, ts)
        segment.append(batch, [(0, len(batch), offset, ts)], offset + records)
        written.append(bytes(batch))
        offset += records
    return written


def test_offset_index_lookup_truncate_and_roundtrip(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 1000, 1024)
    assert index.lookup(5000) == (1000, 0)
    for i in range(1, 11):
        index.append(1000 + 10 * i, 100 * i)
    assert index.lookup(1000) == (1000, 0)
    assert index.lookup(1010) == (1010, 100)
    assert index.lookup(1019) == (1010, 100)
    assert index.lookup(9999) == (1100, 1000)
    with pytest.raises(ValueError):
        index.append(1100, 2000)  # keys must increase
    index.persist()
    loaded = OffsetIndex.load(index.path, 1000, 1024)
    assert [loaded.lookup(o) for o in range(1000, 1120, 3)] == [index.lookup(o) for o in range(1000, 1120, 3)]

    index.truncate_to_position(500)  # drops entries at positions >= 500
    assert len(index) == 4 and index.lookup(9999) == (1040, 400)
    index.persist()
    assert index.path.stat().st_size == 4 * 8
    assert OffsetIndex.load(index.path, 1000, 1024).lookup(9999) == (1040, 400)


def test_offset_index_is_full_and_rejects_bad_files(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 8 * 3)
    for i in range(3):
        assert not index.is_full
        index.append(i + 1, i + 1)
    assert index.is_full
    (tmp_path / "bad.index").write_bytes(b"\x01" * 13)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(tmp_path / "bad.index", 0, 1024)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(tmp_path / "missing.index", 0, 1024)


def test_time_index_keeps_only_newer_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", 50, 1024)
    index.maybe_append(100, 60)
    index.maybe_append(100, 70)  # not newer: ignored
    index.maybe_append(90, 75)  # older: ignored
    index.maybe_append(200, 80)
    assert len(index) == 2
    assert index.lookup_before(100) is None
    assert index.lookup_before(101) == 60
    assert index.lookup_before(10**12) == 80
    index.truncate_to_offset(80)
    assert index.last_entry() == (100, 60)


def test_segment_translate_read_and_timestamps(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 100, CONFIG)
    written = fill(segment, 200)
    assert segment.next_offset == 100 + 3 * 200
    assert segment.size == sum(map(len, written))
    assert len(segment.offset_index) > 10  # sparse, but present
    positions = [0]
    for batch in written:
        positions.append(positions[-1] + len(batch))
    for offset in range(100, 700, 7):
        i = (offset - 100) // 3
        assert segment.translate_offset(offset) == (positions[i], len(written[i]))
    assert segment.translate_offset(700) is None

    data = segment.read(positions[10], len(written[10]) + len(written[11]))
    assert data == written[10] + written[11]

    assert segment.max_timestamp == 1000 + 10 * 199
    assert segment.find_offset_by_timestamp(0) == 100
    assert segment.find_offset_by_timestamp(1000 + 10 * 50) == 100 + 3 * 50
    assert segment.find_offset_by_timestamp(1000 + 10 * 50 + 1) == 100 + 3 * 51
    assert segment.find_offset_by_timestamp(10**13) is None
    segment.close()


def test_segment_reopen_uses_indexes_and_recover_rebuilds_them(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, CONFIG)
    fill(segment, 120, start_offset=0)
    next_offset, max_ts, size = segment.next_offset, segment.max_timestamp, segment.size
    segment.close()
    index_bytes = (tmp_path / segment_file_name(0, ".index")).read_bytes()
    time_bytes = (tmp_path / segment_file_name(0, ".timeindex")).read_bytes()

    reopened = LogSegment.open(tmp_path, 0, CONFIG)
    assert not reopened.needs_recovery
    assert (reopened.next_offset, reopened.max_timestamp, reopened.size) == (next_offset, max_ts, size)
    assert reopened.first_timestamp == 1000
    assert reopened.recover() == 0
    reopened.close()
    # recovery rebuilt exactly the indexes the appends had built
    assert (tmp_path / segment_file_name(0, ".index")).read_bytes() == index_bytes
    assert (tmp_path / segment_file_name(0, ".timeindex")).read_bytes() == time_bytes


def test_segment_open_flags_missing_index_and_torn_tail(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, CONFIG)
    written = fill(segment, 30, start_offset=0)
    segment.close()
    (tmp_path / segment_file_name(0, ".index")).unlink()
    reopened = LogSegment.open(tmp_path, 0, CONFIG)
    assert reopened.needs_recovery
    assert reopened.recover() == 0 and reopened.next_offset == 90
    reopened.close()

    log = tmp_path / segment_file_name(0, ".log")
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 5)
    torn = LogSegment.open(tmp_path, 0, CONFIG)
    assert torn.needs_recovery
    assert torn.recover() == len(written[-1]) - 5
    assert torn.next_offset == 87 and torn.size == sum(map(len, written[:-1]))
    torn.close()


def test_segment_recover_stops_at_corrupt_crc(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, CONFIG)
    written = fill(segment, 20, start_offset=0)
    segment.close()
    log = tmp_path / segment_file_name(0, ".log")
    data = bytearray(log.read_bytes())
    at = sum(map(len, written[:12])) + 60  # inside the payload of batch 12
    data[at] ^= 0xFF
    log.write_bytes(bytes(data))
    reopened = LogSegment.open(tmp_path, 0, CONFIG)
    assert reopened.recover() == sum(map(len, written[12:]))
    assert reopened.next_offset == 36
    assert [b[0] for b in split_batches(reopened.read(0, 1 << 20))] == list(range(0, 36, 3))
    reopened.close()


def test_segment_truncate_to(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, CONFIG)
    written = fill(segment, 50, start_offset=0)
    removed = segment.truncate_to(31)  # offset 31 lies in batch 10 (offsets 30..32)
    assert removed == sum(map(len, written[10:]))
    assert segment.next_offset == 30 and segment.size == sum(map(len, written[:10]))
    assert segment.max_timestamp == 1000 + 10 * 9
    assert segment.find_offset_by_timestamp(1000 + 10 * 9) == 27
    assert segment.truncate_to(30) == 0
    # appends continue cleanly after a truncation
    fill(segment, 5, start_offset=30)
    assert segment.next_offset == 45
    segment.close()
    reopened = LogSegment.open(tmp_path, 0, CONFIG)
    assert not reopened.needs_recovery and reopened.next_offset == 45
    reopened.close()
