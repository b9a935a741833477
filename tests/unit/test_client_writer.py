"""The client writer's pure parts: column-wise bucketing against the scalar reference, partition names,
idempotent sequence bookkeeping, batch building, and scan filters on the wire."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import random

import numpy as np
import pyarrow as pa
import pytest

from strom.client.scanner.filter import col
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.partitioner import Partitioner, partition_value
from strom.client.writer.write_batch import BatchFormat, WriteBatch
from strom.common import types as T
from strom.common.bucketing import bucket_function_for
from strom.common.errors import NetworkError, OutOfOrderSequenceError
from strom.common.predicate import BatchFilter, predicate_from_pb, predicate_to_pb
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.columnar_keys import ColumnarBucketer
from strom.record.key_encoder import bucket_key_encoder
from strom.record.log_batch import crc_is_valid, read_header
from strom.rpc.gen import fluss_api_pb2 as pb


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("abcé漢xyz") for _ in range(rng.randint(0, 30)))


@pytest.fixture(scope="module")
def sample() -> tuple[Schema, pa.RecordBatch]:
    rng = random.Random(7)
    n = 700
    table = pa.table(
        {
            "i": pa.array([rng.randint(-(2**31), 2**31 - 1) for _ in range(n)], pa.int32()),
            "l": pa.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(n)], pa.int64()),
            "s": [_text(rng) for _ in range(n)],
            "b": [_text(rng).encode() for _ in range(n)],
            "t": pa.array([rng.randint(-128, 127) for _ in range(n)], pa.int8()),
            "f": pa.array([rng.random() for _ in range(n)], pa.float32()),
            "ok": [rng.random() < 0.5 for _ in range(n)],
            "d": [dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-9000, 30000)) for _ in range(n)],
            "ts": pa.array([rng.randint(-(10**12), 10**13) for _ in range(n)], pa.timestamp("ms")),
            "us": pa.array([rng.randint(0, 10**16) for _ in range(n)], pa.timestamp("us")),
            "dec": [decimal.Decimal(rng.randint(-(10**9), 10**9)).scaleb(-2) for _ in range(n)],
        }
    )
    schema = Schema.from_arrow_schema(table.schema)
    batch = table.cast(schema.to_arrow_schema()).to_batches()[0].slice(3, 650)
    return schema, batch


KEYS = [
    ["i"],
    ["l"],
    ["s"],
    ["b"],
    ["t"],
    ["f"],
    ["ok"],
    ["d"],
    ["ts"],
    ["us"],
    ["dec"],
    ["s", "i"],
    ["l", "b", "ts"],
]


@pytest.mark.parametrize("lake", [None, "paimon", "iceberg"])
@pytest.mark.parametrize("keys", KEYS, ids=lambda k: "+".join(k))
def test_columnar_buckets_equal_the_scalar_routing(
    sample: tuple[Schema, pa.RecordBatch], lake: str | None, keys: list[str]
) -> None:
    schema, batch = sample
    indexes = schema.column_indexes(keys)
    try:
        encoder = bucket_key_encoder(schema.row_type, indexes, lake)
    except ValueError:
        # a key the lake format cannot bucket (e.g. several columns for Iceberg): refused both ways
        with pytest.raises(ValueError):
            ColumnarBucketer(schema.row_type, schema.to_arrow_schema(), indexes, lake, 13)
        return
    bucketer = ColumnarBucketer(schema.row_type, schema.to_arrow_schema(), indexes, lake, 13)
    function = bucket_function_for(lake)
    # rows whose key encodes to nothing (an empty string under the Iceberg encoding) cannot be bucketed
    encoded = [encoder.encode([r[k] for k in keys]) for r in batch.to_pylist()]
    batch = batch.take([i for i, key in enumerate(encoded) if key])
    expected_keys = [key for key in encoded if key]
    assert bucketer.key_bytes(batch).to_pylist() == expected_keys
    assert bucketer.buckets(batch).tolist() == [function(k, 13) for k in expected_keys]


def test_null_bucket_keys_are_refused(sample: tuple[Schema, pa.RecordBatch]) -> None:
    schema, batch = sample
    bucketer = ColumnarBucketer(schema.row_type, schema.to_arrow_schema(), [2], None, 4)
    nulled = batch.set_column(2, "s", pa.array([None] * batch.num_rows, pa.string()))
    with pytest.raises(ValueError, match="'s'"):
        bucketer.buckets(nulled)


def test_partition_names_of_rows_and_batches_agree() -> None:
    names = ["id", "region", "day", "flag", "at", "f"]
    row_type = [T.BIGINT(), T.STRING(), T.DATE(), T.BOOLEAN(), T.TIMESTAMP(3), T.DOUBLE()]
    partitioner = Partitioner(names, row_type, ["region", "day", "flag"])
    batch = pa.record_batch(
        {
            "id": pa.array(range(6), pa.int64()),
            "region": ["eu", "us", "eu", "eu", "us", "eu"],
            "day": pa.array([dt.date(2024, 1, 31), dt.date(2024, 2, 1)] * 3, pa.date32()),
            "flag": [True, True, False, True, True, True],
            "at": pa.array([0] * 6, pa.timestamp("ms")),
            "f": [0.5] * 6,
        }
    )
    codes, partitions = partitioner.codes_of(batch)
    by_row = [partitioner.name_of(list(r.values())) for r in batch.to_pylist()]
    assert [partitions[c] for c in codes.tolist()] == by_row
    assert by_row[:3] == ["eu$2024-01-31$true", "us$2024-02-01$true", "eu$2024-01-31$false"]
    assert (
        partition_value(dt.datetime(2024, 1, 2, 3, 4, 5, 250000), T.TIMESTAMP(3)) == "2024-01-02-03-04-05_250"
    )
    assert partition_value(dt.datetime(2024, 1, 2, 3, 4, 5), T.TIMESTAMP(3)) == "2024-01-02-03-04-05_"
    assert partition_value(dt.time(13, 5, 9, 250000), T.TIME(3)) == "13-05-09_250"
    assert partition_value(1.0, T.DOUBLE()) == "1" and partition_value(2.5, T.FLOAT()) == "2_5"
    assert partition_value(b"\x01\xff", T.BYTES()) == "01ff"
    with pytest.raises(ValueError, match="null"):
        partitioner.name_of([1, None, dt.date(2024, 1, 1), True, None, None])


def test_idempotent_sequences_move_down_after_a_failure_and_reset_on_out_of_order() -> None:
    idem = IdempotenceManager(enabled=True, max_in_flight=3)
    bucket = TableBucket(1, None, 0)
    idem.set_writer_id(42)
    assert [idem.assign_sequence(bucket, batch_id) for batch_id in (10, 11, 12)] == [0, 1, 2]
    assert not idem.can_send_more(bucket) and idem.is_first_in_flight(bucket, 10)
    idem.completed(bucket, 10, 42)
    assert idem.is_already_committed(bucket, 0) and not idem.is_already_committed(bucket, 1)
    # batch 11 fails for good: 12 takes its sequence and may be retried after OUT_OF_ORDER
    idem.failed(bucket, 11, 42, ValueError("bad"), adjust_sequences=True)
    assert idem.current_sequence(bucket, 12) == 1
    assert idem.can_retry_for_error(bucket, 1, 12, OutOfOrderSequenceError())
    assert idem.assign_sequence(bucket, 13) == 2
    # an out-of-order batch that is the next expected one cannot be explained: start afresh
    idem.failed(bucket, 12, 42, OutOfOrderSequenceError(), adjust_sequences=False)
    assert not idem.has_writer_id and idem.in_flight_count(bucket) == 0
    idem.set_writer_id(43)
    assert idem.assign_sequence(bucket, 14) == 0
    assert not idem.can_retry_for_error(bucket, 0, 14, NetworkError())


def test_write_batch_bytes_are_patched_for_a_new_sequence() -> None:
    async def main() -> None:
        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        fmt = BatchFormat(TablePath("db", "t"), 7, 1, schema, "ZSTD", 3)
        batch = WriteBatch(0, PhysicalTablePath(TablePath("db", "t")), 0, fmt, 1 << 20, 0.0)
        batch.add_arrow(pa.record_batch({"id": pa.array([1], pa.int64()), "name": ["a"]}), 16)
        batch.add_arrow(pa.record_batch({"id": pa.array([2, 3], pa.int64()), "name": ["b", "c"]}), 32)
        batch.add_arrow(pa.record_batch({"id": pa.array([4], pa.int64()), "name": [None]}, schema=schema), 16)
        batch.writer_id, batch.batch_sequence = 99, 5
        first = bytes(batch.payload())
        batch.batch_sequence = 4
        second = bytes(batch.payload())
        for payload, sequence in ((first, 5), (second, 4)):
            header = read_header(payload)
            assert (header.writer_id, header.batch_sequence, header.record_count) == (99, sequence, 4)
            assert crc_is_valid(payload, 0, header)
            records, change_types = decode_arrow_batch(payload, 0, header, schema)
            assert change_types is None
            assert records.to_pydict() == {"id": [1, 2, 3, 4], "name": ["a", "b", "c", None]}

    asyncio.run(main())


def test_filters_go_on_the_wire_typed_by_their_columns() -> None:
    schema = Schema.from_arrow_schema(
        pa.schema(
            [("id", pa.int64()), ("name", pa.string()), ("day", pa.date32()), ("price", pa.decimal128(10, 2))]
        )
    )
    expression = ((col("id") >= 3) & col("name").starts_with("a")) | col("day").is_in([dt.date(2024, 1, 1)])
    expression = expression | (col("price") == decimal.Decimal("1.25"))
    predicate = expression.bind(schema)
    types = {c.column_id: c.data_type for c in schema.columns}
    message = predicate_to_pb(predicate, types, pb.PbPredicate())
    decoded = predicate_from_pb(pb.PbPredicate.FromString(message.SerializeToString()))
    batch = pa.record_batch(
        {
            "id": pa.array([1, 5, 5, 0], pa.int64()),
            "name": ["ax", "ab", "b", "z"],
            "day": pa.array(
                [dt.date(2024, 1, 1), dt.date(2023, 1, 1), dt.date(2023, 1, 1), dt.date(2020, 1, 1)]
            ),
            "price": pa.array(
                [decimal.Decimal("0"), decimal.Decimal("0"), decimal.Decimal("0"), decimal.Decimal("1.25")],
                pa.decimal128(10, 2),
            ),
        }
    )
    column_of_field = {c.column_id: i for i, c in enumerate(schema.columns)}
    assert BatchFilter(decoded, column_of_field).mask(batch).to_pylist() == [True, True, False, True]
    assert expression.mask(batch, schema).to_pylist() == [True, True, False, True]
    assert np.array_equal(
        BatchFilter(predicate, column_of_field).mask(batch).to_numpy(zero_copy_only=False),
        np.array([True, True, False, True]),
    )
