"""Bucket functions: which bucket an encoded bucket key belongs to.

Three functions exist, chosen by the table's lake format so that Fluss buckets line up with the lake
table's buckets:
* Fluss default (no lake format, or Lance): Flink's MurmurHash3 variant with seed 42, rehashed with
  Flink's murmurHash(int), then modulo.
* Paimon: the same Flink hash without the rehash, abs of Java's truncating remainder.
* Iceberg: standard MurmurHash3_x86_32 with seed 0, `(h & INT_MAX) % n` (Iceberg's bucket transform).

Flink's variant reads its trailing bytes unsigned here, as fluss-rust (pyfluss) does; Java Fluss reads
them as signed bytes, so Java clients route keys with a trailing byte >= 0x80 elsewhere (docs/client.md).
"""

from __future__ import annotations

from collections.abc import Callable

import mmh3

__all__ = [
    "BucketFunction",
    "bucket_function_for",
    "flink_murmur3_32",
    "fluss_bucket",
    "fluss_rehash_int",
    "iceberg_bucket",
    "murmur3_32",
    "paimon_bucket",
]

BucketFunction = Callable[[bytes, int], int]

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF
FLINK_SEED = 42


def _mix_k1(k: int) -> int:
    k = (k * _C1) & _M32
    k = ((k << 15) | (k >> 17)) & _M32
    return (k * _C2) & _M32


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Standard MurmurHash3_x86_32 (unsigned), as Iceberg and Guava compute it."""
    return mmh3.hash(bytes(data), seed & _M32, False)


# Flink's mix of a trailing byte (mixed as a block of its own), for every byte value.
_BYTE_K1 = tuple(_mix_k1(b) for b in range(256))
# A trailing byte as the 4-byte little-endian block Flink's variant makes of it.
_BYTE_BLOCK = tuple(bytes((b, 0, 0, 0)) for b in range(256))
# Inverses (mod 2^32) of the finalizer's multipliers, to undo it.
_FMIX_INV1 = pow(0x85EBCA6B, -1, 1 << 32)
_FMIX_INV2 = pow(0xC2B2AE35, -1, 1 << 32)


def _flink_hash(data: bytes, seed: int) -> int:
    """Flink's MurmurHash3_x86_32 variant, unsigned. It mixes each trailing byte as a block of its
    own, so its body is standard murmur3 (mmh3, in C) of the data with every trailing byte widened to
    a block; only the finalizer differs, which takes the real length: mmh3's finalizer is undone and
    redone with it. Keys of one to three bytes (small varints) are quicker mixed here directly."""
    if data.__class__ is not bytes:
        data = bytes(data)  # mmh3 takes bytes only
    n = len(data)
    full = n & ~3
    if full == n:
        return mmh3.hash(data, seed, False)
    if full:
        padded = data[:full] + b"".join([_BYTE_BLOCK[b] for b in data[full:]])
        h = mmh3.hash(padded, seed, False)
        h ^= h >> 16
        h = (h * _FMIX_INV2) & _M32
        h ^= (h >> 13) ^ (h >> 26)
        h = (h * _FMIX_INV1) & _M32
        h ^= (h >> 16) ^ len(padded)
    else:
        h = seed
        for b in data:
            h ^= _BYTE_K1[b]
            h = (((((h << 13) | (h >> 19)) & _M32) * 5) + 0xE6546B64) & _M32
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def flink_murmur3_32(data: bytes, seed: int = FLINK_SEED) -> int:
    """Flink's MurmurHash3_x86_32 (signed int32): each trailing byte is mixed as a block of its own."""
    return _to_signed(_flink_hash(data, seed & _M32))


def fluss_rehash_int(value: int) -> int:
    """Flink's MathUtils.murmurHash(int): a non-negative int (INT_MIN maps to 0)."""
    h = mmh3.hash((value & _M32).to_bytes(4, "little"), 0)
    if h >= 0:
        return h
    return -h if h != -(1 << 31) else 0


def _check(key: bytes, num_buckets: int) -> None:
    if not key:
        raise ValueError("bucket key must not be empty")
    if num_buckets <= 0:
        raise ValueError(f"number of buckets must be positive, got {num_buckets}")


def fluss_bucket(key_bytes: bytes, num_buckets: int) -> int:
    """`fluss_rehash_int(flink_murmur3_32(key)) % num_buckets`, with the rehash written in: clients
    route every key they look up or write by it."""
    if not key_bytes or num_buckets <= 0:
        _check(key_bytes, num_buckets)
    # Flink's MathUtils.murmurHash(int) is standard murmur3 of the int's 4 bytes, seed 0
    h = mmh3.hash(_flink_hash(key_bytes, FLINK_SEED).to_bytes(4, "little"), 0)
    if h < 0:  # its absolute value, and INT_MIN maps to 0
        h = -h if h != -(1 << 31) else 0
    return h % num_buckets


def paimon_bucket(key_bytes: bytes, num_buckets: int) -> int:
    _check(key_bytes, num_buckets)
    # Java's abs(h % n) truncates toward zero, which equals abs(h) % n.
    return abs(flink_murmur3_32(key_bytes)) % num_buckets


def iceberg_bucket(key_bytes: bytes, num_buckets: int) -> int:
    _check(key_bytes, num_buckets)
    return (murmur3_32(key_bytes) & 0x7FFFFFFF) % num_buckets


def bucket_function_for(lake_format: str | None) -> BucketFunction:
    """The bucket function for `table.datalake.format` (None when the table has no lake format)."""
    if lake_format is None:
        return fluss_bucket
    name = lake_format.strip().lower()
    if name == "paimon":
        return paimon_bucket
    if name == "iceberg":
        return iceberg_bucket
    if name in ("lance", "delta"):
        return fluss_bucket
    raise ValueError(f"unknown datalake format {lake_format!r}")
