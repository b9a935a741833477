"""KvTablet: changelog derivation per merge engine, partial updates, delete behaviors, WAL image,
idempotent retries, the pre-write buffer, and byte-exact reads."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from kv_table_maker import KvTable, make_info

from strom.common.errors import (
    CorruptRecordError,
    DeletionDisabledError,
    InvalidTableError,
    InvalidTargetColumnError,
    OutOfOrderSequenceError,
    SchemaNotExistError,
)
from strom.common.schema import Column, Schema
from strom.common.types import BIGINT, DOUBLE, INT, STRING, TIMESTAMP, DataType
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import build_kv_batch
from strom.record.log_batch import read_header
from strom.record.value_batch import build_value_batch, parse_value_batch
from strom.server.tablet.kv.kv_tablet import _prefix_upper_bound


def kv_schema() -> Schema:
    return Schema([Column("k", INT()), Column("s", STRING()), Column("d", DOUBLE())], primary_key=["k"])


def table(tmp_path: Path, properties: dict[str, str] | None = None, schema: Schema | None = None) -> KvTable:
    return KvTable(tmp_path, make_info(schema or kv_schema(), properties))


# ---- default merge engine, FULL changelog image


def test_default_engine_changelog_and_state(tmp_path: Path) -> None:
    t = table(tmp_path)
    assert t.put([(1, "a", 1.0), (2, "b", 2.0)]) == [("+I", (1, "a", 1.0)), ("+I", (2, "b", 2.0))]
    assert t.put([(1, "a2", 1.5)]) == [("-U", (1, "a", 1.0)), ("+U", (1, "a2", 1.5))]
    assert t.put([("-", 2)]) == [("-D", (2, "b", 2.0))]
    assert t.put([("-", 3)]) == []  # a delete of a missing key changes nothing
    assert t.rows() == [(1, "a2", 1.5)]
    assert t.lookup(2) is None


def test_several_changes_of_one_key_in_one_batch(tmp_path: Path) -> None:
    t = table(tmp_path)
    changes = t.put([(1, "a", 1.0), (1, "b", 2.0), ("-", 1), (1, "c", 3.0), ("-", 9)])
    assert changes == [
        ("+I", (1, "a", 1.0)),
        ("-U", (1, "a", 1.0)),
        ("+U", (1, "b", 2.0)),
        ("-D", (1, "b", 2.0)),
        ("+I", (1, "c", 3.0)),
    ]
    assert t.batches() == [(0, 5)]  # one changelog batch per PutKv
    assert t.rows() == [(1, "c", 3.0)]


def test_identical_upsert_still_updates(tmp_path: Path) -> None:
    # Fluss emits -U/+U for an upsert of the same row: only a merge engine can declare "no change".
    t = table(tmp_path)
    t.put([(1, "a", 1.0)])
    assert t.put([(1, "a", 1.0)]) == [("-U", (1, "a", 1.0)), ("+U", (1, "a", 1.0))]


def test_changelog_carries_schema_id_and_writer(tmp_path: Path) -> None:
    t = table(tmp_path)
    t.put([(1, "a", 1.0)], writer_id=42, batch_sequence=0)
    records = t.log.read(0, 1 << 20).records
    header = read_header(records, 0)
    assert (header.schema_id, header.writer_id, header.batch_sequence) == (1, 42, 0)
    assert not header.is_append_only


def test_compressed_changelog(tmp_path: Path) -> None:
    for compression in ("ZSTD", "LZ4_FRAME", "NONE"):
        t = table(tmp_path / compression, {"table.log.arrow.compression.type": compression})
        t.put([(i, f"row-{i}", float(i)) for i in range(50)])
        assert len(t.changelog()) == 50


# ---- WAL changelog image


def test_wal_image_default_engine(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.changelog.image": "WAL"})
    # full-row upserts do not read the old row: inserts and updates are both +U
    assert t.put([(1, "a", 1.0)]) == [("+U", (1, "a", 1.0))]
    assert t.put([(1, "b", 2.0)]) == [("+U", (1, "b", 2.0))]
    assert t.put([("-", 1)]) == [("-D", (1, "b", 2.0))]
    assert t.put([("-", 1)]) == []
    assert t.put([(2, "x", 0.0), ("-", 2)]) == [("+U", (2, "x", 0.0)), ("-D", (2, "x", 0.0))]
    assert t.rows() == []
    assert t.kv.row_count is None  # not tracked with a WAL image


def test_wal_image_partial_update_reads_old_row(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.changelog.image": "WAL"})
    assert t.put([(1, "a", None)], [0, 1]) == [("+I", (1, "a", None))]
    assert t.put([(1, None, 2.0)], [0, 2]) == [("+U", (1, "a", 2.0))]


# ---- FIRST_ROW


def test_first_row_keeps_the_first_and_ignores_deletes(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.merge-engine": "first_row"})
    assert t.put([(1, "a", 1.0)]) == [("+I", (1, "a", 1.0))]
    assert t.put([(1, "b", 2.0), (2, "c", 3.0)]) == [("+I", (2, "c", 3.0))]
    assert t.put([("-", 1)]) == []
    assert sorted(t.rows()) == [(1, "a", 1.0), (2, "c", 3.0)]


def test_first_row_rejects_allowed_deletes_and_partial_updates(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.merge-engine": "first_row", "table.delete.behavior": "ALLOW"})
    with pytest.raises(InvalidTableError, match="first_row"):
        t.put([(1, "a", 1.0)])
    t2 = table(tmp_path / "2", {"table.merge-engine": "first_row"})
    with pytest.raises(InvalidTargetColumnError, match="first_row"):
        t2.put([(1, "a", None)], [0, 1])


# ---- VERSIONED


def versioned_schema(version_type: DataType | None = None) -> Schema:
    columns = [Column("k", INT()), Column("v", version_type or BIGINT()), Column("s", STRING())]
    return Schema(columns, primary_key=["k"])


def test_versioned_higher_version_wins_ties_go_to_the_new_row(tmp_path: Path) -> None:
    t = table(
        tmp_path,
        {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v"},
        versioned_schema(),
    )
    assert t.put([(1, 5, "a")]) == [("+I", (1, 5, "a"))]
    assert t.put([(1, 3, "older")]) == []
    assert t.put([(1, 5, "tie")]) == [("-U", (1, 5, "a")), ("+U", (1, 5, "tie"))]
    assert t.put([(1, 9, "newer")]) == [("-U", (1, 5, "tie")), ("+U", (1, 9, "newer"))]
    # a null version is the minimum: it never beats a stored version...
    assert t.put([(1, None, "null")]) == []
    # ...and ties with another null
    assert t.put([(2, None, "n1")]) == [("+I", (2, None, "n1"))]
    assert t.put([(2, None, "n2")]) == [("-U", (2, None, "n1")), ("+U", (2, None, "n2"))]
    assert t.put([(2, -(2**63), "min")]) == [("-U", (2, None, "n2")), ("+U", (2, -(2**63), "min"))]
    # negative versions compare as signed values
    assert t.put([(2, -5, "neg")]) == [("-U", (2, -(2**63), "min")), ("+U", (2, -5, "neg"))]
    assert t.put([(2, -6, "lower")]) == []
    assert t.put([("-", 1)]) == []  # deletes are ignored
    assert sorted(t.rows()) == [(1, 9, "newer"), (2, -5, "neg")]


def test_versioned_int_and_nanosecond_timestamps(tmp_path: Path) -> None:
    props = {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v"}
    t = table(tmp_path / "int", props, versioned_schema(INT()))
    t.put([(1, -1, "a")])
    assert t.put([(1, -2, "b")]) == []
    assert t.put([(1, 0, "c")]) == [("-U", (1, -1, "a")), ("+U", (1, 0, "c"))]

    import pandas as pd
    ts = table(tmp_path / "ts", props, versioned_schema(TIMESTAMP(9)))
    base = pd.Timestamp("2024-01-01 00:00:00.000001001")
    ts.put([(1, base, "a")])
    assert ts.put([(1, base - pd.Timedelta(1, "ns"), "b")]) == []  # one nanosecond older loses
    changes = ts.put([(1, base + pd.Timedelta(1, "ns"), "c")])
    assert [c for c, _ in changes] == ["-U", "+U"]
    ms = table(tmp_path / "ms", props, versioned_schema(TIMESTAMP(3)))
    ms.put([(1, dt.datetime(2024, 1, 1, 0, 0, 1), "a")])
    assert ms.put([(1, dt.datetime(2024, 1, 1, 0, 0, 0, 999000), "b")]) == []


# ---- partial updates


def partial_schema() -> Schema:
    return Schema(
        [Column("k", INT()), Column("a", STRING()), Column("b", INT()), Column("c", DOUBLE())],
        primary_key=["k"],
    )


def test_partial_update_merges_target_columns(tmp_path: Path) -> None:
    t = table(tmp_path, schema=partial_schema())
    t.put([(1, "a", 10, 1.5)])
    # clients send full-width rows with the non-target columns null
    assert t.put([(1, None, 20, None)], [0, 2]) == [("-U", (1, "a", 10, 1.5)), ("+U", (1, "a", 20, 1.5))]
    # a new key gets nulls outside the targets
    assert t.put([(2, "x", None, None)], [0, 1]) == [("+I", (2, "x", None, None))]
    # writing a null target column sets it to null
    assert t.put([(1, None, None, None)], [0, 1]) == [("-U", (1, "a", 20, 1.5)), ("+U", (1, None, 20, 1.5))]
    # key-only targets on an existing row change nothing
    assert t.put([(1, None, None, None)], [0]) == []
    # target columns given as all columns are a full-row upsert
    assert t.put([(2, None, 3, None)], [3, 2, 1, 0]) == [
        ("-U", (2, "x", None, None)),
        ("+U", (2, None, 3, None)),
    ]
    assert sorted(t.rows()) == [(1, None, 20, 1.5), (2, None, 3, None)]


def test_partial_delete(tmp_path: Path) -> None:
    t = table(tmp_path, schema=partial_schema())
    t.put([(1, "a", 10, 1.5), (2, "b", None, None)])
    # other (non-target) columns still hold values: the target columns become null, the row stays
    assert t.put([("-", 1)], [0, 1]) == [("-U", (1, "a", 10, 1.5)), ("+U", (1, None, 10, 1.5))]
    # every non-target column is null: the row goes
    assert t.put([("-", 2)], [0, 1]) == [("-D", (2, "b", None, None))]
    assert t.put([("-", 1)], [0, 2, 3]) == [("-D", (1, None, 10, 1.5))]
    assert t.rows() == []


def test_partial_update_keeps_values_bit_exact(tmp_path: Path) -> None:
    import pandas as pd
    schema = Schema(
        [Column("k", INT()), Column("ts", TIMESTAMP(9)), Column("n", INT())],
        primary_key=["k"],
    )
    t = table(tmp_path, schema=schema)
    stamp = pd.Timestamp("2024-05-06 07:08:09.123456789")
    t.put([(1, stamp, 1)])
    t.put([(1, None, 2)], [0, 2])
    value = t.kv.multi_get([t.key(1)])[0]
    assert value == t.value((1, stamp, 2))


def test_partial_update_target_column_errors(tmp_path: Path) -> None:
    t = table(tmp_path, schema=partial_schema())
    with pytest.raises(InvalidTargetColumnError, match=r"must contain the primary key columns \['k'\]"):
        t.put([(1, "a", None, None)], [1])
    with pytest.raises(InvalidTargetColumnError, match="index 9 is out of range"):
        t.put([(1, "a", None, None)], [0, 9])
    strict = Schema(
        [Column("k", INT()), Column("a", STRING()), Column("req", INT().copy(nullable=False))],
        primary_key=["k"],
    )
    t2 = table(tmp_path / "strict", schema=strict)
    with pytest.raises(InvalidTargetColumnError, match="column req is NOT NULL"):
        t2.put([(1, "a", 0)], [0, 1])
    assert t.log.log_end_offset == 0 and t2.log.log_end_offset == 0


# ---- delete behaviors


def test_delete_behavior_ignore(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.delete.behavior": "IGNORE"})
    t.put([(1, "a", 1.0)])
    assert t.put([("-", 1), (2, "b", 2.0)]) == [("+I", (2, "b", 2.0))]
    assert sorted(t.rows()) == [(1, "a", 1.0), (2, "b", 2.0)]


def test_delete_behavior_disable(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.delete.behavior": "DISABLE"})
    t.put([(1, "a", 1.0)])
    end = t.log.log_end_offset
    with pytest.raises(DeletionDisabledError, match="disable"):
        t.put([(2, "b", 2.0), ("-", 1)])
    assert t.log.log_end_offset == end  # nothing of the batch was applied
    assert t.rows() == [(1, "a", 1.0)]


# ---- idempotence and empty changelogs


def test_retried_batch_is_not_applied_twice(tmp_path: Path) -> None:
    t = table(tmp_path)
    first = t.batch([(1, "a", 1.0)], writer_id=9, batch_sequence=0)
    second = t.batch([(1, "b", 2.0)], writer_id=9, batch_sequence=1)
    a1 = t.put_bytes(first)
    a2 = t.put_bytes(second)
    retry = t.put_bytes(second)  # the response of the first attempt was lost
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (a2.first_offset, a2.last_offset)
    retry_old = t.put_bytes(first)
    assert retry_old.duplicate and retry_old.first_offset == a1.first_offset
    assert t.changelog() == [("+I", (1, "a", 1.0)), ("-U", (1, "a", 1.0)), ("+U", (1, "b", 2.0))]
    assert t.rows() == [(1, "b", 2.0)]
    with pytest.raises(OutOfOrderSequenceError):
        t.put_bytes(t.batch([(1, "c", 3.0)], writer_id=9, batch_sequence=5))
    assert t.rows() == [(1, "b", 2.0)]


def test_no_op_batch_appends_an_empty_batch_for_idempotent_writers(tmp_path: Path) -> None:
    t = table(tmp_path, {"table.merge-engine": "first_row"})
    t.put([(1, "a", 1.0)], writer_id=3, batch_sequence=0)
    appended = t.put_bytes(t.batch([(1, "dup", 0.0), ("-", 7)], writer_id=3, batch_sequence=1))
    assert (appended.first_offset, appended.last_offset, appended.record_count) == (1, 1, 0)
    assert t.batches() == [(0, 1), (1, 0)]  # the empty batch takes one offset
    # the writer's next sequence is accepted, and a retry of the no-op batch is a duplicate
    t.put([(2, "b", 2.0)], writer_id=3, batch_sequence=2)
    assert t.put_bytes(t.batch([(1, "dup", 0.0)], writer_id=3, batch_sequence=1)).duplicate
    # without a writer id a no-op appends nothing
    end = t.log.log_end_offset
    nothing = t.put_bytes(t.batch([(1, "dup", 0.0)]))
    assert (nothing.first_offset, nothing.last_offset, nothing.record_count) == (end, end - 1, 0)
    assert t.log.log_end_offset == end
    assert t.changelog() == [("+I", (1, "a", 1.0)), ("+I", (2, "b", 2.0))]


# ---- malformed input


def test_bad_batches_are_refused(tmp_path: Path) -> None:
    t = table(tmp_path)
    batch = bytearray(t.batch([(1, "a", 1.0)]))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        t.put_bytes(bytes(batch))
    with pytest.raises(CorruptRecordError):
        t.put_bytes(b"\x00" * 10)
    other_schema = build_kv_batch([(t.key(1), t.encode_row((1, "a", 1.0)))], schema_id=2)
    with pytest.raises(SchemaNotExistError, match="schema id 2"):
        t.put_bytes(other_schema)
    garbage_row = build_kv_batch([(t.key(1), b"\x00\xff")], schema_id=1)
    with pytest.raises(CorruptRecordError):
        t.put_bytes(garbage_row)
    assert t.log.log_end_offset == 0 and t.rows() == []


# ---- the pre-write buffer


def test_uncommitted_writes_are_merged_against_but_not_visible(tmp_path: Path) -> None:
    t = table(tmp_path)
    assert t.put([(1, "a", 1.0)], commit=False) == [("+I", (1, "a", 1.0))]
    assert t.lookup(1) is None  # not committed yet
    # the next PutKv sees the buffered row: an update, not a second insert
    assert t.put([(1, "b", 2.0)], commit=False) == [("-U", (1, "a", 1.0)), ("+U", (1, "b", 2.0))]
    assert len(t.kv.buffer) == 2
    t.kv.flush(1)  # only the first change is committed
    assert t.lookup(1) == (1, "a", 1.0)
    t.commit()
    assert t.lookup(1) == (1, "b", 2.0) and len(t.kv.buffer) == 0
    assert t.kv.flushed_offset == 3 == t.log.high_watermark


def test_truncation_drops_buffered_writes(tmp_path: Path) -> None:
    t = table(tmp_path)
    t.put([(1, "a", 1.0)])
    t.put([(1, "b", 2.0), (2, "c", 3.0)], commit=False)
    t.kv.truncate_from(1)
    assert len(t.kv.buffer) == 0 and not t.kv.failed
    t.log.truncate_to(1)
    assert t.put([(1, "z", 0.0)]) == [("-U", (1, "a", 1.0)), ("+U", (1, "z", 0.0))]
    t.kv.truncate_from(0)  # below the flushed offset: RocksDB is ahead of the log
    assert t.kv.failed


def test_row_count(tmp_path: Path) -> None:
    t = table(tmp_path)
    t.put([(i, "x", 0.0) for i in range(10)])
    t.put([("-", 3), ("-", 4), (5, "y", 1.0), ("-", 99)])
    assert t.kv.row_count == 8


# ---- reads


def test_lookup_prefix_and_limit_scan_are_byte_exact(tmp_path: Path) -> None:
    schema = Schema(
        [Column("a", INT()), Column("b", STRING()), Column("v", BIGINT())], primary_key=["a", "b"]
    )
    info = make_info(schema, {"table.kv.format-version": "2"}, bucket_keys=["a"])
    t = KvTable(tmp_path, info)
    rows = [(1, "x", 10), (1, "y", 11), (2, "x", 20), (3, "z", 30), (1, "zz", 12)]
    t.put(rows)
    values = t.kv.multi_get([t.key(1, "y"), t.key(9, "q"), t.key(3, "z")])
    assert values == [t.value((1, "y", 11)), None, t.value((3, "z", 30))]
    assert values[0] is not None and values[0][:2] == b"\x01\x00"  # int16 LE schema id in front of the row
    # the bucket key (a) encodes to a prefix of the primary key (a, b) with kv format version 2
    bucket_key = CompactedKeyEncoder([INT()]).encode
    assert t.key(1, "x").startswith(bucket_key([1]))
    found = t.kv.prefix_lookup([bucket_key([1]), bucket_key([4]), bucket_key([3])])
    assert sorted(found[0]) == sorted(t.value(r) for r in rows if r[0] == 1)
    assert found[1] == [] and found[2] == [t.value((3, "z", 30))]
    # limit scan: the first values in key order
    scanned = t.kv.limit_scan(2)
    ordered = [v for _, v in sorted(t.state().items())]
    assert scanned == ordered[:2]
    assert t.kv.limit_scan(100) == ordered and t.kv.limit_scan(0) == []
    assert parse_value_batch(build_value_batch(scanned)) == scanned


def test_prefix_upper_bound_edge_cases(tmp_path: Path) -> None:
    assert _prefix_upper_bound(b"\x01\x02") == b"\x01\x03"
    assert _prefix_upper_bound(b"\x01\xff") == b"\x02"
    assert _prefix_upper_bound(b"\xff\xff") is None
    assert _prefix_upper_bound(b"") is None
