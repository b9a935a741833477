"""The client's primary-key table pieces without a cluster: column-wise KV records equal the per-row
codecs byte for byte, KV write batches are valid KvRecordBatches, change-type columns, the snapshot +
changelog merge, and stored values decoded into Arrow and dicts."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import random
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from strom.client.lookup.value_decoder import ValueDecoder
from strom.client.scanner.bucket_state import BucketState
from strom.client.upsert.key_routing import KeyRouting
from strom.client.upsert.kv_records import KvRecordEncoder, KvRecords
from strom.client.upsert.kv_write_batch import KvBatchFormat, KvWriteBatch, encode_kv_record
from strom.client.upsert.upsert_writer import change_types_of
from strom.common.schema import Column, Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.common.types import DataType
from strom.record.compacted_row import CompactedRowDecoder, CompactedRowEncoder
from strom.record.kv_batch import KvRecordBatch

WIDE = pa.schema(
    [
        ("id", pa.int32(), False),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("b", pa.bool_()),
        ("t", pa.int8()),
        ("s", pa.int16()),
        ("l", pa.int64()),
        ("f", pa.float32()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("ms")),
        ("tsu", pa.timestamp("us")),
        ("dec", pa.decimal128(10, 2)),
        ("big", pa.decimal128(30, 3)),
        ("raw", pa.binary()),
        ("tm", pa.time32("ms")),
        ("ltz", pa.timestamp("ms", tz="UTC")),
        ("arr", pa.list_(pa.int32())),
    ]
)


def info(schema: pa.Schema, pk: list[str], **descriptor: Any) -> TableInfo:
    table = TableDescriptor(Schema.from_arrow_schema(schema, pk), bucket_count=3, **descriptor)
    return TableInfo(TablePath("db", "t"), 7, 1, table, 0, 0)


def random_rows(n: int, seed: int = 1) -> pa.RecordBatch:
    rnd = random.Random(seed)

    def maybe(v: Any) -> Any:
        return None if rnd.random() < 0.2 else v

    columns = {
        "id": pa.array([rnd.randint(-(2**31), 2**31 - 1) for _ in range(n)], pa.int32()),
        "name": [f"x{i}" * rnd.randint(0, 70) for i in range(n)],
        "score": [maybe(rnd.random()) for _ in range(n)],
        "b": [maybe(rnd.random() < 0.5) for _ in range(n)],
        "t": pa.array([maybe(rnd.randint(-128, 127)) for _ in range(n)], pa.int8()),
        "s": pa.array([maybe(rnd.randint(-30000, 30000)) for _ in range(n)], pa.int16()),
        "l": pa.array([maybe(rnd.randint(-(2**63), 2**63 - 1)) for _ in range(n)], pa.int64()),
        "f": pa.array([maybe(rnd.random()) for _ in range(n)], pa.float32()),
        "d": [maybe(dt.date(1960, 1, 1) + dt.timedelta(days=rnd.randint(0, 30000))) for _ in range(n)],
        "ts": pa.array([maybe(rnd.randint(-(10**12), 10**12)) for _ in range(n)], pa.timestamp("ms")),
        "tsu": pa.array([maybe(rnd.randint(-(10**15), 10**15)) for _ in range(n)], pa.timestamp("us")),
        "dec": [maybe(decimal.Decimal(rnd.randint(-(10**9), 10**9)).scaleb(-2)) for _ in range(n)],
        "big": pa.array(
            [maybe(decimal.Decimal(rnd.randint(-(10**26), 10**26)).scaleb(-3)) for _ in range(n)],
            pa.decimal128(30, 3),
        ),
        "raw": [maybe(rnd.randbytes(rnd.randint(0, 200))) for _ in range(n)],
        "tm": pa.array([maybe(rnd.randint(0, 86_399_999)) for _ in range(n)], pa.time32("ms")),
        "ltz": pa.array(
            [maybe(rnd.randint(-(10**12), 10**12)) for _ in range(n)], pa.timestamp("ms", tz="UTC")
        ),
        "arr": [maybe([rnd.randint(0, 9) for _ in range(rnd.randint(0, 4))]) for _ in range(n)],
    }
    return pa.table(columns, schema=WIDE).to_batches()[0]


@pytest.mark.parametrize(
    ("pk", "properties"),
    [
        (["id"], {}),
        (["id", "name"], {}),
        (["id", "name"], {"table.datalake.format": "paimon"}),
        (["id"], {"table.datalake.format": "iceberg"}),
    ],
)
def test_columnar_records_equal_row_codecs(pk: list[str], properties: dict[str, str]) -> None:
    table = info(WIDE, pk, properties=properties)
    routing = KeyRouting(table)
    encoder = KvRecordEncoder(table, routing.key_indexes, routing.key_format)
    batch = random_rows(1500)
    deletes = np.random.default_rng(3).random(batch.num_rows) < 0.1
    encode_row = CompactedRowEncoder(table.schema.row_type).encode
    expected = []
    for row, delete in zip(batch.to_pylist(), deletes.tolist(), strict=True):
        values = list(row.values())
        expected.append(encode_kv_record(routing.encode_key(values), None if delete else encode_row(values)))
    assert encoder.records(batch, deletes).to_pylist() == expected
    # all deletes, and no deletes
    everything = np.ones(batch.num_rows, dtype=bool)
    assert encoder.records(batch, everything).to_pylist() == [
        encode_kv_record(routing.encode_key(list(r.values())), None) for r in batch.to_pylist()
    ]
    assert len(encoder.records(batch.slice(0, 0)).to_pylist()) == 0


def test_fast_types_are_vectorised_and_buckets_agree() -> None:
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("day", pa.date32())]
    )
    table = info(schema, ["id", "name"])
    routing = KeyRouting(table)
    encoder = KvRecordEncoder(table, routing.key_indexes, routing.key_format)
    assert encoder.vectorised
    batch = pa.table(
        {
            "id": pa.array(range(-500, 500), pa.int64()),
            "name": [f"n{i}" for i in range(1000)],
            "score": [None if i % 3 else i / 3 for i in range(1000)],
            "day": [dt.date(2020, 1, 1)] * 1000,
        },
        schema=schema,
    ).to_batches()[0]
    rows = [list(r.values()) for r in batch.to_pylist()]
    keys = [routing.encode_key(r) for r in rows]
    assert routing.buckets_of_batch(batch).tolist() == [
        routing.bucket_of(r, k) for r, k in zip(rows, keys, strict=True)
    ]
    assert routing.buckets_of_keys(keys, rows).tolist() == routing.buckets_of_batch(batch).tolist()
    assert encoder.keys(batch).to_pylist() == keys


def test_records_chunk_at_batch_size() -> None:
    records = pa.array([bytes([i]) * (10 + i) for i in range(100)], pa.large_binary())
    chunks = KvRecords(records).chunks(200)
    assert sum(count for _, count in chunks) == 100
    assert b"".join(bytes(c) for c, _ in chunks) == b"".join(records.to_pylist())
    assert all(len(c) <= 200 or count == 1 for c, count in chunks)
    big = KvRecords(pa.array([b"x" * 500, b"y"], pa.large_binary())).chunks(100)
    assert [count for _, count in big] == [1, 1]


def test_kv_write_batch_is_a_valid_kv_record_batch() -> None:
    async def body() -> None:
        fmt = KvBatchFormat(TablePath("db", "t"), 7, 3)
        batch = KvWriteBatch(0, PhysicalTablePath(TablePath("db", "t")), 1, fmt, 1 << 20, 0.0, (0, 2))
        first = encode_kv_record(b"\x01", b"\x00\x01")
        second = encode_kv_record(b"\x02", None)
        batch.add_records(first + second, 2)
        assert batch.accepts(10, (0, 2)) and not batch.accepts(10, None)
        parsed = KvRecordBatch.parse(bytes(batch.payload()))
        assert parsed.crc_is_valid()
        assert (parsed.schema_id, parsed.record_count, parsed.writer_id, parsed.batch_sequence) == (
            3,
            2,
            -1,
            -1,
        )
        assert parsed.records == [(b"\x01", b"\x00\x01"), (b"\x02", None)]
        batch.writer_id, batch.batch_sequence = 42, 7  # a retry under a writer id: header patched
        parsed = KvRecordBatch.parse(bytes(batch.payload()))
        assert parsed.crc_is_valid() and (parsed.writer_id, parsed.batch_sequence) == (42, 7)

    asyncio.run(body())


def test_change_type_columns() -> None:
    assert change_types_of(pa.array(["+I", "-U", "+U", "-D", "+A"])).tolist() == [1, 2, 3, 4, 0]
    assert change_types_of(pa.array(["-D", "+I"]).dictionary_encode()).tolist() == [4, 1]
    assert change_types_of(pa.chunked_array([pa.array([1, 4], pa.int8())])).tolist() == [1, 4]
    with pytest.raises(ValueError, match="unknown change type"):
        change_types_of(pa.array(["I"]))
    with pytest.raises(ValueError, match=r"0\.\.4"):
        change_types_of(pa.array([9], pa.int32()))
    with pytest.raises(ValueError, match="nulls"):
        change_types_of(pa.array(["+I", None]))
    with pytest.raises(TypeError):
        change_types_of(pa.array([1.0]))


def test_merge_keeps_last_change_per_key_and_drops_deletes() -> None:
    schema = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])
    state = BucketState(info(schema, ["id", "name"]))
    base = pa.table(
        {"id": pa.array([1, 2, 3], pa.int32()), "name": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]}
    )
    changes = pa.table(
        {
            "id": pa.array([2, 2, 4, 3, 4, 5, 5, 6], pa.int32()),
            "name": ["b", "b", "d", "c", "d", "e", "e", "f"],
            "score": [2.0, 20.0, 4.0, 3.0, 40.0, 5.0, 5.0, 6.0],
        }
    )
    types = np.array([2, 3, 1, 4, 3, 1, 4, 2], np.int8)  # 6: a dangling -U counts as a delete
    merged = state.merge(base.cast(state.arrow_schema), changes.cast(state.arrow_schema), types)
    assert merged.to_pylist() == [
        {"id": 1, "name": "a", "score": 1.0},
        {"id": 2, "name": "b", "score": 20.0},
        {"id": 4, "name": "d", "score": 40.0},
    ]
    empty = changes.cast(state.arrow_schema).slice(0, 0)
    assert state.merge(base.cast(state.arrow_schema), empty, np.zeros(0, np.int8)).num_rows == 3


def test_compacted_rows_round_trip_through_arrow_decoding() -> None:
    batch = random_rows(300, seed=9)
    table = info(WIDE, ["id"])
    encode = CompactedRowEncoder(table.schema.row_type).encode
    rows = [encode(list(r.values())) for r in batch.to_pylist()]
    decoded = CompactedRowDecoder(table.schema.row_type).to_arrow(rows, WIDE)
    assert decoded.equals(batch)


def test_values_of_older_schemas_are_mapped_by_column_id() -> None:
    old = Schema.from_arrow_schema(pa.schema([("id", pa.int32()), ("name", pa.string())]), ["id"])
    new = Schema(
        [
            *old.columns,
            Column("extra", DataType.from_arrow_field(pa.field("extra", pa.float64())), column_id=2),
        ],
        ["id"],
    )
    asked: list[int] = []

    async def get_table_schema(path: Any, schema_id: int) -> Any:
        asked.append(schema_id)
        return SimpleNamespace(schema_id=schema_id, schema=old)

    admin = SimpleNamespace(get_table_schema=get_table_schema)
    table = SimpleNamespace(
        schema=new,
        schema_id=2,
        path=TablePath("db", "t"),
        connection=SimpleNamespace(get_admin=lambda: admin),
    )
    decoder = ValueDecoder(table)  # type: ignore[arg-type]
    old_row = struct.pack("<h", 1) + CompactedRowEncoder(old.row_type).encode([1, "one"])
    new_row = struct.pack("<h", 2) + CompactedRowEncoder(new.row_type).encode([2, "two", 2.5])
    asyncio.run(decoder.ensure_schemas([old_row, new_row, old_row]))
    assert asked == [1]
    assert decoder.to_dict(old_row) == {"id": 1, "name": "one", "extra": None}
    assert decoder.to_dict(new_row) == {"id": 2, "name": "two", "extra": 2.5}
    batch = decoder.to_arrow([new_row, old_row, new_row])
    assert batch.schema == new.to_arrow_schema()
    assert batch.to_pylist() == [
        {"id": 2, "name": "two", "extra": 2.5},
        {"id": 1, "name": "one", "extra": None},
        {"id": 2, "name": "two", "extra": 2.5},
    ]
    assert decoder.to_arrow([]).num_rows == 0
