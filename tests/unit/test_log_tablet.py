"""LogTablet: appends, reads, rolls, recovery, retention, timestamps and truncation."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest
from log_batch_maker import crash_image, make_batch, split_batches

from strom.common.errors import (
    CorruptRecordError,
    LogOffsetOutOfRangeError,
    LogStorageError,
    RecordTooLargeError,
)
from strom.record.log_batch import CRC_OFFSET
from strom.server.tablet.log import background_flush
from strom.server.tablet.log.background_flush import submit_delete
from strom.server.tablet.log.checkpoint import read_offset_checkpoint
from strom.server.tablet.log.lake_hold import LakeHold
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    LogTablet,
    TieredCopies,
)
from strom.server.tablet.log.segment import segment_file_name

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_ms=None, retention_ms=None)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(path: Path, config: LogConfig = SMALL, clock: Clock | None = None) -> LogTablet:
    return LogTablet.open(path, config, now_ms=clock or Clock())


def append_many(log: LogTablet, count: int, *, seed: int = 1, records: int = 2) -> list[bytes]:
    """Append `count` single-batch requests with random payloads; returns the payloads in order."""
    rng = random.Random(seed)
    payloads = []
    for _ in range(count):
        payload = rng.randbytes(rng.randint(1, 600))
        log.append_as_leader(make_batch(payload, records=records))
        payloads.append(payload)
    return payloads


def read_all(log: LogTablet, start: int = 0, max_bytes: int = 1500) -> list[tuple[int, int, int, bytes]]:
    out: list[tuple[int, int, int, bytes]] = []
    offset = start
    while offset < log.log_end_offset:
        batches = split_batches(log.read(offset, max_bytes).records)
        assert batches, f"no progress at offset {offset}"
        out.extend(batches)
        offset = batches[-1][1] + 1
    return out


def segment_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".log"))


def test_append_assigns_offsets_and_timestamps(tmp_path: Path) -> None:
    clock = Clock(5000)
    log = open_log(tmp_path, clock=clock)
    r1 = log.append_as_leader(make_batch(b"a", records=3))
    assert (r1.first_offset, r1.last_offset, r1.max_timestamp, r1.record_count, r1.duplicate) == (
        0,
        2,
        5000,
        3,
        False,
    )
    clock.now = 4000  # the clock goes backwards: commit timestamps do not
    r2 = log.append_as_leader(make_batch(b"b", records=2) + make_batch(b"c", records=1))
    assert (r2.first_offset, r2.last_offset, r2.max_timestamp, r2.record_count) == (3, 5, 5000, 3)
    assert log.log_end_offset == 6
    batches = split_batches(log.read(0, 1 << 20).records)
    assert [(b[0], b[1], b[2], b[3]) for b in batches] == [
        (0, 2, 5000, b"a"),
        (3, 4, 5000, b"b"),
        (5, 5, 5000, b"c"),
    ]
    log.close()


def test_append_and_read_across_many_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    payloads = append_many(log, 400)
    assert log.log_end_offset == 800
    assert log.segment_count > 20
    assert all(info.size <= 4096 for info in log.closed_segments())
    infos = log.closed_segments()
    assert [i.base_offset for i in infos[1:]] == [i.next_offset for i in infos[:-1]]
    assert [b[3] for b in read_all(log)] == payloads

    # every offset, including those in the middle of a batch, reads from its containing batch
    for offset in range(0, 800, 7):
        first = split_batches(log.read(offset, 1).records)[0]
        assert first[0] <= offset <= first[1]
        assert first[3] == payloads[offset // 2]
    log.close()

    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 800
    assert [b[3] for b in read_all(reopened, 0, 4000)] == payloads
    reopened.close()


def test_read_limits(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append_as_leader(make_batch(bytes([i]) * 100, records=5))  # 148 bytes each
    one = 148
    assert len(log.read(0, 10).records) == one  # min_one_batch returns one whole batch
    assert log.read(0, 10, min_one_batch=False).records == b""
    assert len(log.read(0, 3 * one + 20).records) == 3 * one  # whole batches only
    assert split_batches(log.read(12, 10_000, max_offset=30).records)[-1][1] == 29
    assert log.read(12, 10_000, max_offset=12).records == b""
    # a batch holding the bound (offsets 30..34) is not returned
    assert split_batches(log.read(0, 10_000, max_offset=32).records)[-1][1] == 29
    assert log.read(50, 100).records == b""  # at the log end: nothing yet
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(51, 100)
    log.update_high_watermark(20)
    result = log.read(0, 100_000, max_offset=log.high_watermark)
    assert result.high_watermark == 20 and result.log_end_offset == 50
    assert split_batches(result.records)[-1][1] == 19
    log.close()


def test_bad_batches_are_refused_and_change_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, max_batch_bytes=1000))
    log.append_as_leader(make_batch(b"ok"))
    size_before = log.size_in_bytes
    good = make_batch(b"good" * 10)
    bad = bytearray(make_batch(b"bad" * 10))
    bad[60] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(good + bytes(bad))  # the good first batch is not written either
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good[:-3])  # truncated
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + b"\x00" * 5)  # trailing junk
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch(b"x" * 2000))
    wrong_magic = bytearray(good)
    wrong_magic[12] = 7
    with pytest.raises(CorruptRecordError, match="magic"):
        log.append_as_leader(bytes(wrong_magic))
    assert log.log_end_offset == 1 and log.size_in_bytes == size_before
    assert log.append_as_leader(b"").record_count == 0
    assert log.append_as_leader(good).first_offset == 1
    log.close()


def test_leader_append_stores_patched_headers_and_leaves_the_input_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch())
    buf = bytearray(make_batch(b"z"))
    original = bytes(buf)
    log.append_as_leader(memoryview(buf))
    assert buf == original  # written from views with patched header copies, never patched in place
    stored = log.read(1, 1 << 20).records
    assert int.from_bytes(stored[0:8], "little") == 1
    assert stored[CRC_OFFSET:] == original[CRC_OFFSET:]
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    clock = Clock(0)
    log = open_log(tmp_path, LogConfig(segment_ms=1000, retention_ms=None), clock)
    log.append_as_leader(make_batch())
    clock.now = 999
    log.append_as_leader(make_batch())
    assert log.segment_count == 1
    clock.now = 1000
    log.append_as_leader(make_batch())
    assert log.segment_count == 2 and log.closed_segments()[0].next_offset == 2
    log.close()


def test_roll_when_index_is_full(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=0, index_max_bytes=8 * 4)
    log = open_log(tmp_path, config)
    for _ in range(12):
        log.append_as_leader(make_batch())
    assert log.segment_count == 3  # 1 implicit + 4 indexed batches per segment
    assert [b[0] for b in read_all(log)] == list(range(12))
    log.close()


def test_clean_reopen_restores_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_many(log, 100)
    log.update_high_watermark(150)
    log.advance_log_start_offset(33)
    log.checkpoint_high_watermark()
    log.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = open_log(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (33, 150, 200)
    assert reopened.recovery_point == 200
    reopened.close()


def test_recovery_drops_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    live = tmp_path / "live"
    log = open_log(live)
    payloads = append_many(log, 300)
    image = crash_image(live, tmp_path / "crash")
    log.close()

    active = sorted(image.glob("*.log"))[-1]
    batches = split_batches(active.read_bytes())
    last_batch_len = 48 + len(batches[-1][3])
    with active.open("r+b") as f:
        f.truncate(active.stat().st_size - last_batch_len // 2)  # tear the last batch in half
    for index in image.glob("*.index"):
        index.write_bytes(b"\x07" * 5)  # and leave garbage in every index

    recovered = open_log(image)
    assert recovered.log_end_offset == 598 == batches[-1][0]
    assert [b[3] for b in read_all(recovered)] == payloads[:-1]
    for offset in range(0, 598, 11):
        first = split_batches(recovered.read(offset, 1).records)[0]
        assert first[0] <= offset <= first[1]
    assert recovered.append_as_leader(make_batch(b"after")).first_offset == 598
    assert read_all(recovered, 598)[0][3] == b"after"
    recovered.close()
    # the rebuilt indexes are good enough to reopen without another recovery
    again = open_log(image)
    assert again.log_end_offset == 599
    again.close()


def test_recovery_drops_garbage_after_the_last_batch(tmp_path: Path) -> None:
    live = tmp_path / "live"
    log = open_log(live)
    append_many(log, 50)
    image = crash_image(live, tmp_path / "crash")
    log.close()
    active = sorted(image.glob("*.log"))[-1]
    size = active.stat().st_size
    with active.open("ab") as f:
        f.write(os.urandom(3000))
    recovered = open_log(image)
    assert recovered.log_end_offset == 100
    assert active.stat().st_size == size
    recovered.close()


def test_recovery_truncates_at_corruption_and_deletes_later_segments(tmp_path: Path) -> None:
    live = tmp_path / "live"
    log = open_log(live)
    payloads = append_many(log, 200)
    image = crash_image(live, tmp_path / "crash")
    log.close()
    logs = sorted(image.glob("*.log"))
    assert len(logs) > 6
    victim = logs[3]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0x55  # somewhere in the first batches of the 4th segment
    victim.write_bytes(bytes(data))
    # Pretend no rolled segment had been fsynced yet (the background fsyncs may well have run):
    # everything from offset 0 is then recovered.
    (image / RECOVERY_POINT_FILE).unlink(missing_ok=True)  # a new log writes none until it moves
    recovered = open_log(image)
    assert segment_files(image)[-1] == victim.name
    survivors = read_all(recovered)
    assert recovered.log_end_offset == survivors[-1][1] + 1 if survivors else 0
    assert [b[3] for b in survivors] == payloads[: len(survivors)]
    assert recovered.log_end_offset < int(logs[4].name[:20])
    recovered.close()


def test_clean_shutdown_with_missing_index_is_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    payloads = append_many(log, 100)
    log.close()
    for index in tmp_path.glob("*.index"):
        index.unlink()
    reopened = open_log(tmp_path)
    assert [b[3] for b in read_all(reopened)] == payloads
    reopened.close()


def test_flush_moves_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(flush_interval_messages=5))
    first = log.append_as_leader(make_batch(records=3))
    assert first.durable is None and log.recovery_point == 0
    second = log.append_as_leader(make_batch(records=3))
    assert second.durable is not None  # the fsync runs on the background thread, not in the append
    second.durable.result(10)
    log.checkpoint_high_watermark()  # takes in the finished fsyncs
    assert log.recovery_point == 6
    log.close()


def test_flushing_every_message_syncs_each_append_of_leader_and_follower(tmp_path: Path) -> None:
    """`log.flush.interval-messages: 1`: every append starts an fsync of everything up to it (off the
    event loop); once that is done (what the acknowledgement, and a follower's next fetch, wait for)
    the recovery point is at the log end, and checkpointed."""
    config = LogConfig(flush_interval_messages=1)
    leader = open_log(tmp_path / "leader", config)
    follower = open_log(tmp_path / "follower", config)
    for _ in range(3):
        appended = leader.append_as_leader(make_batch(records=2))
        assert appended.durable is not None
        appended.durable.result(10)
        leader.checkpoint_high_watermark()
        assert leader.recovery_point == leader.log_end_offset
        copied = follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).records)
        assert copied.durable is not None
        copied.durable.result(10)
        follower.checkpoint_high_watermark()
        assert follower.recovery_point == follower.log_end_offset == leader.log_end_offset
    assert read_offset_checkpoint(tmp_path / "follower" / RECOVERY_POINT_FILE) == 6
    leader.close()
    follower.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    clock = Clock(10_000)
    log = open_log(tmp_path, clock=clock)
    for _ in range(100):
        log.append_as_leader(make_batch(b"t" * 300, records=2))
        clock.now += 10
    assert log.segment_count > 3
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(10_000) == 0
    assert log.offset_for_timestamp(10_001) == 2
    assert log.offset_for_timestamp(10_500) == 100
    assert log.offset_for_timestamp(10_990) == 198
    assert log.offset_for_timestamp(10_991) is None
    log.update_high_watermark(200)
    log.advance_log_start_offset(51)
    assert log.offset_for_timestamp(0) == 51
    log.close()


def test_retention_deletes_old_closed_segments(tmp_path: Path) -> None:
    clock = Clock(0)
    config = LogConfig(segment_bytes=4096, segment_ms=None, retention_ms=1000)
    log = open_log(tmp_path, config, clock)
    for _ in range(60):
        log.append_as_leader(make_batch(b"r" * 400))
        clock.now += 10  # 60 batches over 600 ms, about 8 per segment
    segments_before = log.segment_count
    assert segments_before > 5
    assert log.apply_retention(clock.now) == 0  # nothing older than a second
    log.update_high_watermark(log.log_end_offset)
    deleted = log.apply_retention(1300)  # batches committed before t=300 have expired
    assert deleted > 0
    assert log.segment_count == segments_before - deleted
    first = log.closed_segments()[0]
    assert log.log_start_offset == first.base_offset
    assert all(info.max_timestamp >= 300 for info in log.closed_segments())
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(0, 100)
    assert split_batches(log.read(log.log_start_offset, 100).records)[0][0] == log.log_start_offset

    # everything expired: the active segment is rolled and goes too, but only below the HW
    log.update_high_watermark(log.log_end_offset - 5)
    log.apply_retention(10**9)
    active_base = log.log_start_offset
    assert log.segment_count == 1 and active_base <= log.high_watermark < log.log_end_offset
    assert log.read(active_base, 100).records  # the active segment is kept while not fully replicated
    log.update_high_watermark(log.log_end_offset)
    assert log.apply_retention(10**9) == 1
    assert log.segment_count == 1 and log.log_start_offset == log.log_end_offset == 60
    assert log.append_as_leader(make_batch()).first_offset == 60
    log.close()


def test_retention_disabled_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=0))
    append_many(log, 100)
    log.update_high_watermark(log.log_end_offset)
    assert log.apply_retention(10**15) == 0
    log.close()


def test_advance_log_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_many(log, 100)
    segments = log.segment_count
    with pytest.raises(LogOffsetOutOfRangeError):
        log.advance_log_start_offset(10)  # beyond the high watermark (0)
    log.update_high_watermark(200)
    second = log.closed_segments()[1]
    log.advance_log_start_offset(second.base_offset + 1)
    assert log.segment_count == segments - 1
    assert log.log_start_offset == second.base_offset + 1
    with pytest.raises(LogOffsetOutOfRangeError):
        log.read(second.base_offset, 10)
    log.close()


def test_deleted_segments_leave_the_log_at_once_and_their_files_on_the_background_thread(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    append_many(log, 100)
    log.update_high_watermark(log.log_end_offset)
    doomed = log.closed_segments()[:4]
    released = threading.Event()
    blocker = background_flush._get_executor().submit(released.wait)  # holds the background thread
    try:
        log.advance_log_start_offset(doomed[-1].next_offset)
        names = {p.name for p in tmp_path.iterdir()}
        for segment in doomed:  # out of the log now, the unlink waits for the background thread
            assert segment.path.name not in names and segment.path.name + ".deleted" in names
        # a segment created again at a deleted base (a follower starting over) is not touched later
        log.truncate_fully_and_start_at(doomed[0].base_offset)
        log.append_as_leader(make_batch(b"again"))
    finally:
        released.set()
    blocker.result()
    submit_delete([]).result()  # the background thread runs jobs in order
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".deleted")]
    assert split_batches(log.read(doomed[0].base_offset, 100).records)[0][3] == b"again"
    log.close()


def test_retention_keeps_the_rest_of_the_log_intact(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    payloads = append_many(log, 100, records=1)
    log.update_high_watermark(log.log_end_offset)
    start = log.closed_segments()[3].base_offset
    log.advance_log_start_offset(start)
    submit_delete([]).result()
    assert [b[3] for b in read_all(log, start)] == payloads[start:]
    assert segment_files(tmp_path)[0] == segment_file_name(start, ".log")
    log.close()


def test_open_deletes_segment_files_a_crash_left_behind(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_many(log, 30)
    log.close()
    for suffix in (".log", ".index", ".timeindex"):
        (tmp_path / (segment_file_name(0, suffix) + ".deleted")).write_bytes(b"x" * 10)
    (tmp_path / (segment_file_name(5, ".log") + ".deleted")).write_bytes(b"x" * 10)
    log = open_log(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".deleted")]
    assert log.log_end_offset == 60
    log.close()


def test_truncate_to_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    payloads = append_many(log, 200)
    log.update_high_watermark(400)
    middle = log.closed_segments()[5]
    target = middle.base_offset + 3  # mid-segment, mid-batch offset
    assert log.truncate_to(target)
    assert log.log_end_offset == target - 1  # the batch holding the target went too
    assert log.high_watermark == log.log_end_offset
    assert segment_files(tmp_path)[-1] == segment_file_name(middle.base_offset, ".log")
    assert [b[3] for b in read_all(log)] == payloads[: (target - 1) // 2]
    assert not log.truncate_to(10_000)
    assert log.append_as_leader(make_batch(b"new", records=2)).first_offset == target - 1
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == target + 1
    reopened.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_many(log, 50)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert segment_files(tmp_path) == [segment_file_name(1000, ".log")]
    assert log.append_as_leader(make_batch()).first_offset == 1000
    log.close()
    reopened = open_log(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1001)
    reopened.close()


def test_follower_append_keeps_leader_offsets(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    append_many(leader, 30)
    follower = open_log(tmp_path / "follower")
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read(offset, 700).records
        result = follower.append_as_follower(chunk)
        assert result.first_offset == offset
        offset = result.last_offset + 1
    assert follower.log_end_offset == leader.log_end_offset
    assert read_all(follower) == read_all(leader)  # same offsets, timestamps and payloads
    with pytest.raises(LogStorageError, match="out of order"):
        follower.append_as_follower(leader.read(10, 100).records)
    corrupt = bytearray(make_batch(b"x" * 20, base_offset=60))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(corrupt))
    assert follower.log_end_offset == 60
    leader.close()
    follower.close()


def test_closed_tablet_refuses_calls(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(LogStorageError):
        log.append_as_leader(make_batch())


def test_retention_of_a_lake_enabled_log_waits_for_the_lake(tmp_path: Path) -> None:
    """Past the TTL, a segment goes only once the lake offset covers all its records; the hold bound
    lets the rest go anyway, and says so."""
    clock = Clock(0)
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, segment_ms=None, retention_ms=1000), clock)
    for _ in range(60):
        log.append_as_leader(make_batch(b"r" * 400))
        clock.now += 10
    log.update_high_watermark(log.log_end_offset)
    segments = log.segment_count
    bases = [s.base_offset for s in log.closed_segments()]

    held = log.retain(10**6, LakeHold(lake_end_offset=-1, max_hold_ms=None))  # nothing tiered yet
    assert held.deleted == 0 and log.log_start_offset == 0 and log.segment_count == segments
    assert held.held_segments == segments and held.held_bytes == log.size_in_bytes

    # the lake reaches into the third segment: only the two below it go
    partial = log.retain(10**6, LakeHold(lake_end_offset=bases[2] + 1, max_hold_ms=None))
    assert (partial.deleted, partial.forced) == (2, 0) and log.log_start_offset == bases[2]
    assert partial.held_segments == segments - 2

    # within the bound nothing more goes; past it the rest is deleted and reported as forced
    bound = LakeHold(lake_end_offset=bases[2] + 1, max_hold_ms=10**6)
    assert log.retain(10**6, bound).deleted == 0
    forced = log.retain(3 * 10**6, bound)
    assert forced.forced == forced.deleted == segments - 2 and forced.forced_end_offset == 60
    assert log.log_start_offset == log.log_end_offset == 60 and forced.held_segments == 0
    log.close()


def test_retention_of_a_tiered_log_goes_by_local_ttl_and_only_removes_copies(tmp_path: Path) -> None:
    """The leader of a tiered log (as in Fluss): local segments go by table.log.local-ttl, and only
    once remote storage has them; the lake hold still keeps what the lake lacks, but a copy removed
    past the hold bound is no loss (the remote log keeps it), so it is not reported as forced."""
    clock = Clock(0)
    # table.log.ttl of an hour: plain retention deletes nothing at t=10 s
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, segment_ms=None, retention_ms=3_600_000), clock)
    for _ in range(60):
        log.append_as_leader(make_batch(b"r" * 400))
        clock.now += 10
    log.update_high_watermark(log.log_end_offset)
    segments = log.segment_count
    bases = [s.base_offset for s in log.closed_segments()]
    assert log.retain(10_000).deleted == 0

    # nothing copied yet: nothing goes, however old
    assert log.retain(10_000, tiered=TieredCopies(copied_end=0, local_ttl_ms=1000)).deleted == 0
    # a local TTL of 0 disables TTL cleanup of local copies
    assert log.retain(10_000, tiered=TieredCopies(copied_end=60, local_ttl_ms=0)).deleted == 0
    # not yet expired by the local TTL
    assert log.retain(1000, tiered=TieredCopies(copied_end=60, local_ttl_ms=1000)).deleted == 0
    # remote storage holds the first three segments: exactly those go
    copied = log.retain(10_000, tiered=TieredCopies(copied_end=bases[3], local_ttl_ms=1000))
    assert copied.deleted == 3 and log.log_start_offset == bases[3]

    # the lake hold still applies to local copies; past its bound they go, but nothing is lost
    hold = LakeHold(lake_end_offset=bases[4] + 1, max_hold_ms=10**6)
    all_copied = TieredCopies(copied_end=bases[-1], local_ttl_ms=1000)
    held = log.retain(10_000, hold, all_copied)
    assert held.deleted == 1 and log.log_start_offset == bases[4] and held.held_segments > 0
    past_bound = log.retain(3 * 10**6, hold, all_copied)
    assert past_bound.forced == 0 and past_bound.deleted == len(bases) - 5
    assert log.log_start_offset == bases[-1] and log.segment_count == segments - len(bases) + 1
    # past table.log.ttl a segment goes whether copied or not (remote retention would drop it at once)
    assert log.retain(10**8, tiered=all_copied).deleted == 2  # the last closed one, then the rolled active
    assert log.log_start_offset == log.log_end_offset == 60
    log.close()
