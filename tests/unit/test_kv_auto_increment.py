"""Auto-increment columns on a real KvTablet: ids for new keys only, from reserved ranges, the target
column rules; and the key-only rows that Lookup's insert_if_not_exists writes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from kv_table_maker import KvTable, Op, make_info

from strom.common.errors import InvalidTableError, InvalidTargetColumnError, UnknownServerError
from strom.common.schema import Column, Schema
from strom.common.types import BIGINT, INT, STRING
from strom.server.tablet.kv.key_rows import KeyRows


class Sequence:
    """The coordinator's counter, as the tablet sees it: ranges that only move forward."""

    def __init__(self) -> None:
        self.last = 0
        self.calls: list[int] = []

    async def __call__(self, table_id: int, column_id: int, count: int) -> int:
        self.calls.append(count)
        start = self.last + 1
        self.last += count
        return start


def dictionary(tmp_path: Path, id_type=BIGINT, cache_size: int = 3) -> KvTable:  # type: ignore[no-untyped-def]
    schema = Schema(
        [Column("word", STRING()), Column("id", id_type()), Column("note", STRING())],
        primary_key=["word"],
        auto_increment_columns=["id"],
    )
    return KvTable(tmp_path, make_info(schema, {"table.auto-increment.cache-size": str(cache_size)}))


def put(
    t: KvTable, sequence: Sequence, ops: list[Op], targets: Iterable[int] | None = (0, 2)
) -> list[tuple[str, tuple[Any, ...]]]:
    auto = t.kv.auto_increment
    assert auto is not None
    asyncio.run(auto.reserve(len(ops), sequence))
    return t.put(ops, None if targets is None else list(targets))


def test_new_keys_get_increasing_ids_and_updates_keep_them(tmp_path: Path) -> None:
    t = dictionary(tmp_path)
    seq = Sequence()
    assert put(t, seq, [("a", None, "x"), ("b", None, "y")]) == [
        ("+I", ("a", 1, "x")),
        ("+I", ("b", 2, "y")),
    ]
    # an update keeps the id; a value sent for the id column is ignored (it is not a target)
    assert put(t, seq, [("a", 99, "x2"), ("c", 99, None), ("d", None, None)]) == [
        ("-U", ("a", 1, "x")),
        ("+U", ("a", 1, "x2")),
        ("+I", ("c", 3, None)),
        ("+I", ("d", 4, None)),
    ]
    # ranges of cache-size ids, fetched when the batch could need more than are left
    assert seq.calls == [3, 3]
    assert sorted(t.rows()) == [("a", 1, "x2"), ("b", 2, "y"), ("c", 3, None), ("d", 4, None)]


def test_a_new_leader_starts_from_a_fresh_range(tmp_path: Path) -> None:
    t = dictionary(tmp_path / "a", cache_size=100)
    seq = Sequence()
    put(t, seq, [("a", None, None)])
    # another tablet of the table (or the next leader) draws the next range: ids never repeat
    other = dictionary(tmp_path / "b", cache_size=100)
    put(other, seq, [("b", None, None)])
    put(t, seq, [("c", None, None)])
    assert sorted(t.rows() + other.rows()) == [("a", 1, None), ("b", 101, None), ("c", 2, None)]


def test_target_columns_must_leave_out_the_auto_increment_column(tmp_path: Path) -> None:
    t = dictionary(tmp_path)
    seq = Sequence()
    with pytest.raises(
        InvalidTargetColumnError, match=r"auto-increment column \[id\].*not explicitly specified"
    ):
        put(t, seq, [("a", 1, "x")], targets=None)
    with pytest.raises(InvalidTargetColumnError, match=r"\[id\] at index 1 must not be included"):
        put(t, seq, [("a", 1, "x")], targets=[0, 1])
    assert t.rows() == []


def test_int_column_overflow_is_refused(tmp_path: Path) -> None:
    t = dictionary(tmp_path, id_type=INT, cache_size=2)
    seq = Sequence()
    seq.last = 2**31 - 2
    put(t, seq, [("a", None, None)])
    with pytest.raises(UnknownServerError, match="Reached maximum value"):
        put(t, seq, [("b", None, None)])
    assert t.rows() == [("a", 2**31 - 1, None)]


def test_key_rows_insert_missing_keys_only(tmp_path: Path) -> None:
    t = dictionary(tmp_path)
    seq = Sequence()
    put(t, seq, [("a", None, "x")])
    rows = KeyRows(t.info)
    assert rows.target_columns == [0]
    keys = [t.key("a"), t.key("b")]
    asyncio.run(t.kv.auto_increment.reserve(2, seq))  # type: ignore[union-attr]
    t.put_bytes(rows.batch(keys), rows.target_columns)
    assert sorted(t.rows()) == [("a", 1, "x"), ("b", 2, None)]


def test_key_rows_refuse_partitioned_tables(tmp_path: Path) -> None:
    from strom.common.table_descriptor import TableDescriptor, TableInfo
    from strom.common.table_path import TablePath

    schema = Schema([Column("dt", STRING()), Column("w", STRING())], primary_key=["dt", "w"])
    descriptor = TableDescriptor(schema, partition_keys=["dt"], bucket_count=1)
    with pytest.raises(InvalidTableError, match="partitioned"):
        KeyRows(TableInfo(TablePath("db", "t"), 1, 1, descriptor, 0, 0))
