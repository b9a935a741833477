"""Idempotent writers: duplicates, sequence errors, expiry and persistence of the writer state."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_batch_maker import crash_image, make_batch, split_batches

from strom.common.errors import DuplicateSequenceError, OutOfOrderSequenceError
from strom.server.tablet.log.log_config import DAY_MS, LogConfig
from strom.server.tablet.log.log_tablet import LogTablet
from strom.server.tablet.log.writer_state import KAFKA_WRITER_BIT, WriterStateManager

CONFIG = LogConfig(segment_bytes=4096, segment_ms=None, retention_ms=None, writer_expiration_ms=DAY_MS)
T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(writer: int, seq: int, payload: bytes = b"w" * 40, records: int = 2) -> bytes:
    return make_batch(payload, records=records, writer_id=writer, sequence=seq)


def test_in_order_sequences_and_duplicates(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path, CONFIG, now_ms=Clock())
    results = [log.append_as_leader(batch(7, seq)) for seq in range(4)]
    assert [r.first_offset for r in results] == [0, 2, 4, 6]
    size = log.size_in_bytes

    retry = log.append_as_leader(batch(7, 2))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset, retry.max_timestamp) == (4, 5, results[2].max_timestamp)
    assert log.log_end_offset == 8 and log.size_in_bytes == size  # nothing written again

    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 5))  # gap
    assert log.append_as_leader(batch(7, 4)).first_offset == 8
    # only the last five batches are remembered: an older retry is out of order, not a duplicate
    for seq in range(5, 10):
        log.append_as_leader(batch(7, seq))
    assert log.append_as_leader(batch(7, 5)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 4))
    log.close()


def test_unknown_writer_must_start_at_zero_and_no_writer_is_unchecked(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path, CONFIG, now_ms=Clock())
    with pytest.raises(OutOfOrderSequenceError, match="must start at 0"):
        log.append_as_leader(batch(42, 3))
    assert log.log_end_offset == 0
    for _ in range(3):
        log.append_as_leader(make_batch())  # writer id -1: no idempotence, repeats are appended
    assert log.log_end_offset == 3
    log.append_as_leader(batch(42, 0))
    log.append_as_leader(batch(43, 0))  # writers are independent
    log.append_as_leader(batch(42, 1))
    log.close()


def test_batches_of_one_request_are_checked_in_order(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path, CONFIG, now_ms=Clock())
    result = log.append_as_leader(batch(1, 0) + batch(1, 1) + batch(2, 0))
    assert (result.first_offset, result.last_offset) == (0, 5)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(1, 2) + batch(1, 4))
    assert log.log_end_offset == 6  # all or nothing
    log.close()


def test_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    writers = WriterStateManager(tmp_path, DAY_MS)
    writers.record(5, 2**31 - 1, 0, 0, T0)
    assert writers.validate([(5, 0)], leader=True) is None
    with pytest.raises(OutOfOrderSequenceError):
        writers.validate([(5, 1)], leader=True)


def test_follower_rules(tmp_path: Path) -> None:
    writers = WriterStateManager(tmp_path, DAY_MS)
    assert writers.validate([(9, 17)], leader=False) is None  # no state: the leader decided
    writers.record(9, 17, 100, 101, T0)
    with pytest.raises(DuplicateSequenceError):
        writers.validate([(9, 17)], leader=False)
    with pytest.raises(OutOfOrderSequenceError):
        writers.validate([(9, 19)], leader=False)


def test_expired_writers_are_forgotten(tmp_path: Path) -> None:
    clock = Clock()
    log = LogTablet.open(tmp_path, CONFIG, now_ms=clock)
    log.append_as_leader(batch(3, 0))
    log.append_as_leader(batch(4, 0))
    clock.now += DAY_MS // 2
    log.append_as_leader(batch(4, 1))
    assert log.remove_expired_writers(T0 + DAY_MS) == 0
    assert log.remove_expired_writers(T0 + DAY_MS + 1) == 1  # writer 3 idle for more than a day
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(3, 1))
    log.append_as_leader(batch(4, 2))
    log.close()


def test_writer_state_survives_clean_reopen(tmp_path: Path) -> None:
    clock = Clock()
    log = LogTablet.open(tmp_path, CONFIG, now_ms=clock)
    for seq in range(60):  # enough to roll several segments
        log.append_as_leader(batch(11, seq, b"s" * 200))
    log.close()
    assert list(tmp_path.glob("*.writer_snapshot"))
    reopened = LogTablet.open(tmp_path, CONFIG, now_ms=clock)
    retry = reopened.append_as_leader(batch(11, 58, b"s" * 200))
    assert retry.duplicate and retry.first_offset == 116
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append_as_leader(batch(11, 61))
    assert reopened.append_as_leader(batch(11, 60)).first_offset == 120
    reopened.close()


def test_writer_state_rebuilt_after_crash(tmp_path: Path) -> None:
    clock = Clock()
    live = tmp_path / "live"
    log = LogTablet.open(live, CONFIG, now_ms=clock)
    for seq in range(45):
        log.append_as_leader(batch(21, seq, b"c" * 150) + batch(22, seq, b"d" * 10))
    assert log.segment_count > 2
    image = crash_image(live, tmp_path / "crash")
    log.close()
    for snap in sorted(image.glob("*.writer_snapshot"))[-2:]:
        snap.unlink()  # lose the newest snapshots too: replay must cover more of the log

    recovered = LogTablet.open(image, CONFIG, now_ms=clock)
    dup = recovered.append_as_leader(batch(22, 44, b"d" * 10))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (178, 179)
    assert recovered.append_as_leader(batch(21, 45)).first_offset == 180
    with pytest.raises(OutOfOrderSequenceError):
        recovered.append_as_leader(batch(22, 46))
    recovered.close()


def test_snapshot_loading_skips_expired_writers(tmp_path: Path) -> None:
    clock = Clock()
    log = LogTablet.open(tmp_path, CONFIG, now_ms=clock)
    log.append_as_leader(batch(1, 0))
    clock.now += 2 * DAY_MS
    log.append_as_leader(batch(2, 0))
    log.close()
    reopened = LogTablet.open(tmp_path, CONFIG, now_ms=clock)
    assert set(reopened.writer_state.writers) == {2}
    reopened.close()


def test_truncation_rewinds_writer_state(tmp_path: Path) -> None:
    log = LogTablet.open(tmp_path, CONFIG, now_ms=Clock())
    for seq in range(40):
        log.append_as_leader(batch(8, seq, b"t" * 150))
    log.update_high_watermark(log.log_end_offset)
    assert log.truncate_to(50)  # keeps sequences 0..24 (offsets 0..49)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(8, 30))
    assert not log.append_as_leader(batch(8, 25)).duplicate
    assert split_batches(log.read(50, 1000).records)[0][0] == 50
    log.truncate_fully_and_start_at(500)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(8, 26))
    log.close()


def test_kafka_producers_number_records_not_batches(tmp_path: Path) -> None:
    writers = WriterStateManager(tmp_path, DAY_MS)
    kafka = KAFKA_WRITER_BIT + 7
    assert writers.validate([(kafka, 0, 3), (kafka, 3, 2)], leader=True) is None
    writers.record(kafka, 0, 0, 2, T0)  # 3 records: sequences 0..2
    writers.record(kafka, 3, 3, 4, T0)  # 2 records: sequences 3..4
    with pytest.raises(OutOfOrderSequenceError, match="must be 5"):
        writers.validate([(kafka, 4, 1)], leader=True)  # a Fluss writer's next would be 4
    duplicate = writers.validate([(kafka, 3, 2)], leader=True)  # a retry: answered with where it went
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (3, 4)
    assert writers.validate([(kafka, 5, 1)], leader=True) is None
