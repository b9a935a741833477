"""Tiering rounds into Paimon: what pypaimon reads back, system columns, offsets, exactly-once."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import pickle
import random
from decimal import Decimal
from typing import Any

import lake_scenarios as scenario
import numpy as np
import pyarrow as pa
import pytest
from lake_helpers import (
    SYSTEM,
    USER_COLUMNS,
    USERS,
    Change,
    before,
    delete,
    expected_log_rows,
    expected_pk_rows,
    insert,
    normalized,
    upsert,
)
from paimon_helpers import (
    PaimonTiering,
    data_files,
    paimon_bucket_of,
    paimon_info,
    paimon_storage,
    read_paimon,
)

from strom.common import types as T
from strom.common.table_bucket import TableBucket
from strom.lake import FLUSS_OFFSETS_PROPERTY, LakeCommitConflictError, StaleLakeCommitError
from strom.lake.offsets import decode_bucket_offsets
from strom.lake.paimon.committer import COMMIT_ID_PROPERTY, PaimonLakeCommitter
from strom.lake.paimon.storage import PaimonLakeStorage
from strom.lake.paimon.writer import PaimonWriteResult


@pytest.fixture
def paimon(tmp_path: pathlib.Path) -> PaimonLakeStorage:
    return paimon_storage(tmp_path)


@pytest.fixture
def warehouse(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "warehouse"


def _check(
    storage: PaimonLakeStorage, tiering: PaimonTiering, expected: list[dict[str, Any]], columns: list[str]
) -> None:
    assert normalized(read_paimon(storage, tiering.info, columns), columns) == normalized(expected, columns)


def _snapshot(storage: PaimonLakeStorage, tiering: PaimonTiering):  # type: ignore[no-untyped-def]
    table = storage.catalog().load_table(tiering.info.table_path)
    return table.snapshot_manager().get_latest_snapshot()


# ------------------------------------------------------------------------------------ log tables


def test_unkeyed_log_table_rounds_read_back_equal(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info("events", scenario.EVENTS, buckets=2)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    scenario.tier_event_rounds(
        tiering, lambda: _check(paimon, tiering, expected_log_rows(tiering), scenario.EVENT_COLUMNS)
    )
    by_id = {r["id"]: r for r in read_paimon(paimon, info, ["id", *SYSTEM])}
    assert by_id[213]["__bucket"] == 1 and by_id[213]["__offset"] == 13
    assert by_id[3]["__bucket"] == 0 and by_id[3]["__offset"] == 3
    first_ts = tiering.logs[(None, 0)][0][1]
    assert by_id[0]["__timestamp"] == dt.datetime.fromtimestamp(first_ts / 1000, dt.UTC)
    # Bucket-unaware: every file in Paimon bucket 0, the Fluss bucket kept in __bucket.
    table = paimon.catalog().load_table(info.table_path)
    assert table.bucket_mode().name == "BUCKET_UNAWARE"
    assert {f.parts[0] for f in data_files(warehouse, info)} == {"bucket-0"}


def test_keyed_partitioned_log_table(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info("clicks", scenario.CLICKS, bucket_keys=["user"], partition_keys=["dt"], buckets=4)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    scenario.tier_click_rounds(tiering)
    _check(paimon, tiering, expected_log_rows(tiering), scenario.CLICK_COLUMNS)
    for row in read_paimon(paimon, info, ["user", "__bucket", "dt"]):
        assert row["__bucket"] == paimon_bucket_of(info, row)
    # Files sit in their partition's directory and their Fluss bucket's Paimon bucket.
    files = data_files(warehouse, info)
    assert {f.parts[0] for f in files} == {"dt=2024-01", "dt=2024-02", "dt=2024-03", "dt=2024-09"}
    table = paimon.catalog().load_table(info.table_path)
    assert table.bucket_mode().name == "HASH_FIXED"
    builder = table.new_read_builder()
    for split in builder.new_scan().plan().splits():
        users = builder.new_read().to_arrow([split]).column("user").to_pylist()
        assert {paimon_bucket_of(info, {"user": u}) for u in users} == {split.bucket}
    scenario.assert_click_offsets(paimon.committer(info).latest_snapshot())


# ---------------------------------------------------------------------------- primary-key tables


def test_primary_key_upserts_and_deletes_are_applied(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("users", USERS, primary_key=["id"], bucket_keys=["id"], buckets=3)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    columns = USER_COLUMNS
    scenario.tier_new_users(tiering)
    _check(paimon, tiering, expected_pk_rows(tiering), columns)
    # Updates as Fluss logs them (-U old, +U new), deletes, and re-inserts of deleted keys.
    changes = []
    for i in range(0, 30, 3):
        changes += [before(id=i, name=f"n{i}", score=i), upsert(id=i, name=f"u{i}", score=-i)]
    changes += [delete(id=i, name=f"n{i}", score=i) for i in range(1, 30, 5)]
    tiering.append(changes)
    tiering.round(batch_rows=4)
    _check(paimon, tiering, expected_pk_rows(tiering), columns)
    tiering.append([insert(id=1, name="back", score=1), delete(id=3, name="u3", score=-3)])
    tiering.append(upsert(id=100 + i, name="new", score=i) for i in range(5))
    tiering.round()
    rows = read_paimon(paimon, info, columns)
    assert normalized(rows, columns) == normalized(expected_pk_rows(tiering), columns)
    by_id = {r["id"]: r for r in rows}
    assert by_id[1]["name"] == "back" and 3 not in by_id and 6 not in by_id and by_id[9]["name"] == "u9"
    assert 11 not in by_id and len(rows) == len({r["id"] for r in rows})
    # The newest version of each key carries its own offset and the row kind it was written with.
    system = {r["id"]: r for r in read_paimon(paimon, info, ["id", "__offset", "__bucket", "__row_kind"])}
    assert system[1]["__row_kind"] == "+I" and system[100]["__row_kind"] == "+U"
    for key, row in system.items():
        assert row["__bucket"] == paimon_bucket_of(info, {"id": key})


def test_delete_in_a_bucket_with_a_single_file_is_applied(paimon: PaimonLakeStorage) -> None:
    # A round that inserts and deletes keys of a fresh bucket leaves one file holding -D rows.
    # pypaimon records no retract rows for it; readers would then skip merging that lone file.
    info = paimon_info("single", USERS, primary_key=["id"], bucket_keys=["id"], buckets=1)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append([insert(id=1, name="a", score=1), insert(id=2, name="b", score=2)])
    tiering.append([delete(id=2, name="b", score=2), delete(id=7, name="never", score=0)])
    tiering.round()
    assert normalized(read_paimon(paimon, info, ["id", "name"]), ["id", "name"]) == [(1, "a")]
    table = paimon.catalog().load_table(info.table_path)
    (split,) = table.new_read_builder().new_scan().plan().splits()
    (meta,) = split.files
    assert meta.delete_row_count == 2 and not split.raw_convertible


def test_partitioned_primary_key_table(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info(
        "orders",
        [("region", T.STRING()), ("id", T.INT()), ("amount", T.DOUBLE())],
        primary_key=["region", "id"],
        bucket_keys=["id"],
        partition_keys=["region"],
        buckets=4,
    )
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    rnd = random.Random(3)
    columns = ["region", "id", "amount"]
    for _round in range(4):
        changes: list[Change] = []
        for _ in range(40):
            row = {"region": rnd.choice(["eu", "us"]), "id": rnd.randrange(25), "amount": rnd.random()}
            changes.append(rnd.choice([upsert, upsert, insert, delete])(**row))
        tiering.append(changes)
        tiering.round(batch_rows=7)
        _check(paimon, tiering, expected_pk_rows(tiering), columns)
    assert {f.parts[0] for f in data_files(warehouse, info)} <= {"region=eu", "region=us"}
    latest = paimon.committer(info).latest_snapshot()
    assert latest is not None
    assert set(latest.partition_names.values()) == {"region=eu", "region=us"}
    assert latest.bucket_offsets == {key: len(log) for key, log in tiering.logs.items()}


def test_types_round_trip(paimon: PaimonLakeStorage) -> None:
    columns = [
        ("id", T.INT()),
        ("flag", T.BOOLEAN()),
        ("tiny", T.TINYINT()),
        ("small", T.SMALLINT()),
        ("big", T.BIGINT()),
        ("real", T.FLOAT()),
        ("dbl", T.DOUBLE()),
        ("price", T.DECIMAL(12, 3)),
        ("code", T.CHAR(3)),
        ("raw", T.BYTES()),
        ("fixed", T.BINARY(2)),
        ("day", T.DATE()),
        ("at", T.TIME(3)),
        ("ts", T.TIMESTAMP(6)),
        ("ltz", T.TIMESTAMP_LTZ(3)),
        ("tags", T.ARRAY(T.STRING())),
        ("attrs", T.MAP(T.STRING(), T.INT())),
        ("point", T.ROW([T.DataField("x", T.DOUBLE()), T.DataField("y", T.DOUBLE())])),
    ]
    info = paimon_info("typed", columns, primary_key=["id"], bucket_keys=["id"], buckets=2)
    paimon.catalog().create_table(info)
    row = {
        "id": 1,
        "flag": True,
        "tiny": -3,
        "small": 300,
        "big": 2**40,
        "real": 1.5,
        "dbl": 2.25,
        "price": Decimal("12.345"),
        "code": "abc",
        "raw": b"\x00\x01",
        "fixed": b"\xff\xfe",
        "day": dt.date(2024, 2, 29),
        "at": dt.time(12, 30, 1, 500000),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        "ltz": dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC),
        "tags": ["a", "b"],
        "attrs": [("k", 1)],
        "point": {"x": 1.0, "y": -1.0},
    }
    empty = {name: None for name, _ in columns} | {"id": 2}
    tiering = PaimonTiering(paimon, info)
    tiering.append([insert(**row), insert(**empty)])
    tiering.round()
    got = {r["id"]: r for r in read_paimon(paimon, info, [name for name, _ in columns])}
    assert got[1] == row
    assert got[2] == empty


# ------------------------------------------------------------------------ offsets and snapshots


def test_snapshot_carries_commit_user_and_offsets(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("log", [("k", T.STRING()), ("v", T.INT())], bucket_keys=["k"], buckets=3)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    assert paimon.committer(info).latest_snapshot() is None
    tiering.append(Change({"k": f"k{i}", "v": i}) for i in range(20))
    results, ends = tiering.write_round()
    snapshot_id = paimon.committer(info).commit(results, ends, {"fluss-round": "1"})
    tiering.tiered.update(ends)
    snapshot = _snapshot(paimon, tiering)
    assert snapshot.id == snapshot_id == 1
    assert snapshot.commit_user == "__fluss_lake_tiering" and snapshot.commit_kind == "APPEND"
    assert snapshot.properties["commit-user"] == "__fluss_lake_tiering"
    assert snapshot.properties["fluss-round"] == "1"
    assert COMMIT_ID_PROPERTY in snapshot.properties
    text = snapshot.properties[FLUSS_OFFSETS_PROPERTY]
    assert text == json.dumps(
        [{"bucket": b, "offset": ends[(None, b)]} for b in range(3)], separators=(",", ":")
    )
    # A later round only touching bucket 0 still lists every bucket (offsets are cumulative).
    tiering.append([Change({"k": "x", "v": 0})], bucket=paimon_bucket_of(info, {"k": "x"}))
    tiering.round()
    latest = paimon.committer(info).latest_snapshot()
    assert latest is not None and latest.snapshot_id == 2
    assert latest.bucket_offsets == {key: len(log) for key, log in tiering.logs.items()}
    assert decode_bucket_offsets(latest.properties[FLUSS_OFFSETS_PROPERTY])[0].bucket == 0


def test_round_without_rows_still_records_offsets(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("quiet", USERS, primary_key=["id"], bucket_keys=["id"], buckets=2)
    paimon.catalog().create_table(info)
    committer = paimon.committer(info)
    with paimon.writer(info, 0) as writer:
        result = writer.complete()
    assert isinstance(result, PaimonWriteResult) and result.messages == () and result.end_offset is None
    # Only empty log batches were read: no rows, but the offsets move.
    snapshot_id = committer.commit([result], {(None, 0): 5})
    latest = committer.latest_snapshot()
    assert (
        latest is not None and latest.snapshot_id == snapshot_id and latest.bucket_offsets == {(None, 0): 5}
    )
    assert read_paimon(paimon, info) == []


def test_stale_commits_are_refused(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info("stale", USERS, primary_key=["id"], bucket_keys=["id"], buckets=1)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append(insert(id=i, name="a", score=i) for i in range(6))
    results, ends = tiering.write_round()
    tiering.commit(results, ends)
    committer = paimon.committer(info)
    # A second job that started from the same (older) offsets re-reads the same records.
    tiering.tiered.clear()
    again, again_ends = tiering.write_round()
    with pytest.raises(StaleLakeCommitError, match="start below"):
        committer.commit(again, again_ends)
    committer.abort(again)
    # Offsets that do not move, or move back, are refused too.
    with pytest.raises(StaleLakeCommitError, match="not ahead"):
        committer.commit([], ends)
    with pytest.raises(StaleLakeCommitError, match="go back"):
        committer.commit([], {(None, 0): 3})
    assert _snapshot(paimon, tiering).id == 1
    assert normalized(read_paimon(paimon, info, ["id"]), ["id"]) == [(i,) for i in range(6)]
    # The refused round's files are gone; the committed ones stay.
    committed = set(results[0].file_names)  # type: ignore[attr-defined]
    names = {f.name for f in data_files(warehouse, info)}
    assert committed <= names
    assert not set(again[0].file_names) & names  # type: ignore[attr-defined]


def test_recommitting_the_same_results_is_idempotent(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("twice", USERS, primary_key=["id"], bucket_keys=["id"], buckets=2)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append(insert(id=i, name="a", score=i) for i in range(10))
    results, ends = tiering.write_round()
    committer = paimon.committer(info)
    first = committer.commit(results, ends)
    assert committer.commit(results, ends) == first
    # Also after a later round, and through results that travelled (pickled) to another process.
    tiering.tiered.update(ends)
    tiering.append([upsert(id=1, name="b", score=1)])
    tiering.round()
    travelled = pickle.loads(pickle.dumps(results))
    assert paimon.committer(info).commit(travelled, ends) == first
    assert _snapshot(paimon, tiering).id == 2
    assert normalized(read_paimon(paimon, info, ["id", "name"]), ["id", "name"]) == normalized(
        expected_pk_rows(tiering), ["id", "name"]
    )


def test_abort_deletes_only_uncommitted_files(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info("aborts", [("k", T.STRING()), ("v", T.INT())], bucket_keys=["k"], buckets=2)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append(Change({"k": f"k{i}", "v": i}) for i in range(10))
    committed, ends = tiering.write_round()
    tiering.commit(committed, ends)
    tiering.append(Change({"k": f"k{i}", "v": i}) for i in range(10, 20))
    pending, _ = tiering.write_round()
    before_abort = {f.name for f in data_files(warehouse, info)}
    assert all(set(r.file_names) <= before_abort for r in pending)  # type: ignore[attr-defined]
    committer = paimon.committer(info)
    committer.abort([*committed, *pending])  # a confused caller: committed files must survive
    after = {f.name for f in data_files(warehouse, info)}
    assert after == {n for r in committed for n in r.file_names}  # type: ignore[attr-defined]
    assert normalized(read_paimon(paimon, info, ["k"]), ["k"]) == [(f"k{i}",) for i in range(10)]


def test_writer_closed_without_completing_leaves_no_files(
    paimon: PaimonLakeStorage, warehouse: pathlib.Path
) -> None:
    info = paimon_info("closed", USERS, primary_key=["id"], bucket_keys=["id"], buckets=1)
    paimon.catalog().create_table(info)
    batch = pa.Table.from_pylist([{"id": 1, "name": "a", "score": 1}], schema=info.schema.to_arrow_schema())
    with paimon.writer(info, 0) as writer:
        writer.write(batch, np.array([1], dtype=np.int8), [0], [1_700_000_000_000])
    assert data_files(warehouse, info) == []


def test_rows_of_another_bucket_are_refused(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info("misplaced", USERS, primary_key=["id"], bucket_keys=["id"], buckets=4)
    paimon.catalog().create_table(info)
    ids = [i for i in range(50) if paimon_bucket_of(info, {"id": i}) != 0][:3]
    rows = [{"id": i, "name": "x", "score": 0} for i in ids]
    batch = pa.Table.from_pylist(rows, schema=info.schema.to_arrow_schema())
    with paimon.writer(info, 0) as writer:
        writer.write(batch, np.full(3, 1, dtype=np.int8), np.arange(3), np.zeros(3, dtype=np.int64))
        with pytest.raises(ValueError, match="Paimon's bucket function"):
            writer.complete()
    assert data_files(warehouse, info) == []


def test_primary_key_commit_conflicts_with_newer_files_in_its_bucket(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("race", USERS, primary_key=["id"], bucket_keys=["id"], buckets=1)
    paimon.catalog().create_table(info)
    schema = info.schema.to_arrow_schema()

    def batch(name: str) -> pa.Table:
        return pa.Table.from_pylist([{"id": 1, "name": name, "score": 0}], schema=schema)

    kinds = np.array([3], dtype=np.int8)
    late = paimon.writer(info, 0)  # takes its sequence numbers from the empty table
    with paimon.writer(info, 0) as early:
        early.write(batch("early"), kinds, [0], [1])
        first = early.complete()
    committer = paimon.committer(info)
    committer.commit([first], {(None, 0): 1})
    late.write(batch("late"), kinds, [1], [2])
    second = late.complete()
    with pytest.raises(LakeCommitConflictError, match="sequence numbers"):
        committer.commit([second], {(None, 0): 2})
    committer.abort([second])
    assert read_paimon(paimon, info, ["name"]) == [{"name": "early"}]


def test_storage_and_results_travel_pickled(paimon: PaimonLakeStorage) -> None:
    info = paimon_info("pickled", [("k", T.STRING()), ("v", T.INT())], bucket_keys=["k"], buckets=1)
    paimon.catalog().create_table(info)
    remote = pickle.loads(pickle.dumps(paimon))
    batch = pa.Table.from_pylist([{"k": "a", "v": 1}], schema=info.schema.to_arrow_schema())
    with remote.writer(info, TableBucket(info.table_id, None, 0)) as writer:
        writer.write(batch, None, [0], [1])
        result = pickle.loads(pickle.dumps(writer.complete()))
    assert paimon.committer(info).commit([result], {(None, 0): 1}) == 1
    assert read_paimon(paimon, info, ["k", "v"]) == [{"k": "a", "v": 1}]


def test_a_duplicate_job_committing_first_makes_the_other_stale(
    paimon: PaimonLakeStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = paimon_info("dupes", [("k", T.STRING()), ("v", T.INT())], bucket_keys=["k"], buckets=1)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append(Change({"k": f"k{i}", "v": i}) for i in range(5))
    ours, ends = tiering.write_round()
    theirs, _ = tiering.write_round()  # a second job wrote the same records into other files
    checks = PaimonLakeCommitter._check_offsets
    raced: list[int] = []

    def racing(self: PaimonLakeCommitter, *args: object) -> None:
        checks(self, *args)  # type: ignore[arg-type]
        if not raced:  # the other job commits between our checks and our commit
            raced.append(0)
            raced[0] = paimon.committer(info).commit(theirs, ends)

    monkeypatch.setattr(PaimonLakeCommitter, "_check_offsets", racing)
    with pytest.raises(StaleLakeCommitError):
        paimon.committer(info).commit(ours, ends)
    paimon.committer(info).abort(ours)
    assert raced == [1] and _snapshot(paimon, tiering).id == 1
    # An append table shows duplicates plainly: there are none.
    assert normalized(read_paimon(paimon, info, ["k"]), ["k"]) == [(f"k{i}",) for i in range(5)]


def test_the_same_round_committed_concurrently_lands_once(
    paimon: PaimonLakeStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = paimon_info("retry", [("k", T.STRING()), ("v", T.INT())], bucket_keys=["k"], buckets=1)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append(Change({"k": f"k{i}", "v": i}) for i in range(5))
    results, ends = tiering.write_round()
    checks = PaimonLakeCommitter._check_offsets
    raced: list[int] = []

    def racing(self: PaimonLakeCommitter, *args: object) -> None:
        checks(self, *args)  # type: ignore[arg-type]
        if not raced:
            raced.append(0)
            raced[0] = paimon.committer(info).commit(results, ends)

    monkeypatch.setattr(PaimonLakeCommitter, "_check_offsets", racing)
    assert paimon.committer(info).commit(results, ends) == raced[0] == 1
    assert _snapshot(paimon, tiering).id == 1
    assert len(read_paimon(paimon, info, ["k"])) == 5


def test_partition_keys_of_other_types(paimon: PaimonLakeStorage, warehouse: pathlib.Path) -> None:
    info = paimon_info(
        "by_day",
        [("year", T.INT()), ("day", T.DATE()), ("id", T.BIGINT()), ("v", T.STRING())],
        primary_key=["year", "day", "id"],
        bucket_keys=["id"],
        partition_keys=["year", "day"],
        buckets=2,
    )
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    days = [dt.date(2024, 1, 1), dt.date(2025, 6, 30)]
    tiering.append(insert(year=d.year, day=d, id=i, v="a") for d in days for i in range(6))
    tiering.round()
    tiering.append(delete(year=d.year, day=d, id=0, v="a") for d in days)
    tiering.round()
    columns = ["year", "day", "id", "v"]
    _check(paimon, tiering, expected_pk_rows(tiering), columns)
    assert {f.parts[:2] for f in data_files(warehouse, info)} == {
        ("year=2024", "day=2024-01-01"),
        ("year=2025", "day=2025-06-30"),
    }
    latest = paimon.committer(info).latest_snapshot()
    assert latest is not None
    assert set(latest.partition_names.values()) == {"year=2024/day=2024-01-01", "year=2025/day=2025-06-30"}


def test_rows_of_another_partition_are_refused(paimon: PaimonLakeStorage) -> None:
    info = paimon_info(
        "parts", [("dt", T.STRING()), ("v", T.INT())], partition_keys=["dt"], buckets=1, table_id=5
    )
    paimon.catalog().create_table(info)
    batch = pa.Table.from_pylist([{"dt": "2024-02", "v": 1}], schema=info.schema.to_arrow_schema())
    with paimon.writer(info, TableBucket(5, 100, 0), "2024-01") as writer:
        writer.write(batch, None, [0], [0])
        with pytest.raises(ValueError, match="belong to Paimon partition"):
            writer.complete()


def test_update_split_across_rounds(paimon: PaimonLakeStorage) -> None:
    # A round can end between an update's -U and +U: the key is gone until the next round.
    info = paimon_info("halves", USERS, primary_key=["id"], bucket_keys=["id"], buckets=1)
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    tiering.append([insert(id=1, name="old", score=1), insert(id=2, name="keep", score=2)])
    tiering.round()
    tiering.append([before(id=1, name="old", score=1)])
    tiering.round()
    assert read_paimon(paimon, info, ["id", "name"]) == [{"id": 2, "name": "keep"}]
    tiering.append([upsert(id=1, name="new", score=1)])
    tiering.round()
    rows = read_paimon(paimon, info, ["id", "name"])
    assert normalized(rows, ["id", "name"]) == [(1, "new"), (2, "keep")]
