"""CRC-32C (Castagnoli), the checksum of Fluss log and KV record batches."""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable
from typing import TypeAlias

import google_crc32c
import pyarrow as pa

__all__ = ["crc32c"]

Buffer: TypeAlias = bytes | bytearray | memoryview | pa.Buffer

_extend_bytes = google_crc32c.extend

# google_crc32c's C entry points accept only `bytes` (not memoryview, bytearray or Arrow buffers), which
# would force a copy of every stored batch we verify. The shared library it ships exports
# crc32c_extend(crc, ptr, len); calling it through ctypes on the buffer's address checksums slices in
# place (and releases the GIL while doing so). Below this size a copy is cheaper than the ctypes call.
_ZERO_COPY_MIN = 64 * 1024


def _load_extend_ptr() -> Callable[[int, int, int], int] | None:
    libs_dir = os.path.join(os.path.dirname(os.path.dirname(google_crc32c.__file__)), "google_crc32c.libs")
    for path in sorted(glob.glob(os.path.join(libs_dir, "libcrc32c*.so*"))):
        try:
            fn = ctypes.CDLL(path).crc32c_extend
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        fn.restype = ctypes.c_uint32
        if fn(0, b"123456789", 9) == 0xE3069283:  # the CRC-32C check value
            return fn
    return None


_extend_ptr = _load_extend_ptr()


def crc32c(data: Buffer, crc: int = 0) -> int:
    """CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before it; 0 to start).

    `data` may be bytes, bytearray, a contiguous byte memoryview or a pyarrow Buffer.
    """
    if type(data) is bytes:
        return _extend_bytes(crc, data)
    if _extend_ptr is not None and len(data) >= _ZERO_COPY_MIN:
        buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)  # zero-copy, exposes the address
        return _extend_ptr(crc, buf.address, buf.size)
    return _extend_bytes(crc, bytes(data))
