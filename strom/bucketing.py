"""Bucket functions: which bucket an encoded bucket key belongs to.

Three functions exist, chosen by the table's lake format so that Fluss buckets line up with the lake
table's buckets:
* Fluss default (no lake format, or Lance): Flink's MurmurHash3 variant with seed 42, rehashed with
  Flink's murmurHash(int), then modulo.
* Paimon: the same Flink hash without the rehash, abs of Java's truncating remainder.
* Iceberg: standard MurmurHash3_x86_32 with seed 0, `(h & INT_MAX) % n` (Iceberg's bucket transform).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

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


def _mix_h1(h: int, k: int) -> int:
    h ^= k
    h = ((h << 13) | (h >> 19)) & _M32
    return (h * 5 + 0xE6546B64) & _M32


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


_BLOCK_UNPACKERS: dict[int, Callable[[bytes], tuple[int, ...]]] = {}


def _blocks(data: bytes) -> tuple[int, ...]:
    """The little-endian 32-bit words of `data` (trailing bytes left out)."""
    n = len(data) >> 2
    unpack = _BLOCK_UNPACKERS.get(n)
    if unpack is None:
        unpack = _BLOCK_UNPACKERS[n] = struct.Struct(f"<{n}I").unpack_from
    return unpack(data)


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def flink_murmur3_32(data: bytes, seed: int = FLINK_SEED) -> int:
    """Flink's MurmurHash3_x86_32 (signed int32): each trailing byte is mixed as a block of its own.

    Written out in one loop (no helper calls): clients hash every key they look up or write row by
    row, and this is most of that cost."""
    h = seed & _M32
    n = len(data)
    full = n & ~3
    for k in (*_blocks(data), *data[full:]):
        k = (k * _C1) & _M32
        k = (((k << 15) | (k >> 17)) * _C2) & _M32
        h ^= k
        h = (((((h << 13) | (h >> 19)) & _M32) * 5) + 0xE6546B64) & _M32
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Standard MurmurHash3_x86_32 (unsigned), as Iceberg and Guava compute it."""
    h = seed & _M32
    for k in _blocks(data):
        h = _mix_h1(h, _mix_k1(k))
    tail = data[len(data) & ~3 :]
    if tail:
        h ^= _mix_k1(int.from_bytes(tail, "little"))
    return _fmix(h ^ len(data))


def fluss_rehash_int(value: int) -> int:
    """Flink's MathUtils.murmurHash(int): a non-negative int (INT_MIN maps to 0)."""
    h = _mix_h1(0, _mix_k1(value & _M32))
    h = _to_signed(_fmix(h ^ 4))
    if h >= 0:
        return h
    return -h if h != -(1 << 31) else 0


def _check(key: bytes, num_buckets: int) -> None:
    if not key:
        raise ValueError("bucket key must not be empty")
    if num_buckets <= 0:
        raise ValueError(f"number of buckets must be positive, got {num_buckets}")


# Flink's mix of a trailing byte (mixed as a block of its own), for every byte value.
_BYTE_K1 = tuple(_mix_k1(b) for b in range(256))


def fluss_bucket(key_bytes: bytes, num_buckets: int) -> int:
    """`fluss_rehash_int(flink_murmur3_32(key)) % num_buckets`, written out in one function: clients
    route every key they look up or write by it, and calls and tuples were half of its cost."""
    n = len(key_bytes)
    if not n or num_buckets <= 0:
        _check(key_bytes, num_buckets)
    h = FLINK_SEED
    full = n & ~3
    if full:
        for k in _blocks(key_bytes):
            k = (k * _C1) & _M32
            h ^= (((k << 15) | (k >> 17)) * _C2) & _M32
            h = (((((h << 13) | (h >> 19)) & _M32) * 5) + 0xE6546B64) & _M32
    for b in key_bytes[full:]:
        h ^= _BYTE_K1[b]
        h = (((((h << 13) | (h >> 19)) & _M32) * 5) + 0xE6546B64) & _M32
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    # Flink's MathUtils.murmurHash(int): the hash as one 4-byte block, seed 0
    k = (h * _C1) & _M32
    h = (((k << 15) | (k >> 17)) * _C2) & _M32
    h = (((((h << 13) | (h >> 19)) & _M32) * 5) + 0xE6546B64) & _M32
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    if h & 0x80000000:  # negative as an int: its absolute value, and INT_MIN maps to 0
        h = (1 << 32) - h if h != 0x80000000 else 0
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
    if name == "lance":
        return fluss_bucket
    raise ValueError(f"unknown datalake format {lake_format!r}")
