"""Helpers for the lake tests: Fluss table infos, simulated tiering rounds and two lake readers."""

from __future__ import annotations

import importlib
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from strom.common import types as T
from strom.common.bucketing import iceberg_bucket
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.common.types import DataType
from strom.lake.iceberg.storage import IcebergLakeStorage
from strom.lake.interface import BucketKey, LakeCommitter, LakeSnapshotInfo, LakeStorage, WriteResult
from strom.record.change_type import ChangeType
from strom.record.key_encoder import IcebergKeyEncoder

SYSTEM = ("__bucket", "__offset", "__timestamp")
USERS = [("id", T.BIGINT()), ("name", T.STRING()), ("score", T.INT())]
USER_COLUMNS = ["id", "name", "score"]
# The `read_both` fixture: (table info, columns) -> the rows pyiceberg and DuckDB read.
ReadBoth = Callable[[TableInfo, list[str]], tuple[list[dict[str, Any]], list[dict[str, Any]]]]


def table_info(
    name: str,
    columns: Sequence[tuple[str, DataType]],
    *,
    primary_key: Sequence[str] | None = None,
    bucket_keys: Sequence[str] = (),
    partition_keys: Sequence[str] = (),
    buckets: int = 3,
    properties: Mapping[str, str] | None = None,
    custom_properties: Mapping[str, str] | None = None,
    table_id: int = 11,
    database: str = "fluss",
) -> TableInfo:
    schema = Schema([Column(n, t) for n, t in columns], None if primary_key is None else list(primary_key))
    descriptor = TableDescriptor(
        schema=schema,
        partition_keys=list(partition_keys),
        bucket_keys=list(bucket_keys),
        bucket_count=buckets,
        properties={
            "table.datalake.enabled": "true",
            "table.datalake.format": "iceberg",
            **(properties or {}),
        },
        custom_properties=dict(custom_properties or {}),
    )
    return TableInfo(TablePath(database, name), table_id, 1, descriptor, 0, 0)


def bucket_of(info: TableInfo, row: Mapping[str, Any]) -> int:
    """The Fluss bucket of a row: Iceberg's bucket function of the single bucket key."""
    key = info.bucket_keys[0]
    encoder = IcebergKeyEncoder([info.schema.get_column(key).data_type])
    return iceberg_bucket(encoder.encode([row[key]]), info.bucket_count)


@dataclass
class Change:
    row: dict[str, Any]
    kind: ChangeType = ChangeType.APPEND_ONLY


def upsert(**row: Any) -> Change:
    return Change(row, ChangeType.UPDATE_AFTER)


def insert(**row: Any) -> Change:
    return Change(row, ChangeType.INSERT)


def delete(**row: Any) -> Change:
    return Change(row, ChangeType.DELETE)


def before(**row: Any) -> Change:
    return Change(row, ChangeType.UPDATE_BEFORE)


def current_summary(table: Any) -> Any:
    """The summary of a pyiceberg table's current snapshot (which the test expects to exist)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return snapshot.summary


def latest_snapshot(committer: LakeCommitter) -> LakeSnapshotInfo:
    """The committer's latest snapshot (which the test expects to exist)."""
    latest = committer.latest_snapshot()
    assert latest is not None
    return latest


@dataclass
class Tiering:
    """Plays the tiering service: per-bucket logs with offsets, rounds of writers and one commit."""

    storage: LakeStorage
    info: TableInfo
    # Fluss partition name -> partition id.
    partition_ids: dict[str, int] = field(default_factory=dict)
    logs: dict[BucketKey, list[tuple[Change, int]]] = field(default_factory=dict)
    tiered: dict[BucketKey, int] = field(default_factory=dict)
    clock: int = 1_700_000_000_000

    def partition_of(self, row: Mapping[str, Any]) -> str | None:
        keys = self.info.partition_keys
        if not keys:
            return None
        name = "$".join(str(row[k]) for k in keys)
        self.partition_ids.setdefault(name, 100 + len(self.partition_ids))
        return name

    def append(self, changes: Iterable[Change], bucket: int | None = None) -> None:
        """Add changes to the Fluss logs (bucket by key, or the given one for keyless tables)."""
        for change in changes:
            partition = self.partition_of(change.row)
            b = bucket if bucket is not None else bucket_of(self.info, change.row)
            key = (self.partition_ids[partition] if partition else None, b)
            self.logs.setdefault(key, [])
            self.clock += 1
            self.logs[key].append((change, self.clock))

    def names(self) -> dict[int, str]:
        return {pid: name for name, pid in self.partition_ids.items()}

    def write_round(self, batch_rows: int = 3) -> tuple[list[WriteResult], dict[BucketKey, int]]:
        """Run one writer per bucket with new records; the results and end offsets."""
        names = self.names()
        results: list[WriteResult] = []
        ends: dict[BucketKey, int] = {}
        for key, log in sorted(self.logs.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])):
            start = self.tiered.get(key, 0)
            if start >= len(log):
                continue
            pid, b = key
            partition = names[pid] if pid is not None else None
            bucket = TableBucket(self.info.table_id, pid, b) if pid is not None else b
            with self.storage.writer(self.info, bucket, partition) as writer:
                for chunk_start in range(start, len(log), batch_rows):
                    chunk = log[chunk_start : min(chunk_start + batch_rows, len(log))]
                    batch = pa.Table.from_pylist(
                        [c.row for c, _ in chunk], schema=self.info.schema.to_arrow_schema()
                    )
                    offsets = np.arange(chunk_start, chunk_start + len(chunk), dtype=np.int64)
                    kinds = np.array([c.kind for c, _ in chunk], dtype=np.int8)
                    timestamps = np.array([ts for _, ts in chunk], dtype=np.int64)
                    writer.write(batch, None if not self.info.has_primary_key else kinds, offsets, timestamps)
                results.append(writer.complete())
            ends[key] = len(log)
        return results, ends

    def commit(self, results: list[WriteResult], ends: dict[BucketKey, int]) -> int:
        snapshot_id = self.storage.committer(self.info).commit(results, ends, partition_names=self.names())
        self.tiered.update(ends)
        return snapshot_id

    def round(self, batch_rows: int = 3) -> int:
        results, ends = self.write_round(batch_rows)
        return self.commit(results, ends)


def expected_log_rows(tiering: Tiering) -> list[dict[str, Any]]:
    return [c.row for key in tiering.logs for c, _ in tiering.logs[key][: tiering.tiered.get(key, 0)]]


def expected_pk_rows(tiering: Tiering) -> list[dict[str, Any]]:
    """The current row of every key after the tiered part of the changelog."""
    pk = tiering.info.primary_key
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, log in tiering.logs.items():
        for change, _ in log[: tiering.tiered.get(key, 0)]:
            k = tuple(change.row[c] for c in pk)
            if change.kind in (ChangeType.DELETE, ChangeType.UPDATE_BEFORE):
                state.pop(k, None)
            else:
                state[k] = change.row
    return list(state.values())


def normalized(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def duckdb_connection(extension_dir: pathlib.Path) -> duckdb.DuckDBPyConnection:
    """DuckDB with the iceberg (and avro) extensions installed offline from their wheels."""
    con = duckdb.connect(
        config={"extension_directory": str(extension_dir), "autoinstall_known_extensions": "false"}
    )
    version = con.sql("PRAGMA version").fetchone()[0]  # type: ignore[index]
    for name in ("avro", "iceberg"):
        module = importlib.import_module(f"duckdb_extension_{name}")
        path = pathlib.Path(module.__file__).parent / "extensions" / version / f"{name}.duckdb_extension"  # type: ignore[arg-type]
        con.sql(f"INSTALL '{path}'")
        con.sql(f"LOAD {name}")
    return con


def read_duckdb(
    con: duckdb.DuckDBPyConnection, metadata_location: str, columns: Sequence[str]
) -> list[dict[str, Any]]:
    select = ", ".join(f'"{c}"' for c in columns)
    table = con.sql(f"SELECT {select} FROM iceberg_scan('{metadata_location}')").arrow()
    if isinstance(table, pa.RecordBatchReader):
        table = table.read_all()
    return table.to_pylist()


def read_pyiceberg(
    storage: IcebergLakeStorage, info: TableInfo, columns: Sequence[str]
) -> list[dict[str, Any]]:
    table = storage.catalog().load_table(info.table_path)
    return table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist()


def check_both_readers(
    read_both: ReadBoth, info: TableInfo, expected: Iterable[Mapping[str, Any]], columns: list[str]
) -> None:
    """pyiceberg and DuckDB (the `read_both` fixture) both read exactly `expected` rows."""
    py_rows, duck_rows = read_both(info, columns)
    want = normalized(expected, columns)
    assert normalized(py_rows, columns) == want
    assert normalized(duck_rows, columns) == want
