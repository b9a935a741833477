"""Fluss bucket N is Iceberg bucket N: Strom's Iceberg bucket function against pyiceberg's transform,
pyiceberg-core's vectorised one, and what ends up in the lake."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from lake_helpers import Change, Tiering, bucket_of, table_info
from pyiceberg.expressions import EqualTo, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)
from pyiceberg_core import transform as core_transform

from strom.common import types as T
from strom.common.bucketing import iceberg_bucket
from strom.common.types import DataType
from strom.lake.iceberg.storage import IcebergLakeStorage
from strom.record.key_encoder import IcebergKeyEncoder

EPOCH = dt.datetime(1970, 1, 1)
rng = random.Random(7)


def _longs() -> list[int]:
    return [0, 1, -1, 34, 2**31, -(2**63), 2**63 - 1, *(rng.randrange(-(2**63), 2**63) for _ in range(300))]


def _strings() -> list[str]:
    # Fluss refuses empty bucket keys, so "" is not among them.
    return ["iceberg", "ü", "日本語", *(f"key-{rng.randrange(10**9)}" for _ in range(300))]


CASES: list[tuple[DataType, Any, list[Any], Any]] = [
    # (Fluss type, Iceberg type, Fluss values, value -> what pyiceberg's transform takes)
    (T.BIGINT(), LongType(), _longs(), lambda v: v),
    (
        T.INT(),
        IntegerType(),
        [0, 1, -1, 2**31 - 1, -(2**31), *(rng.randrange(-(2**31), 2**31) for _ in range(300))],
        lambda v: v,
    ),
    (T.STRING(), StringType(), _strings(), lambda v: v),
    (
        T.BYTES(),
        BinaryType(),
        [b"\x00\xff", *(rng.randbytes(rng.randrange(1, 40)) for _ in range(200))],
        lambda v: v,
    ),
    (
        T.DATE(),
        DateType(),
        [dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-30000, 30000)) for _ in range(200)],
        lambda v: (v - dt.date(1970, 1, 1)).days,
    ),
    (
        T.DECIMAL(18, 3),
        DecimalType(18, 3),
        [
            Decimal("0.000"),
            Decimal("-1.500"),
            *(Decimal(rng.randrange(-(10**15), 10**15)).scaleb(-3) for _ in range(200)),
        ],
        lambda v: v,
    ),
    (
        T.TIMESTAMP(6),
        TimestampType(),
        [EPOCH + dt.timedelta(microseconds=rng.randrange(-(10**15), 10**15)) for _ in range(200)],
        lambda v: (v - EPOCH) // dt.timedelta(microseconds=1),
    ),
]


@pytest.mark.parametrize(
    ("fluss_type", "iceberg_type", "values", "to_iceberg"), CASES, ids=lambda c: str(c)[:20]
)
@pytest.mark.parametrize("buckets", [1, 3, 4, 16, 1024])
def test_fluss_bucket_equals_iceberg_bucket(
    fluss_type: DataType, iceberg_type: Any, values: list[Any], to_iceberg: Any, buckets: int
) -> None:
    encoder = IcebergKeyEncoder([fluss_type])
    transform = BucketTransform(buckets).transform(iceberg_type)
    fluss = [iceberg_bucket(encoder.encode([v]), buckets) for v in values]
    assert fluss == [transform(to_iceberg(v)) for v in values]
    arrow = pa.array(values, fluss_type.to_arrow())
    assert core_transform.bucket(arrow, buckets).to_pylist() == fluss


def test_rows_land_in_the_iceberg_bucket_of_their_fluss_bucket(storage: IcebergLakeStorage) -> None:
    info = table_info("k", [("id", T.STRING()), ("v", T.INT())], bucket_keys=["id"], buckets=7)
    storage.catalog().create_table(info)
    tiering = Tiering(storage, info)
    keys = [f"k{rng.randrange(10**6)}" for _ in range(300)]
    tiering.append(Change({"id": k, "v": i}) for i, k in enumerate(keys))
    tiering.round(batch_rows=50)
    table = storage.catalog().load_table(info.table_path)
    rows = table.scan(selected_fields=("id", "__bucket")).to_arrow().to_pylist()
    assert len(rows) == len(keys)
    for row in rows:
        assert row["__bucket"] == bucket_of(info, row)
    # pyiceberg prunes by its own bucket transform: each key is found in the Fluss bucket's file.
    for key in keys[:30]:
        tasks = list(table.scan(row_filter=EqualTo(term=Reference("id"), value=literal(key))).plan_files())
        assert {t.file.partition[0] for t in tasks} == {bucket_of(info, {"id": key})}
        found = table.scan(row_filter=EqualTo(term=Reference("id"), value=literal(key))).to_arrow()
        assert key in found.column("id").to_pylist()
