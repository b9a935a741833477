"""Single-offset checkpoint files of a log tablet (recovery point, log start, high watermark).

Each file is two text lines, a format version and the offset, replaced atomically (write a temporary
file, rename). A missing or unreadable checkpoint reads as None: every checkpoint is a hint that
recovery can do without, so a damaged one costs time, never data.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["read_offset_checkpoint", "write_offset_checkpoint"]

_VERSION = "0"


def read_offset_checkpoint(path: Path) -> int | None:
    try:
        lines = path.read_text().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) != 2 or lines[0] != _VERSION:
        return None
    try:
        value = int(lines[1])
    except ValueError:
        return None
    return value if value >= 0 else None


def write_offset_checkpoint(path: Path, offset: int, *, sync: bool = False) -> None:
    """Replace the checkpoint; with `sync`, fsync it before the rename so it survives a crash."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{_VERSION}\n{offset}\n".encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
