"""Memory allocator settings for server processes.

A server receives and sends record batches of megabytes. glibc serves allocations above its mmap
threshold (128 KiB at first, adapting up to 32 MiB) with fresh mmap'd pages and unmaps them when freed,
so every large frame, protobuf field or file read pays for page faults and zeroing again — profiles of
the produce and fetch paths showed most of their time in the first touch of such buffers. Keeping those
allocations on the heap (and up to 64 MiB of freed memory mapped) lets the next request reuse warm
pages. Measured with bench/log_throughput.py; see docs/performance.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# the largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD = 32 * 1024 * 1024
# freed heap memory kept mapped before it is returned to the system
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_large_allocations_on_the_heap() -> bool:
    """Applies the settings above on Linux with glibc; elsewhere does nothing. True when applied."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
    if not applied:
        log.debug("mallopt refused the allocator settings")
    return applied
