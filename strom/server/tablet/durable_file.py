"""Whole-file replacement that survives a power cut: write a temporary file, fsync it, rename it over
the target, fsync the directory. Without the first fsync a crash can leave the renamed file empty
(the rename is journaled, the data not yet written back); without the last, the rename itself can
be lost."""

from __future__ import annotations

import os
from pathlib import Path

from strom.server.tablet.log.segment import fsync_path

__all__ = ["write_file_durably"]


def write_file_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)
