"""Tiering rounds into Lance and Delta Lake (log tables): what each format's own reader and DuckDB
read back, the offsets in the version's properties, and exactly once across killed rounds."""

from __future__ import annotations

import importlib
import pathlib
import random
from collections.abc import Iterable
from typing import Any

import duckdb
import lake_scenarios as scenario
import pytest
from lake_helpers import (
    USER_COLUMNS,
    USERS,
    Change,
    Tiering,
    before,
    delete,
    expected_log_rows,
    expected_pk_rows,
    insert,
    normalized,
    table_info,
    upsert,
)

from strom.common.bucketing import fluss_bucket
from strom.common.errors import InvalidTableError
from strom.lake import StaleLakeCommitError, load_lake_storage
from strom.lake.interface import LakeStorage
from strom.lake.offsets import decode_bucket_offsets
from strom.record.key_encoder import CompactedKeyEncoder

FORMATS = ["lance", "delta"]


class FlussTiering(Tiering):
    """`lake_helpers.Tiering` with rows bucketed as Lance and Delta tables are: Fluss's own function."""

    def append(self, changes: Iterable[Change], bucket: int | None = None) -> None:
        for change in changes:
            partition = self.partition_of(change.row)
            b = bucket
            if b is None:
                keys = self.info.bucket_keys
                encoder = CompactedKeyEncoder([self.info.schema.get_column(k).data_type for k in keys])
                b = fluss_bucket(encoder.encode([change.row[k] for k in keys]), self.info.bucket_count)
            key = (self.partition_ids[partition] if partition else None, b)
            self.clock += 1
            self.logs.setdefault(key, []).append((change, self.clock))


@pytest.fixture(params=FORMATS)
def storage(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> LakeStorage:
    return load_lake_storage(request.param, {"warehouse": str(tmp_path / request.param)})


@pytest.fixture(scope="module")
def duck(tmp_path_factory: pytest.TempPathFactory) -> Any:
    con = duckdb.connect(
        config={
            "extension_directory": str(tmp_path_factory.mktemp("duckdb_ext")),
            "autoinstall_known_extensions": "false",
        }
    )
    version = con.sql("PRAGMA version").fetchone()[0]  # type: ignore[index]
    module = importlib.import_module("duckdb_extension_delta")
    path = pathlib.Path(module.__file__).parent / "extensions" / version / "delta.duckdb_extension"  # type: ignore[arg-type]
    con.sql(f"INSTALL '{path}'")
    con.sql("LOAD delta")
    yield con
    con.close()


def read_back(storage: LakeStorage, info: Any, columns: list[str], duck: Any) -> list[list[dict[str, Any]]]:
    """The rows as the format's own reader sees them (and DuckDB's delta_scan for Delta)."""
    uri = storage.catalog().uri(info.table_path)  # type: ignore[attr-defined]
    if storage.format == "lance":
        import lance

        return [lance.dataset(uri).to_table(columns=columns).to_pylist()]
    from deltalake import DeltaTable

    by_delta = DeltaTable(uri).to_pyarrow_table(columns=columns).to_pylist()
    select = ", ".join(f'"{c}"' for c in columns)
    by_duckdb = duck.sql(f"SELECT {select} FROM delta_scan('{uri}')").arrow()
    if hasattr(by_duckdb, "read_all"):
        by_duckdb = by_duckdb.read_all()
    return [by_delta, by_duckdb.to_pylist()]


def check(storage: LakeStorage, tiering: Tiering, columns: list[str], duck: Any) -> None:
    want = normalized(expected_log_rows(tiering), columns)
    for rows in read_back(storage, tiering.info, columns, duck):
        assert normalized(rows, columns) == want


def info_for(storage: LakeStorage, name: str, columns: Any, **kwargs: Any) -> Any:
    return table_info(name, columns, properties={"table.datalake.format": storage.format}, **kwargs)


def test_rounds_read_back_equal_with_offsets_and_exactly_once(storage: LakeStorage, duck: Any) -> None:
    """Unkeyed and keyed partitioned log tables; offsets in the version; stale and repeated rounds."""
    info = info_for(storage, "events", scenario.EVENTS, buckets=2)
    storage.catalog().create_table(info)
    storage.catalog().create_table(info, creating_fluss_table=False)  # idempotent for the same layout
    tiering = FlussTiering(storage, info)
    scenario.tier_event_rounds(tiering, lambda: check(storage, tiering, scenario.EVENT_COLUMNS, duck))
    rows = read_back(storage, info, ["id", "__bucket", "__offset"], duck)[0]
    by_id = {r["id"]: r for r in rows}
    assert by_id[213]["__bucket"] == 1 and by_id[213]["__offset"] == 13
    committer = storage.committer(info)
    latest = committer.latest_snapshot()
    assert latest is not None and latest.bucket_offsets == {(None, 0): 15, (None, 1): 15}
    assert latest.properties["commit-user"] == "__fluss_lake_tiering"
    assert [o.offset for o in decode_bucket_offsets(latest.properties["fluss-offsets"])] == [15, 15]

    # a round committed again returns its version; a job resuming from older offsets is refused
    tiering.append([Change({"id": 900, "msg": "x", "amount": None, "day": None})], bucket=0)
    results, ends = tiering.write_round()
    version = committer.commit(results, ends)
    assert committer.commit(results, ends) == version
    tiering.tiered.update(ends)
    stale, stale_ends = Tiering(storage, info, logs=tiering.logs).write_round()
    with pytest.raises(StaleLakeCommitError):
        committer.commit(stale, stale_ends)
    committer.abort(stale)  # deletes the stale files, not the committed ones
    check(storage, tiering, scenario.EVENT_COLUMNS, duck)

    # a non-empty lake table is not taken over by a new Fluss table
    with pytest.raises(Exception, match="not empty"):
        storage.catalog().create_table(info)

    clicks = info_for(storage, "clicks", scenario.CLICKS, bucket_keys=["user"], partition_keys=["dt"])
    storage.catalog().create_table(clicks)
    click_tiering = FlussTiering(storage, clicks)
    scenario.tier_click_rounds(click_tiering)
    check(storage, click_tiering, scenario.CLICK_COLUMNS, duck)
    scenario.assert_click_offsets(storage.committer(clicks).latest_snapshot())


def test_lance_refuses_primary_key_tables(tmp_path: pathlib.Path) -> None:
    storage = load_lake_storage("lance", {"warehouse": str(tmp_path)})
    info = info_for(storage, "users", USERS, primary_key=["id"])
    with pytest.raises(InvalidTableError, match="primary-key"):
        storage.catalog().create_table(info)


@pytest.mark.parametrize("seed", [1, 2])
def test_delta_primary_key_rounds_killed_anywhere_end_with_the_current_rows(
    tmp_path: pathlib.Path, duck: Any, seed: int
) -> None:
    """Upserts, updates split over rounds and deletes merge by key; each restarted job resumes from
    the lake's offsets, whatever point the last one died at; deltalake and DuckDB read the current rows."""
    storage = load_lake_storage("delta", {"warehouse": str(tmp_path)})
    rng = random.Random(seed)
    info = info_for(storage, "users", USERS, primary_key=["id"], bucket_keys=["id"], buckets=3)
    storage.catalog().create_table(info)
    tiering = FlussTiering(storage, info)
    next_id = 0
    for _ in range(8):
        changes = []
        for _ in range(rng.randrange(1, 12)):
            if next_id and rng.random() < 0.5:
                key = rng.randrange(next_id)
                kind = rng.choice([upsert, delete, insert, before])
                changes.append(kind(id=key, name=f"v{rng.randrange(100)}", score=rng.randrange(9)))
            else:
                changes.append(insert(id=next_id, name="new", score=0))
                next_id += 1
        tiering.append(changes)
        latest = storage.committer(info).latest_snapshot()
        tiering.tiered = dict(latest.bucket_offsets) if latest else {}
        results, ends = tiering.write_round(batch_rows=rng.randrange(1, 5))
        crash = rng.choice(["none", "before-commit", "after-commit", "after-abort"])
        if crash == "before-commit":
            continue
        if crash == "after-abort":
            storage.committer(info).abort(results)
            continue
        tiering.commit(results, ends)
    latest = storage.committer(info).latest_snapshot()
    tiering.tiered = dict(latest.bucket_offsets) if latest else {}
    results, ends = tiering.write_round()
    if results:
        tiering.commit(results, ends)
    assert tiering.tiered == {k: len(v) for k, v in tiering.logs.items()}
    want = normalized(expected_pk_rows(tiering), USER_COLUMNS)
    assert want
    for rows in read_back(storage, info, USER_COLUMNS, duck):
        assert normalized(rows, USER_COLUMNS) == want


@pytest.mark.parametrize("seed", [1, 2])
def test_rounds_killed_anywhere_neither_lose_nor_repeat_records(
    storage: LakeStorage, duck: Any, seed: int
) -> None:
    """Each restarted job resumes from the lake's latest offsets, whatever point the last one died at."""
    rng = random.Random(seed)
    info = info_for(storage, "crashy", scenario.EVENTS, buckets=3)
    storage.catalog().create_table(info)
    tiering = FlussTiering(storage, info)
    next_id = 0
    for _ in range(8):
        for _ in range(rng.randrange(1, 12)):
            row = {"id": next_id, "msg": "m", "amount": None, "day": None}
            tiering.append([Change(row)], bucket=rng.randrange(3))
            next_id += 1
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
    latest = storage.committer(info).latest_snapshot()
    tiering.tiered = dict(latest.bucket_offsets) if latest else {}
    results, ends = tiering.write_round()
    if results:
        tiering.commit(results, ends)
    assert tiering.tiered == {k: len(v) for k, v in tiering.logs.items()}
    check(storage, tiering, ["id"], duck)


def test_a_duplicate_job_committing_between_checks_and_commit_makes_the_other_stale(
    storage: LakeStorage, duck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit lands only as the version after the one checked: a rival commit in between (which
    Lance would rebase over, and delta-rs retry over) sends the round back to its checks."""
    module = importlib.import_module(f"strom.lake.{storage.format}.committer")
    info = info_for(storage, "raced", scenario.EVENTS, buckets=1)
    storage.catalog().create_table(info)
    tiering = FlussTiering(storage, info)
    tiering.append([Change({"id": i, "msg": "m", "amount": None, "day": None}) for i in range(3)], bucket=0)
    first, ends = tiering.write_round()
    second, _ = tiering.write_round()
    checks = module.check_offsets_ahead

    def rival_commits_after_the_checks(*args: Any, **kwargs: Any) -> None:
        checks(*args, **kwargs)
        monkeypatch.setattr(module, "check_offsets_ahead", checks)
        storage.committer(info).commit(first, ends)

    monkeypatch.setattr(module, "check_offsets_ahead", rival_commits_after_the_checks)
    with pytest.raises(StaleLakeCommitError):
        storage.committer(info).commit(second, ends)
    tiering.tiered.update(ends)
    check(storage, tiering, ["id"], duck)


def live_files(storage: LakeStorage, info: Any) -> int:
    """Data files the latest version references."""
    catalog: Any = storage.catalog()
    if storage.format == "lance":
        return sum(len(f.metadata.files) for f in catalog.open(info.table_path).get_fragments())
    return int(catalog.open(info.table_path).get_add_actions(flatten=True).num_rows)


def test_compaction_merges_small_files_and_keeps_the_offsets(storage: LakeStorage, duck: Any) -> None:
    """table.datalake.auto-compaction's step: one file after many rounds, the same rows, the latest
    version still carrying the offsets, and rounds go on from them."""
    info = info_for(storage, "compacted", scenario.EVENTS, buckets=1)
    storage.catalog().create_table(info)
    tiering = FlussTiering(storage, info)
    for r in range(6):
        tiering.append(
            [Change({"id": r * 10 + i, "msg": "m", "amount": None, "day": None}) for i in range(4)], 0
        )
        tiering.round()
    committer = storage.committer(info)
    before = committer.latest_snapshot()
    assert before is not None and live_files(storage, info) == 6
    version = committer.compact(0)
    assert version is not None and live_files(storage, info) == 1
    after = committer.latest_snapshot()
    assert after is not None and after.snapshot_id == version  # union reads pin the compacted version
    assert after.bucket_offsets == before.bucket_offsets == {(None, 0): 24}
    assert committer.compact(0) is None  # nothing left to merge
    check(storage, tiering, ["id"], duck)
    tiering.append([Change({"id": 999, "msg": "m", "amount": None, "day": None})], 0)
    tiering.round()
    check(storage, tiering, ["id"], duck)


def data_files_on_disk(storage: LakeStorage, info: Any) -> int:
    uri = pathlib.Path(storage.catalog().uri(info.table_path))  # type: ignore[attr-defined]
    pattern = "data/*.lance" if storage.format == "lance" else "*.parquet"
    return len(list(uri.glob(pattern)))


def test_snapshot_expiry_drops_old_versions_and_keeps_what_tiering_and_union_reads_need(
    storage: LakeStorage, duck: Any
) -> None:
    """table.datalake.auto-expire-snapshot's step: after rounds and a compaction, versions older than
    the cutoff and the files only they held are gone; the latest tiering version (its offsets, its
    rows, a union read's lake half) stays, and rounds go on from it exactly once."""
    from datetime import UTC, datetime, timedelta

    from strom.spark.lake_source import read_bucket

    info = info_for(storage, "expired", scenario.EVENTS, buckets=1)
    storage.catalog().create_table(info)
    tiering = FlussTiering(storage, info)
    for r in range(4):
        tiering.append(
            [Change({"id": r * 10 + i, "msg": "m", "amount": None, "day": None}) for i in range(3)], 0
        )
        tiering.round()
    committer = storage.committer(info)
    assert committer.compact(0) is not None
    before = committer.latest_snapshot()
    assert before is not None and data_files_on_disk(storage, info) == 5
    # a cutoff before every version, or keeping them all, expires nothing
    assert committer.expire_snapshots(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert committer.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1), retain_last=100) == 0
    assert data_files_on_disk(storage, info) == 5

    assert committer.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1)) > 0
    assert data_files_on_disk(storage, info) == 1  # the compacted file alone
    uri = storage.catalog().uri(info.table_path)  # type: ignore[attr-defined]
    with pytest.raises(Exception):  # noqa: B017 - each format has its own "version is gone" error
        if storage.format == "lance":
            import lance

            lance.dataset(uri, version=1).to_table()
        else:
            from deltalake import DeltaTable

            DeltaTable(uri, version=1).to_pyarrow_table()
    after = committer.latest_snapshot()
    assert after is not None and after.bucket_offsets == before.bucket_offsets == {(None, 0): 12}
    warehouse = storage.properties["warehouse"]
    lake = (("datalake.format", storage.format), (f"datalake.{storage.format}.warehouse", warehouse))
    half = read_bucket(lake, info, after.snapshot_id, None, 0, 12, ["id"])
    assert sorted(half.column("id").to_pylist()) == sorted(r * 10 + i for r in range(4) for i in range(3))
    check(storage, tiering, ["id"], duck)
    tiering.append([Change({"id": 999, "msg": "m", "amount": None, "day": None})], 0)
    tiering.round()
    check(storage, tiering, ["id"], duck)
