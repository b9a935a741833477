"""LogRecordBatch framing, CRC and the ARROW payload (reference §4.1)."""

from __future__ import annotations

import struct

import google_crc32c
import pyarrow as pa
import pytest

from strom.common.errors import CorruptRecordError
from strom.record.arrow_batch import (
    SMALL_BATCH_BYTES,
    build_arrow_log_batch,
    decode_arrow_batch,
    project_arrow_batch,
    serialize_arrow_records,
)
from strom.record.batch_statistics import collect_statistics
from strom.record.batch_validation import check_log_batch
from strom.record.change_type import ChangeType
from strom.record.crc import crc32c
from strom.record.log_batch import (
    V0_HEADER_SIZE,
    V1_HEADER_SIZE,
    V2_HEADER_SIZE,
    LogBatchHeader,
    crc_is_valid,
    iter_batches,
    patch_leader_epoch,
    patch_offset_and_timestamp,
    read_header,
    records_offset,
    write_crc,
)


def hand_built_batch(
    records: bytes,
    *,
    magic: int = 0,
    stats: bytes = b"",
    base_offset: int = 100,
    timestamp: int = 1_700_000_000_000,
    schema_id: int = 3,
    attributes: int = 1,
    last_offset_delta: int = 4,
    writer_id: int = 77,
    batch_sequence: int = 9,
    record_count: int = 5,
    leader_epoch: int = -1,
) -> bytes:
    """A batch laid out field by field from the reference table, independently of the builder
    (V2: Fluss 1.0's LogRecordBatchFormat, the leader epoch between commit timestamp and CRC)."""
    tail = struct.pack(
        "<hbiqii", schema_id, attributes, last_offset_delta, writer_id, batch_sequence, record_count
    )
    if magic in (1, 2):
        tail += struct.pack("<i", len(stats)) + stats
    tail += records
    crc = google_crc32c.value(tail)
    if magic == 2:
        head = struct.pack("<qibqiI", base_offset, 29 + len(tail) - 12, magic, timestamp, leader_epoch, crc)
    else:
        head = struct.pack("<qibqI", base_offset, 25 + len(tail) - 12, magic, timestamp, crc)
    return head + tail


SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])


def sample_records(n: int = 5) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(range(n), pa.int32()),
            pa.array([f"name{i}" if i % 3 else None for i in range(n)], pa.string()),
            pa.array([i * 1.5 for i in range(n)], pa.float64()),
        ],
        schema=SCHEMA,
    )


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(memoryview(b"123456789")) == 0xE3069283
    assert crc32c(bytearray(b"123456789")) == 0xE3069283
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    big = bytes(range(256)) * 1024  # large enough for the zero-copy path
    assert crc32c(memoryview(big)[3:]) == google_crc32c.value(big[3:])
    assert crc32c(pa.py_buffer(big)) == google_crc32c.value(big)


def test_read_header_of_hand_built_v0_batch() -> None:
    batch = hand_built_batch(b"\x01\x02\x03")
    assert len(batch) == V0_HEADER_SIZE + 3
    h = read_header(batch)
    assert h == LogBatchHeader(
        base_offset=100,
        length=len(batch) - 12,
        magic=0,
        commit_timestamp=1_700_000_000_000,
        crc=google_crc32c.value(batch[25:]),
        schema_id=3,
        attributes=1,
        last_offset_delta=4,
        writer_id=77,
        batch_sequence=9,
        record_count=5,
    )
    assert h.size == len(batch)
    assert h.last_offset == 104
    assert h.next_offset == 105
    assert h.is_append_only
    assert records_offset(batch, 0, h) == 48
    assert crc_is_valid(batch, 0, h)


def test_crc_covers_schema_id_to_end_only() -> None:
    batch = bytearray(hand_built_batch(b"payload"))
    h = read_header(batch)
    for pos in (25, 30, len(batch) - 1):  # inside the CRC: detected
        damaged = bytearray(batch)
        damaged[pos] ^= 0xFF
        assert not crc_is_valid(damaged, 0, read_header(damaged))
    # Offset and timestamp lie before the CRC.
    patch_offset_and_timestamp(batch, 0, 123_456, 42)
    h2 = read_header(batch)
    assert (h2.base_offset, h2.commit_timestamp) == (123_456, 42)
    assert h2.crc == h.crc
    assert crc_is_valid(batch, 0, h2)


def test_patch_through_memoryview_at_position() -> None:
    batches = bytearray(hand_built_batch(b"a") + hand_built_batch(b"bc"))
    second = read_header(batches).size
    patch_offset_and_timestamp(memoryview(batches), second, 7, 8)
    h = read_header(batches, second)
    assert (h.base_offset, h.commit_timestamp) == (7, 8)
    assert crc_is_valid(batches, second, h)
    assert read_header(batches).base_offset == 100


def test_iter_batches_stops_at_partial_tail() -> None:
    a, b, c = hand_built_batch(b"x"), hand_built_batch(b"yy", base_offset=105), hand_built_batch(b"zzz")
    buf = a + b + c
    found = list(iter_batches(buf))
    assert [pos for pos, _ in found] == [0, len(a), len(a) + len(b)]
    assert found[1][1].base_offset == 105
    for cut in (1, 11, 12, 40, len(c) - 1):  # torn tail anywhere in the last batch
        assert [pos for pos, _ in iter_batches(buf[: len(a) + len(b) + cut])] == [0, len(a)]
    assert [pos for pos, _ in iter_batches(buf, len(a), len(a) + len(b))] == [len(a)]


def test_read_header_rejects_bad_input() -> None:
    good = hand_built_batch(b"")
    with pytest.raises(CorruptRecordError) as e:
        read_header(good[:47])
    assert e.value.code == 14
    for magic in (3, 7, -1):
        bad = bytearray(good)
        bad[12] = magic & 0xFF
        write_crc(bad, 0, len(bad))  # tools (the fuzzer) forge such batches: a CRC where V0 keeps it
        with pytest.raises(CorruptRecordError, match="magic"):
            read_header(bad)
    short = bytearray(good)
    struct.pack_into("<i", short, 8, 20)  # length smaller than the header
    with pytest.raises(CorruptRecordError, match="smaller"):
        read_header(short)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(short) + good))


def test_v1_batch_with_statistics_is_decoded() -> None:
    rb = sample_records()
    stats = b"\x01" + bytes(30)
    batch = hand_built_batch(
        serialize_arrow_records(rb).to_pybytes(), magic=1, stats=stats, last_offset_delta=4, record_count=5
    )
    h = read_header(batch)
    assert h.magic == 1
    assert records_offset(batch, 0, h) == V1_HEADER_SIZE + len(stats)
    assert crc_is_valid(batch, 0, h)
    out, change_types = decode_arrow_batch(batch, 0, h, SCHEMA)
    assert out.equals(rb)
    assert change_types is None


def test_v2_batch_layout_crc_statistics_and_leader_epoch() -> None:
    rb = sample_records()
    stats = collect_statistics(rb, [0, 2])
    body = serialize_arrow_records(rb).to_pybytes()
    batch = hand_built_batch(
        body, magic=2, stats=stats, writer_id=-1, batch_sequence=-1, base_offset=0, timestamp=0
    )
    # the builder lays out the same bytes as the field-by-field reference
    assert build_arrow_log_batch(rb, schema_id=3, statistics_columns=[0, 2], magic=2) == batch
    h = read_header(batch)
    assert (h.magic, h.header_size, h.leader_epoch, h.schema_id, h.record_count) == (
        2,
        V2_HEADER_SIZE,
        -1,
        3,
        5,
    )
    assert records_offset(batch, 0, h) == V2_HEADER_SIZE + len(stats)
    assert crc_is_valid(batch, 0, h)
    check_log_batch(batch, 0, h, SCHEMA)  # the statistics agree with the rows
    lying = bytearray(hand_built_batch(body, magic=2, stats=collect_statistics(rb.slice(0, 2), [0, 2])))
    with pytest.raises(CorruptRecordError):
        check_log_batch(lying, 0, read_header(lying), SCHEMA)
    out, change_types = decode_arrow_batch(batch, 0, h, SCHEMA)
    assert out.equals(rb) and change_types is None
    # offset, timestamp and leader epoch are set outside the CRC
    patched = bytearray(batch)
    patch_offset_and_timestamp(patched, 0, 42, 7)
    patch_leader_epoch(patched, 0, 9)
    again = read_header(patched)
    assert (again.base_offset, again.commit_timestamp, again.leader_epoch) == (42, 7, 9)
    assert crc_is_valid(patched, 0, again)
    # a flipped schema id byte (covered by V2's CRC, which starts 4 bytes later than V0's) is caught
    patched[29] ^= 1
    assert not crc_is_valid(patched, 0, read_header(patched))
    # too short for a V2 header, or statistics that overflow the batch: refused
    with pytest.raises(CorruptRecordError, match="56-byte header"):
        read_header(batch[:54])
    overflow = bytearray(batch)
    struct.pack_into("<i", overflow, 52, len(batch))
    with pytest.raises(CorruptRecordError, match="statistics length"):
        records_offset(overflow, 0, read_header(overflow))
    # a V0 batch's leader epoch is not a field: patching leaves it alone
    v0 = bytearray(hand_built_batch(body))
    patch_leader_epoch(v0, 0, 9)
    assert bytes(v0) == hand_built_batch(body)


def test_build_append_only_batch_layout() -> None:
    rb = sample_records()
    batch = build_arrow_log_batch(rb, schema_id=2, writer_id=5, batch_sequence=0)
    h = read_header(batch)
    assert (h.magic, h.schema_id, h.attributes, h.record_count, h.last_offset_delta) == (0, 2, 1, 5, 4)
    assert (h.base_offset, h.commit_timestamp, h.writer_id, h.batch_sequence) == (0, 0, 5, 0)
    assert h.crc == google_crc32c.value(batch[25:])
    # The records are exactly one encapsulated IPC message: continuation marker, no schema.
    assert batch[48:52] == b"\xff\xff\xff\xff"
    message = pa.ipc.read_message(batch[48:])
    assert message.type == "record batch"
    assert pa.ipc.read_record_batch(message, SCHEMA).equals(rb)
    assert batch[48:] == rb.serialize().to_pybytes()


@pytest.mark.parametrize("compression", ["NONE", "ZSTD", "LZ4_FRAME"])
def test_round_trip_with_change_types(compression: str) -> None:
    rb = sample_records(4)
    cts = bytes([ChangeType.INSERT, ChangeType.UPDATE_BEFORE, ChangeType.UPDATE_AFTER, ChangeType.DELETE])
    batch = build_arrow_log_batch(rb, schema_id=1, change_types=cts, compression=compression, base_offset=10)
    h = read_header(batch)
    assert not h.is_append_only
    assert h.attributes == 0
    assert batch[48:52] == cts
    assert crc_is_valid(batch, 0, h)
    out, change_types = decode_arrow_batch(batch, 0, h, SCHEMA)
    assert out.equals(rb)
    assert change_types == cts
    assert [ChangeType(c).short_string for c in change_types] == ["+I", "-U", "+U", "-D"]


@pytest.mark.parametrize("compression", ["ZSTD", "LZ4_FRAME"])
def test_compressed_bodies_are_compressed_and_readable_by_pyarrow(compression: str) -> None:
    n = 5000
    rb = pa.record_batch(
        [pa.array([i % 10 for i in range(n)], pa.int32()), pa.array(["same text"] * n), pa.array([1.0] * n)],
        schema=SCHEMA,
    )
    plain = build_arrow_log_batch(rb, schema_id=1)
    packed = build_arrow_log_batch(rb, schema_id=1, compression=compression)
    assert len(packed) < len(plain) // 4
    message = pa.ipc.read_message(packed[48:])
    assert pa.ipc.read_record_batch(message, SCHEMA).equals(rb)
    h = read_header(packed)
    assert crc_is_valid(packed, 0, h)
    assert decode_arrow_batch(packed, 0, h, SCHEMA)[0].equals(rb)


def test_tiny_bodies_stay_uncompressed() -> None:
    """Compressing a few rows only makes them bigger (and costs ZSTD ~0.7 ms): written plain, read back."""
    rb = pa.record_batch(
        [pa.array([1, 2], pa.int32()), pa.array(["a", "b"]), pa.array([1.0, 2.0])], schema=SCHEMA
    )
    assert rb.nbytes < SMALL_BATCH_BYTES
    plain = build_arrow_log_batch(rb, schema_id=1)
    for compression in ("ZSTD", "LZ4_FRAME"):
        packed = build_arrow_log_batch(rb, schema_id=1, compression=compression)
        assert packed == plain
        h = read_header(packed)
        assert decode_arrow_batch(packed, 0, h, SCHEMA)[0].equals(rb)


def test_empty_batch_has_no_arrow_message() -> None:
    empty = sample_records(0)
    batch = build_arrow_log_batch(empty, schema_id=1)
    assert len(batch) == V0_HEADER_SIZE
    h = read_header(batch)
    assert (h.record_count, h.last_offset_delta, h.next_offset) == (0, 0, 1)
    assert crc_is_valid(batch, 0, h)
    out, cts = decode_arrow_batch(batch, 0, h, SCHEMA)
    assert out.num_rows == 0 and out.schema == SCHEMA and cts is None


def test_decode_at_position_and_from_memoryview() -> None:
    a = build_arrow_log_batch(sample_records(3), schema_id=1)
    b = build_arrow_log_batch(sample_records(6), schema_id=1, change_types=[1] * 6)
    buf = memoryview(a + b)
    (pa_, ha), (pb, hb) = list(iter_batches(buf))
    assert (pa_, pb) == (0, len(a))
    assert decode_arrow_batch(buf, pa_, ha, SCHEMA)[0].equals(sample_records(3))
    assert decode_arrow_batch(buf, pb, hb, SCHEMA)[0].equals(sample_records(6))
    assert decode_arrow_batch(buf, pb, hb, SCHEMA)[1] == b"\x01" * 6


def test_decode_rejects_mismatched_record_count() -> None:
    batch = bytearray(build_arrow_log_batch(sample_records(3), schema_id=1))
    struct.pack_into("<i", batch, 44, 4)
    with pytest.raises(CorruptRecordError, match="records"):
        decode_arrow_batch(batch, 0, read_header(batch), SCHEMA)


@pytest.mark.parametrize("compression", ["NONE", "ZSTD"])
def test_projection_keeps_header_and_change_types(compression: str) -> None:
    rb = sample_records(6)
    cts = bytes([1, 1, 2, 3, 4, 1])
    batch = bytearray(
        build_arrow_log_batch(
            rb, schema_id=4, change_types=cts, writer_id=9, batch_sequence=3, compression="ZSTD"
        )
    )
    patch_offset_and_timestamp(batch, 0, 500, 1234)
    h = read_header(batch)
    projected = project_arrow_batch(batch, 0, h, SCHEMA, [0, 2], compression=compression)
    hp = read_header(projected)
    assert (hp.base_offset, hp.commit_timestamp, hp.schema_id, hp.writer_id, hp.batch_sequence) == (
        500,
        1234,
        4,
        9,
        3,
    )
    assert (hp.record_count, hp.last_offset_delta, hp.attributes) == (6, 5, 0)
    assert crc_is_valid(projected, 0, hp)
    out, out_cts = decode_arrow_batch(projected, 0, hp, pa.schema([SCHEMA.field(0), SCHEMA.field(2)]))
    assert out.equals(rb.select([0, 2]))
    assert out_cts == cts


def test_projection_of_append_only_and_bad_indexes() -> None:
    rb = sample_records(3)
    batch = build_arrow_log_batch(rb, schema_id=1)
    h = read_header(batch)
    projected = project_arrow_batch(batch, 0, h, SCHEMA, [1])
    hp = read_header(projected)
    assert hp.is_append_only
    assert decode_arrow_batch(projected, 0, hp, pa.schema([SCHEMA.field(1)]))[0].equals(rb.select([1]))
    for bad in ([2, 0], [0, 0], [3], [-1]):
        with pytest.raises(ValueError):
            project_arrow_batch(batch, 0, h, SCHEMA, bad)


def test_change_type_strings() -> None:
    assert [c.short_string for c in ChangeType] == ["+A", "+I", "-U", "+U", "-D"]
    assert [int(c) for c in ChangeType] == [0, 1, 2, 3, 4]
    assert ChangeType.from_short_string("-U") is ChangeType.UPDATE_BEFORE
    with pytest.raises(ValueError):
        ChangeType.from_short_string("+X")


def test_bad_arguments_to_builder() -> None:
    with pytest.raises(ValueError, match="change types"):
        build_arrow_log_batch(sample_records(3), schema_id=1, change_types=b"\x01")
    with pytest.raises(ValueError, match="compression"):
        build_arrow_log_batch(sample_records(3), schema_id=1, compression="SNAPPY")
