"""Virtual-table plumbing without a cluster: names and options, and the binlog's pairing of changes."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.common.types import INT, STRING
from strom.spark.options import ReadOptions, SparkOptionError, StartupMode
from strom.spark.types import arrow_schema_for
from strom.spark.virtual_tables import VirtualTable

INFO = TableInfo(
    TablePath("db", "t"),
    1,
    1,
    TableDescriptor(Schema([Column("id", INT()), Column("s", STRING())], primary_key=["id"]), bucket_count=1),
    0,
    0,
)


def test_split_names_and_options() -> None:
    kind, base = VirtualTable.from_options(
        {"path": "db.t$ChangeLog", "maxRowsPerTrigger": "7", "scan.union-read": "true"}
    )
    assert kind is VirtualTable.CHANGELOG and base["path"] == "db.t"
    read = ReadOptions.parse(base)
    assert read.startup_mode is StartupMode.EARLIEST and read.include_change_type and read.include_metadata
    assert read.max_rows_per_trigger == 7 and not read.union_read
    _, latest = VirtualTable.from_options({"table": "db.t$binlog", "scan.startup.mode": "latest"})
    assert ReadOptions.parse(latest).startup_mode is StartupMode.LATEST
    assert VirtualTable.from_options({"path": "db.t"})[0] is None
    with pytest.raises(SparkOptionError, match="names no virtual table"):
        VirtualTable.from_options({"path": "db.t$ro"})


def test_binlog_pairs_updates_and_keeps_lone_halves() -> None:
    kind = VirtualTable.BINLOG
    target = arrow_schema_for(StructType.fromJson(kind.schema(INFO).jsonValue()))
    at = pa.array([dt.datetime(2026, 1, 1)] * 6, pa.timestamp("ms", tz="UTC"))
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 1, 1, 2, 2, 3], pa.int32()),
            "s": ["a", "a", "b", "x", "y", "z"],
            "_change_type": ["+I", "-U", "+U", "+U", "-D", "-U"],
            "__offset": pa.array([10, 11, 12, 13, 14, 15], pa.int64()),
            "__timestamp": at,
        }
    )
    out = kind.convert(batch, ["id", "s"], target).to_pylist()
    assert [(r["_change_type"], r["_log_offset"], r["before"], r["after"]) for r in out] == [
        ("insert", 10, None, {"id": 1, "s": "a"}),
        ("update", 12, {"id": 1, "s": "a"}, {"id": 1, "s": "b"}),
        ("update", 13, None, {"id": 2, "s": "x"}),  # a WAL-image update: no before
        ("delete", 14, {"id": 2, "s": "y"}, None),
        ("update", 15, {"id": 3, "s": "z"}, None),  # its update-after is beyond this read
    ]
