"""Lake maintenance: compaction of a bucket's files and snapshot expiration."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq
from lake_helpers import (
    USER_COLUMNS,
    USERS,
    Change,
    ReadBoth,
    Tiering,
    check_both_readers,
    current_summary,
    delete,
    expected_log_rows,
    expected_pk_rows,
    insert,
    latest_snapshot,
    normalized,
    table_info,
    upsert,
)

from strom.common import types as T
from strom.lake.iceberg.storage import IcebergLakeStorage

COLUMNS = USER_COLUMNS


def _local(path: str) -> str:
    return urlparse(path).path


def _check(read_both: ReadBoth, tiering: Tiering, expected: list[dict[str, Any]]) -> None:
    check_both_readers(read_both, tiering.info, expected, COLUMNS)


def _pk_history(storage: IcebergLakeStorage, buckets: int = 2) -> Tiering:
    info = table_info("users", USERS, primary_key=["id"], buckets=buckets)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    tiering.append(insert(id=i, name="a", score=i) for i in range(40))
    tiering.round()
    for r in range(4):
        tiering.append(upsert(id=i, name=f"r{r}", score=r) for i in range(r, 40, 5))
        tiering.append(delete(id=i, name="", score=0) for i in range(r * 7, 40, 11))
        tiering.round()
    return tiering


def test_compaction_keeps_content_and_drops_dead_deletes(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    tiering = _pk_history(storage)
    expected = expected_pk_rows(tiering)
    committer = storage.committer(tiering.info)
    before = committer.latest_snapshot()
    table = storage.catalog().load_table(tiering.info.table_path)
    assert int(current_summary(table)["total-delete-files"]) > 0
    # both buckets of the round rewritten in one snapshot, as the tiering service asks for them
    snapshots_before = len(storage.catalog().load_table(tiering.info.table_path).snapshots())
    assert len(committer.compact_buckets([(0, None), (1, None)])) == 1
    assert len(storage.catalog().load_table(tiering.info.table_path).snapshots()) == snapshots_before + 1
    _check(read_both, tiering, expected)
    table = storage.catalog().load_table(tiering.info.table_path)
    files = [t.file for t in table.scan().plan_files()]
    assert sorted(f.partition[0] for f in files) == [0, 1]  # one file per bucket
    assert int(current_summary(table)["total-delete-files"]) == 0
    assert int(current_summary(table)["total-records"]) == len(expected)
    for f in files:  # rows stay in offset order
        offsets = pq.read_table(_local(f.file_path), columns=["__offset"]).column(0).to_pylist()
        assert offsets == sorted(offsets)
    # The compaction snapshot keeps the tiering offsets, so a restart resumes where it was.
    after = latest_snapshot(committer)
    assert before is not None and after.snapshot_id != before.snapshot_id
    assert after.bucket_offsets == before.bucket_offsets
    # Nothing left to do, and tiering carries on on top of the compacted files.
    assert committer.compact(0) is None
    tiering.append([upsert(id=i, name="post", score=-1) for i in range(0, 40, 3)])
    tiering.append([delete(id=i, name="", score=0) for i in range(1, 40, 8)])
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering))


def test_compaction_of_a_partitioned_log_table(storage: IcebergLakeStorage, read_both: ReadBoth) -> None:
    info = table_info(
        "logs",
        [("id", T.BIGINT()), ("name", T.STRING()), ("score", T.INT()), ("day", T.STRING())],
        partition_keys=["day"],
        buckets=2,
    )
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    for r in range(3):
        for b in range(2):
            tiering.append(
                (
                    Change({"id": r * 100 + b * 10 + i, "name": "x", "score": i, "day": "d1"})
                    for i in range(4)
                ),
                bucket=b,
            )
        tiering.round()
    committer = storage.committer(info)
    assert committer.compact(1, "d1") is not None
    table = storage.catalog().load_table(info.table_path)
    per_bucket: dict[Any, Any] = {}
    for task in table.scan().plan_files():
        per_bucket.setdefault(task.file.partition[1], []).append(task.file)
    assert len(per_bucket[1]) == 1 and len(per_bucket[0]) == 3
    # The three rounds' manifests (each holding both buckets) are merged into one, next to the
    # compacted file's: manifests do not pile up with rounds.
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    assert len(manifests) == 2, [m.manifest_path for m in manifests]
    py_rows, duck_rows = read_both(info, COLUMNS)
    want = normalized(expected_log_rows(tiering), COLUMNS)
    assert normalized(py_rows, COLUMNS) == want and normalized(duck_rows, COLUMNS) == want


def test_expire_snapshots_deletes_unreferenced_files(
    storage: IcebergLakeStorage, read_both: ReadBoth
) -> None:
    tiering = _pk_history(storage)
    committer = storage.committer(tiering.info)
    for bucket in range(2):
        committer.compact(bucket)
    table = storage.catalog().load_table(tiering.info.table_path)
    old_files = {
        e.data_file.file_path
        for s in table.snapshots()
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io)
    }
    assert len(table.snapshots()) == 7
    # Not old enough yet: the default cut-off is five days.
    assert committer.expire_snapshots() == 0
    expired = committer.expire_snapshots(
        older_than=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1), retain_last=2
    )
    assert expired == 5
    table = storage.catalog().load_table(tiering.info.table_path)
    assert len(table.snapshots()) == 2
    live = {t.file.file_path for t in table.scan().plan_files()}
    live |= {d.file_path for t in table.scan().plan_files() for d in t.delete_files}
    gone = {p for p in old_files - live if not os.path.exists(_local(p))}
    assert gone, "files only old snapshots referenced are deleted"
    # Files still referenced by the retained snapshots are kept.
    retained = {
        e.data_file.file_path
        for s in table.snapshots()
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io)
    }
    assert all(os.path.exists(_local(p)) for p in retained)
    _check(read_both, tiering, expected_pk_rows(tiering))
    assert latest_snapshot(committer).bucket_offsets == {k: len(v) for k, v in tiering.logs.items()}
    tiering.append([insert(id=500, name="z", score=5)])
    tiering.round()
    _check(read_both, tiering, expected_pk_rows(tiering))
