"""Fluss bucket N is Paimon bucket N: Strom's Paimon bucket function against pypaimon's own bucket
assignment, and where the tiered rows end up."""

from __future__ import annotations

import datetime as dt
import pathlib
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from lake_helpers import Change
from paimon_helpers import PaimonTiering, paimon_bucket_of, paimon_info, paimon_storage, read_paimon

from strom.common import types as T
from strom.common.types import DataType
from strom.lake.paimon.storage import PaimonLakeStorage

rng = random.Random(11)
EPOCH = dt.datetime(1970, 1, 1)


def _ints(bits: int, n: int = 200) -> list[int]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1)
    return [0, 1, -1, low, high - 1, *(rng.randrange(low, high) for _ in range(n))]


def _strings(n: int = 200) -> list[str]:
    return [
        "paimon",
        "ü",
        "日本語",
        "a" * 7,
        "b" * 8,
        "c" * 40,
        *(f"key-{rng.randrange(10**9)}" for _ in range(n)),
    ]


CASES: list[tuple[str, list[DataType], list[tuple[Any, ...]]]] = [
    ("bigint", [T.BIGINT()], [(v,) for v in _ints(64)]),
    ("int", [T.INT()], [(v,) for v in _ints(32)]),
    ("smallint", [T.SMALLINT()], [(v,) for v in _ints(16, 50)]),
    ("tinyint", [T.TINYINT()], [(v,) for v in _ints(8, 50)]),
    ("string", [T.STRING()], [(v,) for v in _strings()]),
    ("char", [T.CHAR(6)], [(f"c{rng.randrange(10**5):05d}",) for _ in range(100)]),
    ("bytes", [T.BYTES()], [(rng.randbytes(rng.randrange(1, 30)),) for _ in range(150)]),
    ("boolean", [T.BOOLEAN()], [(True,), (False,)]),
    ("double", [T.DOUBLE()], [(rng.uniform(-1e9, 1e9),) for _ in range(100)] + [(0.0,), (-1.5,)]),
    ("float", [T.FLOAT()], [(float(rng.randrange(-(10**6), 10**6)) / 4,) for _ in range(100)]),
    (
        "date",
        [T.DATE()],
        [(dt.date(1970, 1, 1) + dt.timedelta(days=rng.randrange(-30000, 30000)),) for _ in range(150)],
    ),
    (
        "decimal-compact",
        [T.DECIMAL(18, 3)],
        [(Decimal(rng.randrange(-(10**15), 10**15)).scaleb(-3),) for _ in range(150)],
    ),
    (
        "decimal-wide",
        [T.DECIMAL(30, 4)],
        [(Decimal(rng.randrange(-(10**26), 10**26)).scaleb(-4),) for _ in range(150)],
    ),
    (
        "timestamp-millis",
        [T.TIMESTAMP(3)],
        [(EPOCH + dt.timedelta(milliseconds=rng.randrange(-(10**12), 10**12)),) for _ in range(150)],
    ),
    (
        "timestamp-micros",
        [T.TIMESTAMP(6)],
        [(EPOCH + dt.timedelta(microseconds=rng.randrange(-(10**15), 10**15)),) for _ in range(150)],
    ),
    (
        "int+string",
        [T.INT(), T.STRING()],
        [(rng.randrange(-1000, 1000), f"s{rng.randrange(10**6)}") for _ in range(200)],
    ),
    (
        "string+bigint+date",
        [T.STRING(), T.BIGINT(), T.DATE()],
        [
            ("x" * rng.randrange(1, 12), rng.randrange(-(2**40), 2**40), dt.date(2024, 1, 1 + i % 28))
            for i in range(150)
        ],
    ),
]


@pytest.mark.parametrize(("name", "key_types", "keys"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("buckets", [1, 3, 4, 16, 1024])
def test_fluss_bucket_equals_pypaimon_bucket(
    tmp_path: pathlib.Path, name: str, key_types: list[DataType], keys: list[tuple[Any, ...]], buckets: int
) -> None:
    storage = paimon_storage(tmp_path)
    key_names = [f"k{i}" for i in range(len(key_types))]
    info = paimon_info(
        "bucketed",
        [*zip(key_names, key_types, strict=True), ("v", T.INT())],
        bucket_keys=key_names,
        buckets=buckets,
    )
    storage.catalog().create_table(info)
    table = storage.catalog().load_table(info.table_path)
    schema = pa.schema([info.schema.get_column(k).data_type.to_arrow_field(k) for k in key_names])
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(key_names, key, strict=True)) for key in keys], schema=schema
    )
    _, paimon_buckets = table.create_row_key_extractor().extract_partition_bucket_batch(batch)
    fluss_buckets = [paimon_bucket_of(info, dict(zip(key_names, key, strict=True))) for key in keys]
    assert fluss_buckets == list(paimon_buckets)
    if buckets > 1 and len(keys) > 20:
        assert len(set(fluss_buckets)) > 1  # the keys really spread over buckets


@pytest.fixture
def paimon(tmp_path: pathlib.Path) -> PaimonLakeStorage:
    return paimon_storage(tmp_path)


def test_rows_land_in_the_paimon_bucket_of_their_fluss_bucket(paimon: PaimonLakeStorage) -> None:
    info = paimon_info(
        "k",
        [("tenant", T.INT()), ("id", T.STRING()), ("v", T.INT())],
        primary_key=["tenant", "id"],
        bucket_keys=["tenant", "id"],
        buckets=7,
    )
    paimon.catalog().create_table(info)
    tiering = PaimonTiering(paimon, info)
    keys = [(rng.randrange(5), f"k{rng.randrange(10**6)}") for _ in range(300)]
    tiering.append(Change({"tenant": t, "id": k, "v": i}) for i, (t, k) in enumerate(keys))
    tiering.round(batch_rows=50)
    rows = read_paimon(paimon, info, ["tenant", "id", "__bucket"])
    assert len(rows) == len(set(keys))
    for row in rows:
        assert row["__bucket"] == paimon_bucket_of(info, row)
    # pypaimon prunes by its own bucket function: each key is found in its Fluss bucket's split.
    table = paimon.catalog().load_table(info.table_path)
    builder = table.new_read_builder()
    predicates = builder.new_predicate_builder()
    for tenant, key in keys[:20]:
        lookup = builder.with_filter(
            predicates.and_predicates([predicates.equal("tenant", tenant), predicates.equal("id", key)])
        )
        splits = lookup.new_scan().plan().splits()
        assert {s.bucket for s in splits} == {paimon_bucket_of(info, {"tenant": tenant, "id": key})}
        found = lookup.new_read().to_arrow(splits).column("id").to_pylist()
        assert key in found
