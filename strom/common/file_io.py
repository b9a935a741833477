"""Remote storage access: the one place that turns a location (a local path, `file://`, `s3://`,
`memory://`...) into a filesystem and a path on it, for the servers (remote log segments, KV
snapshots) and the client (tiered segments and KV snapshots it downloads itself) alike.

Every remote read and write goes through `load_file_io`, so storage options (credentials, endpoints)
and any choice of filesystem have one home, as pyiceberg's `load_file_io` gives its tables. fsspec
does the work and caches its filesystem instances, so calling this per operation is cheap.

These are blocking calls: servers and the client run them in an executor, never on an event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import fsspec
from fsspec.spec import AbstractFileSystem


@dataclass(frozen=True, slots=True)
class FileIO:
    """A location resolved: its filesystem, and its path in that filesystem's own form."""

    fs: AbstractFileSystem
    path: str

    def parts(self) -> tuple[AbstractFileSystem, str]:
        return self.fs, self.path


def load_file_io(location: str, storage_options: Mapping[str, str] | None = None) -> FileIO:
    fs, path = fsspec.core.url_to_fs(location, **dict(storage_options or {}))
    return FileIO(fs, path)
