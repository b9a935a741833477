"""Tiering rounds into Iceberg: what pyiceberg and DuckDB read back, offsets, exactly-once."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import random
from decimal import Decimal
from typing import Any
from urllib.parse import urlparse

import lake_scenarios as scenario
import numpy as np
import pyarrow as pa
import pytest
from lake_helpers import (
    SYSTEM,
    USER_COLUMNS,
    USERS,
    Change,
    ReadBoth,
    Tiering,
    before,
    bucket_of,
    check_both_readers,
    current_summary,
    delete,
    expected_log_rows,
    expected_pk_rows,
    insert,
    latest_snapshot,
    table_info,
    upsert,
)

from strom.common import types as T
from strom.common.table_bucket import TableBucket
from strom.lake import LakeCommitConflictError, StaleLakeCommitError
from strom.lake.iceberg.committer import IcebergLakeCommitter
from strom.lake.iceberg.storage import IcebergLakeStorage
from strom.lake.iceberg.writer import IcebergWriteResult
from strom.lake.interface import BucketKey, WriteResult


def _local(path: str) -> str:
    parsed = urlparse(path)
    return parsed.path if parsed.scheme == "file" else path


def iceberg_results(results: list[WriteResult]) -> list[IcebergWriteResult]:
    """What the Iceberg writers returned, with their data and delete files."""
    assert all(isinstance(r, IcebergWriteResult) for r in results)
    return [r for r in results if isinstance(r, IcebergWriteResult)]


def _check(read_both: ReadBoth, tiering: Tiering, expected: list[dict[str, Any]], columns: list[str]) -> None:
    check_both_readers(read_both, tiering.info, expected, columns)


# ------------------------------------------------------------------------------------ log tables


def test_log_table_rounds_read_back_equal(storage: IcebergLakeStorage, read_both: ReadBoth) -> None:
    info = table_info("events", scenario.EVENTS, buckets=2)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    scenario.tier_event_rounds(
        tiering, lambda: _check(read_both, tiering, expected_log_rows(tiering), scenario.EVENT_COLUMNS)
    )
    # System columns: the bucket, the offset within it and the commit timestamp.
    py_rows, duck_rows = read_both(info, ["id", *SYSTEM])
    for rows in (py_rows, duck_rows):
        by_id = {r["id"]: r for r in rows}
        assert by_id[213]["__bucket"] == 1 and by_id[213]["__offset"] == 13
        assert by_id[3]["__bucket"] == 0 and by_id[3]["__offset"] == 3
        assert by_id[3]["__timestamp"].tzinfo is not None
    first_ts = tiering.logs[(None, 0)][0][1]
    assert min(r["__timestamp"] for r in py_rows) == dt.datetime.fromtimestamp(first_ts / 1000, dt.UTC)
    # Files are sorted by offset and stay inside their bucket's partition.
    table = storage.catalog().load_table(info.table_path)
    for task in table.scan().plan_files():
        assert task.file.partition[0] in (0, 1)
        assert "__bucket=" in task.file.file_path


def test_keyed_partitioned_log_table(storage: IcebergLakeStorage, read_both: ReadBoth) -> None:
    info = table_info("clicks", scenario.CLICKS, bucket_keys=["user"], partition_keys=["dt"], buckets=4)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    scenario.tier_click_rounds(tiering)
    _check(read_both, tiering, expected_log_rows(tiering), scenario.CLICK_COLUMNS)
    table = storage.catalog().load_table(info.table_path)
    rows = table.scan(selected_fields=("user", "__bucket", "dt")).to_arrow().to_pylist()
    for row in rows:  # each row sits in its Fluss bucket, which Iceberg's transform agrees with
        assert row["__bucket"] == bucket_of(info, row)
    for task in table.scan().plan_files():
        assert task.file.partition[0].startswith("2024-") and 0 <= task.file.partition[1] < 4
    # Pruning by the bucket key reads only that key's bucket.
    user_files = list(table.scan(row_filter="user = 'u5'").plan_files())
    assert {t.file.partition[1] for t in user_files} == {bucket_of(info, {"user": "u5"})}
    scenario.assert_click_offsets(storage.committer(info).latest_snapshot())


def test_writer_refuses_rows_of_another_bucket(storage: IcebergLakeStorage) -> None:
    info = table_info("k", [("id", T.BIGINT())], bucket_keys=["id"], buckets=8)
    storage.catalog().create_table(info)
    with storage.writer(info, 0) as writer, pytest.raises(ValueError, match="another Iceberg bucket"):
        writer.write(pa.table({"id": pa.array(range(20), pa.int64())}), None, range(20), [0] * 20)
    location = _local(storage.catalog().load_table(info.table_path).location())
    assert not [f for _, _, files in os.walk(os.path.join(location, "data")) for f in files]


# ------------------------------------------------------------------------------ primary-key tables


def test_primary_key_table_upserts_and_deletes_across_rounds(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("users", USERS, primary_key=["id"], buckets=3)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    columns = USER_COLUMNS
    scenario.tier_new_users(tiering)
    _check(read_both, tiering, expected_pk_rows(tiering), columns)
    # Updates as -U/+U pairs, plain deletes, re-inserts of deleted keys, new keys.
    changes = []
    for i in range(0, 30, 3):
        changes += [before(id=i, name=f"n{i}", score=i), upsert(id=i, name=f"u{i}", score=i + 100)]
    changes += [delete(id=i, name=f"n{i}", score=i) for i in range(1, 30, 5)]
    changes += [insert(id=i, name=f"new{i}", score=-i) for i in range(30, 36)]
    tiering.append(changes)
    tiering.round(batch_rows=4)
    _check(read_both, tiering, expected_pk_rows(tiering), columns)
    tiering.append([insert(id=1, name="back", score=1), upsert(id=3, name="again", score=3)])
    tiering.append([delete(id=30, name="new30", score=-30), upsert(id=0, name="zero", score=0)])
    tiering.round()
    expected = expected_pk_rows(tiering)
    _check(read_both, tiering, expected, columns)
    assert len(expected) == 30 - 6 + 1 + 6 - 1
    # Every key is live exactly once, in its own bucket.
    py_rows, duck_rows = read_both(info, ["id", "__bucket"])
    for rows in (py_rows, duck_rows):
        assert len({r["id"] for r in rows}) == len(rows)
    table = storage.catalog().load_table(info.table_path)
    summary = current_summary(table)
    assert summary.operation.value == "overwrite"
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    assert {m.content.name for m in manifests} == {"DATA", "DELETES"}


def test_later_changes_of_a_key_win_within_one_split(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("kv", USERS, primary_key=["id"], buckets=1)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(
        [
            insert(id=1, name="a", score=1),
            before(id=1, name="a", score=1),
            upsert(id=1, name="b", score=2),
            insert(id=2, name="x", score=0),
            delete(id=2, name="x", score=0),
            insert(id=3, name="c", score=3),
            before(id=1, name="b", score=2),
            upsert(id=1, name="c", score=3),
        ]
    )
    tiering.round(batch_rows=2)
    _check(
        read_both,
        tiering,
        [{"id": 1, "name": "c", "score": 3}, {"id": 3, "name": "c", "score": 3}],
        ["id", "name", "score"],
    )
    # Only the surviving versions were written: no deletes were needed for a fresh table.
    table = storage.catalog().load_table(info.table_path)
    assert table.scan().to_arrow().num_rows == 2
    assert int(current_summary(table)["total-delete-files"]) == 0


def test_partitioned_primary_key_table_with_string_keys(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info(
        "orders",
        [("order_id", T.STRING()), ("region", T.STRING()), ("total", T.DOUBLE()), ("at", T.TIMESTAMP_LTZ(3))],
        primary_key=["order_id", "region"],
        partition_keys=["region"],
        buckets=4,
    )
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    tiering.append(
        insert(order_id=f"o{i}", region=["eu", "us"][i % 2], total=i * 1.5, at=at) for i in range(40)
    )
    tiering.round()
    tiering.append(
        upsert(order_id=f"o{i}", region=["eu", "us"][i % 2], total=-1.0, at=at) for i in range(0, 40, 4)
    )
    tiering.append(
        delete(order_id=f"o{i}", region=["eu", "us"][i % 2], total=0.0, at=at) for i in range(1, 40, 6)
    )
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering), ["order_id", "region", "total", "at"])


def test_composite_primary_key_of_many_types(storage: IcebergLakeStorage, read_both: ReadBoth) -> None:
    info = table_info(
        "composite",
        [
            ("d", T.DECIMAL(12, 2)),
            ("b", T.BYTES()),
            ("ts", T.TIMESTAMP(6)),
            ("day", T.DATE()),
            ("v", T.STRING()),
        ],
        primary_key=["d", "b", "ts", "day"],
        bucket_keys=["d"],
        buckets=3,
    )
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    base = dt.datetime(2024, 1, 1)

    def row(i: int, v: str) -> dict[str, Any]:
        return {
            "d": Decimal(i % 7).scaleb(-2),
            "b": bytes([i % 5]),
            "ts": base + dt.timedelta(seconds=i),
            "day": dt.date(2024, 1, 1 + i % 3),
            "v": v,
        }

    tiering.append(insert(**row(i, "a")) for i in range(50))
    tiering.round()
    tiering.append(upsert(**row(i, "b")) for i in range(0, 50, 3))
    tiering.append(delete(**row(i, "")) for i in range(1, 50, 4))
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering), ["d", "b", "ts", "day", "v"])


def test_change_types_as_arrow_and_timestamps_as_arrow(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("arrowy", USERS, primary_key=["id"], buckets=1)
    storage.catalog().create_table(info)
    with storage.writer(info, 0) as writer:
        writer.write(
            pa.record_batch(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "name": ["a", "b"],
                    "score": pa.array([1, 2], pa.int32()),
                }
            ),
            pa.array([1, 1], pa.int8()),
            pa.array([0, 1], pa.int64()),
            pa.array([1000, 2000], pa.timestamp("ms", tz="UTC")),
        )
        result = writer.complete()
    assert result.record_count == 2 and result.end_offset == 2
    storage.committer(info).commit([pickle.loads(pickle.dumps(result))], {(None, 0): 2})
    py_rows, duck_rows = read_both(info, ["id", "__timestamp"])
    assert sorted(r["__timestamp"].timestamp() for r in py_rows) == [1.0, 2.0]
    assert sorted(r["__timestamp"].timestamp() for r in duck_rows) == [1.0, 2.0]


# ------------------------------------------------------------------------------ offsets and commits


def test_snapshot_properties_carry_offsets_and_commit_user(storage: IcebergLakeStorage) -> None:
    info = table_info("t", USERS, primary_key=["id"], buckets=2)
    storage.catalog().create_table(info)
    committer = storage.committer(info)
    assert committer.latest_snapshot() is None
    tiering = Tiering(storage, info)
    tiering.append(insert(id=i, name="x", score=i) for i in range(10))
    first = tiering.round()
    info1 = committer.latest_snapshot()
    assert info1 is not None and info1.snapshot_id == first
    assert info1.properties["commit-user"] == "__fluss_lake_tiering"
    assert info1.bucket_offsets == {
        (None, 0): len(tiering.logs[(None, 0)]),
        (None, 1): len(tiering.logs[(None, 1)]),
    }
    assert json.loads(info1.properties["fluss-offsets"]) == [
        {"bucket": b, "offset": info1.bucket_offsets[(None, b)]} for b in (0, 1)
    ]
    # A round touching one bucket still records both: offsets are cumulative.
    tiering.append([upsert(id=100 + i, name="y", score=0) for i in range(5)])
    touched = {k for k, log in tiering.logs.items() if len(log) > tiering.tiered.get(k, 0)}
    tiering.round()
    info2 = committer.latest_snapshot()
    assert info2 is not None and set(info2.bucket_offsets) == {(None, 0), (None, 1)}
    for key in touched:
        assert info2.bucket_offsets[key] == len(tiering.logs[key])
    # Snapshots not made by tiering are skipped when looking for the latest offsets.
    table = storage.catalog().load_table(info.table_path)
    table.append(
        pa.table(
            {
                "id": pa.array([999], pa.int64()),
                "name": ["foreign"],
                "score": pa.array([0], pa.int32()),
                "__bucket": pa.array([0], pa.int32()),
                "__offset": pa.array([0], pa.int64()),
                "__timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
            },
            schema=table.schema().as_arrow(),
        )
    )
    assert latest_snapshot(committer).snapshot_id == info2.snapshot_id


def test_recommitting_a_round_returns_its_snapshot(storage: IcebergLakeStorage) -> None:
    info = table_info("t", USERS, primary_key=["id"], buckets=2)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(insert(id=i, name="x", score=i) for i in range(10))
    results, ends = tiering.write_round()
    committer = storage.committer(info)
    first = committer.commit(results, ends)
    again = committer.commit(results, ends)  # e.g. the first commit's answer was lost
    assert again == first
    table = storage.catalog().load_table(info.table_path)
    assert len(table.snapshots()) == 1 and table.scan().to_arrow().num_rows == 10


def test_a_second_commit_of_the_same_offsets_is_refused(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("t", USERS, buckets=2, bucket_keys=["id"])
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(Change({"id": i, "name": "x", "score": i}) for i in range(10))
    results, ends = tiering.write_round()
    tiering.commit(results, ends)
    # A restarted job re-reads the same records and writes them again: its commit must fail.
    tiering.tiered.clear()
    duplicate_results, duplicate_ends = tiering.write_round()
    assert duplicate_ends == ends
    committer = storage.committer(info)
    with pytest.raises(StaleLakeCommitError, match=r"start below|not ahead"):
        committer.commit(duplicate_results, duplicate_ends)
    # Going back on one bucket is refused even when another advances.
    mixed: dict[BucketKey, int] = {(None, 0): ends[(None, 0)] - 1, (None, 1): ends[(None, 1)] + 1}
    with pytest.raises(StaleLakeCommitError, match="go back"):
        committer.commit([], mixed)
    with pytest.raises(StaleLakeCommitError, match="not ahead"):
        committer.commit([], ends)
    committer.abort(duplicate_results)
    for result in iceberg_results(duplicate_results):
        for f in result.files:
            assert not os.path.exists(_local(f.path))
    tiering.tiered.update(ends)
    _check(read_both, tiering, expected_log_rows(tiering), ["id", "name", "score"])
    # The restarted job resumes from the lake's offsets.
    assert latest_snapshot(committer).bucket_offsets == ends


def test_a_job_resuming_from_older_offsets_is_refused(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("t", USERS, primary_key=["id"], buckets=1)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(insert(id=i, name="x", score=i) for i in range(10))
    tiering.round()
    # A zombie job still resuming from offset 0 reads further than the lake and tries to commit.
    tiering.append(insert(id=i, name="y", score=i) for i in range(10, 15))
    committed = dict(tiering.tiered)
    tiering.tiered.clear()
    results, ends = tiering.write_round()
    assert ends[(None, 0)] > committed[(None, 0)] and results[0].start_offset == 0
    with pytest.raises(StaleLakeCommitError, match="start below"):
        storage.committer(info).commit(results, ends)
    storage.committer(info).abort(results)
    tiering.tiered.update(committed)
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering), ["id", "name", "score"])


def test_offsets_can_advance_without_files(storage: IcebergLakeStorage) -> None:
    info = table_info("t", USERS, buckets=1)
    storage.catalog().create_table(info)
    committer = storage.committer(info)
    first = committer.commit([], {(None, 0): 5})  # e.g. only empty batches in the log
    assert latest_snapshot(committer).bucket_offsets == {(None, 0): 5}
    assert latest_snapshot(committer).snapshot_id == first


def test_abort_deletes_written_files_but_not_committed_ones(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("t", USERS, primary_key=["id"], buckets=2)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(insert(id=i, name="x", score=i) for i in range(10))
    committed, ends = tiering.write_round()
    tiering.commit(committed, ends)
    tiering.append([upsert(id=i, name="y", score=0) for i in range(10)])
    results, _ = tiering.write_round()
    paths = [f.path for r in iceberg_results(results) for f in r.files]
    assert paths and all(os.path.exists(_local(p)) for p in paths)
    assert any(r.delete_files for r in iceberg_results(results))
    committer = storage.committer(info)
    committer.abort(results)
    assert not any(os.path.exists(_local(p)) for p in paths)
    committer.abort(committed)  # already committed: must not break the table
    _check(read_both, tiering, expected_pk_rows(tiering), ["id", "name", "score"])


def test_a_writer_closed_without_completing_leaves_no_files(storage: IcebergLakeStorage) -> None:
    info = table_info("t", USERS, buckets=1)
    storage.catalog().create_table(info)
    writer = storage.writer(info, 0)
    writer.write(
        pa.table({"id": pa.array([1], pa.int64()), "name": ["a"], "score": pa.array([1], pa.int32())}),
        None,
        [0],
        [0],
    )
    writer.close()
    location = _local(storage.catalog().load_table(info.table_path).location())
    assert not [f for _, _, files in os.walk(os.path.join(location, "data")) for f in files]


def test_deletes_against_rewritten_files_are_refused(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    info = table_info("t", USERS, primary_key=["id"], buckets=1)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    for r in range(3):
        tiering.append(insert(id=r * 10 + i, name="x", score=i) for i in range(5))
        tiering.round()
    tiering.append([upsert(id=1, name="changed", score=1)])
    results, ends = tiering.write_round()
    assert iceberg_results(results)[0].delete_files
    # Compaction runs in between (which the service must not do): the deletes now point nowhere.
    committer = storage.committer(info)
    assert committer.compact(0) is not None
    with pytest.raises(LakeCommitConflictError):
        committer.commit(results, ends)
    committer.abort(results)
    # The round re-runs against the new files and succeeds.
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering), ["id", "name", "score"])


def test_results_are_checked_against_the_table(storage: IcebergLakeStorage) -> None:
    info = table_info("t", USERS, buckets=1)
    storage.catalog().create_table(info)
    committer: IcebergLakeCommitter = storage.committer(info)
    foreign = IcebergWriteResult(TableBucket(999, None, 0), None, 0, None)
    with pytest.raises(ValueError, match="not for table"):
        committer.commit([foreign], {(None, 0): 1})
    mine = IcebergWriteResult(TableBucket(info.table_id, None, 0), None, 0, None)
    with pytest.raises(ValueError, match="no end offset"):
        committer.commit([mine], {(None, 1): 1})
    wrote_more = IcebergWriteResult(TableBucket(info.table_id, None, 0), None, 5, 5, 0)
    with pytest.raises(ValueError, match="up to offset 5"):
        committer.commit([wrote_more], {(None, 0): 3})
    assert committer.latest_snapshot() is None


def test_wide_types_round_trip(storage: IcebergLakeStorage, read_both: ReadBoth) -> None:
    columns = [
        ("id", T.INT()),
        ("tiny", T.TINYINT()),
        ("ts", T.TIMESTAMP(9)),
        ("t", T.TIME()),
        ("bin", T.BINARY(2)),
        ("tags", T.ARRAY(T.STRING())),
        ("attrs", T.MAP(T.STRING(), T.BIGINT())),
    ]
    info = table_info("wide", columns, buckets=1)
    storage.catalog().create_table(info)
    schema = info.schema.to_arrow_schema()
    batch = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "tiny": pa.array([-1, 7], pa.int8()),
            "ts": pa.array([1_000_000_001_000, 5], pa.timestamp("ns")),
            "t": pa.array([3600, 0], schema.field("t").type),
            "bin": pa.array([b"ab", b"cd"], pa.binary(2)),
            "tags": pa.array([["a", "b"], None], pa.list_(pa.string())),
            "attrs": pa.array([[("k", 1)], []], schema.field("attrs").type),
        }
    ).cast(schema)
    with storage.writer(info, 0) as writer:
        writer.write(batch, None, np.array([0, 1]), np.array([0, 0]))
        result = writer.complete()
    storage.committer(info).commit([result], {(None, 0): 2})
    py_rows, duck_rows = read_both(info, ["id", "tiny", "ts", "t", "bin", "tags"])
    for rows in (py_rows, duck_rows):
        row = next(r for r in rows if r["id"] == 1)
        assert row["tiny"] == -1 and row["tags"] == ["a", "b"] and row["bin"] == b"ab"
        assert row["ts"] == dt.datetime(1970, 1, 1, 0, 16, 40, 1)
        assert row["t"] == dt.time(1, 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rounds_killed_anywhere_neither_lose_nor_repeat_records(
    storage: IcebergLakeStorage, read_both: ReadBoth, seed: int
) -> None:
    """Each restarted job resumes from the lake's latest offsets, whatever point the last one died at."""
    rng = random.Random(seed)
    info = table_info("crashy", USERS, primary_key=["id"], buckets=3)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    next_id = 0
    for _ in range(8):
        changes = []
        for _ in range(rng.randrange(1, 12)):
            if next_id and rng.random() < 0.5:
                key = rng.randrange(next_id)
                kind = rng.choice([upsert, delete, insert])
                changes.append(kind(id=key, name=f"v{rng.randrange(100)}", score=rng.randrange(9)))
            else:
                changes.append(insert(id=next_id, name="new", score=0))
                next_id += 1
        tiering.append(changes)
        # A (re)started job asks the lake where to resume.
        latest = storage.committer(info).latest_snapshot()
        tiering.tiered = dict(latest.bucket_offsets) if latest else {}
        results, ends = tiering.write_round(batch_rows=rng.randrange(1, 5))
        crash = rng.choice(["none", "before-commit", "after-commit", "after-abort"])
        if crash == "before-commit":
            continue  # died with files written: they stay orphaned, nothing is committed
        if crash == "after-abort":
            storage.committer(info).abort(results)
            continue
        tiering.commit(results, ends)
        if crash == "after-commit":
            # Died before telling the coordinator: the next job still starts from the lake.
            continue
    latest = storage.committer(info).latest_snapshot()
    tiering.tiered = dict(latest.bucket_offsets) if latest else {}
    results, ends = tiering.write_round()
    if results:
        tiering.commit(results, ends)
    assert tiering.tiered == {k: len(v) for k, v in tiering.logs.items()}
    _check(read_both, tiering, expected_pk_rows(tiering), ["id", "name", "score"])
