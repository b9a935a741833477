"""Bucket functions against the Rust client's vectors and the Iceberg spec (reference §6)."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

from strom.common.bucketing import (
    bucket_function_for,
    flink_murmur3_32,
    fluss_bucket,
    fluss_rehash_int,
    iceberg_bucket,
    murmur3_32,
    paimon_bucket,
)
from strom.common.types import INT
from strom.record.columnar_keys import flink_murmur_hashes, fluss_buckets
from strom.record.key_encoder import CompactedKeyEncoder

FOX = b"The quick brown fox jumps over the lazy dog"
UUID = b"2bb87d68-baf9-4e64-90f9-f80910419fa6"
INPUTS = [(bytes([0, 10]), 7), (bytes([0, 10, 10, 10]), 12), (UUID, 16), (FOX, 8)]


def test_fluss_default_vectors() -> None:
    assert [fluss_bucket(k, n) for k, n in INPUTS] == [1, 0, 6, 6]


def test_paimon_vectors() -> None:
    assert [paimon_bucket(k, n) for k, n in INPUTS] == [1, 11, 12, 0]


def test_iceberg_vectors() -> None:
    assert [iceberg_bucket(k, n) for k, n in INPUTS] == [3, 4, 12, 3]
    assert murmur3_32(struct.pack("<q", 34)) == 2017239379  # Iceberg spec, Appendix B


def test_raw_hashes() -> None:
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"", 0xFFFFFFFF) == 0x81F16F39
    assert murmur3_32(FOX) == 0x2E4FF723
    assert murmur3_32(FOX, 0x9747B28C) == 0x2FA826CD
    assert flink_murmur3_32(b"", 0) == 0
    assert flink_murmur3_32(b"") == 0x087FCD5C
    assert flink_murmur3_32(b"", 0xFFFFFFFF) == 0x81F16F39 - (1 << 32)
    assert flink_murmur3_32(FOX, 0) == 0x5FD20A20
    assert flink_murmur3_32(FOX) == 0x1BC6F880
    assert fluss_rehash_int(0) == 0x2362F9DE
    assert fluss_rehash_int(42) == 0x43A46E1D
    assert fluss_rehash_int(-77) == 0x2EEB27DE


def test_fluss_bucket_is_the_rehashed_flink_hash() -> None:
    """`fluss_bucket` (mmh3 with the finalizer redone, or mixed in Python for short keys) against the
    column-wise numpy hash, written independently: every tail length, 0-9 full blocks, several
    bucket counts."""
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randrange(1, 40)) for _ in range(3000)]
    column = pa.array(keys, pa.large_binary())
    assert [flink_murmur3_32(k) for k in keys] == flink_murmur_hashes(column).tolist()
    for n in (1, 2, 3, 7, 16, 1000):
        expected = fluss_buckets(column, n).tolist()
        assert [fluss_bucket(k, n) for k in keys] == expected
        assert expected == [fluss_rehash_int(flink_murmur3_32(k)) % n for k in keys]


def test_int_keys_route_as_observed() -> None:
    encoder = CompactedKeyEncoder([INT()])
    assert [fluss_bucket(encoder.encode([k]), 3) for k in (1, 2, 3)] == [0, 0, 1]


def test_bucket_function_for() -> None:
    assert bucket_function_for(None) is fluss_bucket
    assert bucket_function_for("lance") is fluss_bucket
    assert bucket_function_for("delta") is fluss_bucket  # Strom's own format buckets as Fluss does
    assert bucket_function_for("PAIMON") is paimon_bucket
    assert bucket_function_for("iceberg") is iceberg_bucket
    with pytest.raises(ValueError):
        bucket_function_for("hudi-ish")


def test_rejects_empty_keys_and_bad_counts() -> None:
    for fn in (fluss_bucket, paimon_bucket, iceberg_bucket):
        with pytest.raises(ValueError):
            fn(b"", 3)
        with pytest.raises(ValueError):
            fn(b"k", 0)
    assert all(0 <= fluss_bucket(bytes([i, j]), 5) < 5 for i in range(50) for j in range(50))
