"""Builds valid V0 Fluss log batches around arbitrary payload bytes, for the log storage tests.

The log never parses the records section, so any payload will do; only the header and CRC matter.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import google_crc32c

_BEFORE_CRC = struct.Struct("<qibqI")  # base offset, length, magic, commit timestamp, crc
_AFTER_CRC = struct.Struct("<hbiqii")  # schema id, attributes, last offset delta, writer, sequence, count


def make_batch(
    payload: bytes = b"p" * 64,
    *,
    records: int = 1,
    writer_id: int = -1,
    sequence: int = -1,
    base_offset: int = 0,
    timestamp: int = 0,
) -> bytes:
    covered = _AFTER_CRC.pack(1, 1, records - 1, writer_id, sequence, records) + payload
    crc = google_crc32c.value(covered)
    return _BEFORE_CRC.pack(base_offset, 13 + len(covered), 0, timestamp, crc) + covered


def payload_of(batch: bytes | memoryview) -> bytes:
    return bytes(batch[48:])


def split_batches(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(base offset, last offset, commit timestamp, payload) of each batch in `data`."""
    out = []
    pos = 0
    while pos < len(data):
        base, length, _, ts, _ = _BEFORE_CRC.unpack_from(data, pos)
        delta = struct.unpack_from("<i", data, pos + 28)[0]
        size = length + 12
        out.append((base, base + delta, ts, bytes(data[pos + 48 : pos + size])))
        pos += size
    assert pos == len(data), "fetch returned a partial batch"
    return out


def crash_image(src: Path, dst: Path) -> Path:
    """Copy a live tablet directory: what the disk holds if the process died right now (no clean
    shutdown marker, unflushed index entries missing)."""
    shutil.copytree(src, dst)
    return dst
