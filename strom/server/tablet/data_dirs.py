"""A tablet server's local data directories (`data.dirs`, Fluss's FIP-33): where a new replica goes,
which directory an existing replica lies in, which directories are writable, and which failed.

Each replica (its log, and for a primary-key table its kv directory) lives in exactly one directory.
A new replica goes to the online directory holding the fewest replicas, then the one with the most
free space; a restarted server finds a replica in whichever directory holds it.

Two states per directory, each covering only that directory's replicas:
- *write-locked*: its file system's used share reached `server.data-disk.write-limit-ratio`; client
  writes to its replicas are refused with DISK_WRITE_LOCKED (retriable) until the share is back at
  or below `server.data-disk.write-recover-ratio` (hysteresis, as Fluss's DiskUsageMonitor). Reads and
  replication go on. Fluss locks the whole server when any disk crosses; Strom locks only the disk
  that did, since the other disks' replicas can still take writes.
- *offline*: an I/O error on it (EIO, a read-only remount, a vanished mount); its replicas are closed
  here and reported to the coordinator, which moves their leadership. It stays offline until the
  server restarts (Kafka's log-dir failure: a disk that threw EIO once is not trusted again).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import DiskWriteLockedError, InvalidConfigError, LogStorageError

log = logging.getLogger(__name__)

# errno values that mean the disk (not the request) is broken: the directory goes offline
LOCK_FILE = ".lock"
PROBE_FILE = ".probe"

DISK_FAILURE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENXIO, errno.ENODEV, errno.ESTALE})


class OfflineDirError(LogStorageError):
    """A replica lies in a data directory that failed: it cannot be served here until a restart with
    the directory readable."""


@dataclass
class DataDir:
    path: Path
    replicas: int = 0
    write_locked: bool = False
    usage_ratio: float = 0.0
    offline_reason: str | None = None
    # free bytes at the last check (make, sample): placement reads it instead of a stat on the loop
    free_bytes: int = -1

    @property
    def online(self) -> bool:
        return self.offline_reason is None


def configured_paths(data_dir: Path, config: Configuration) -> list[Path]:
    """`data.dirs` when set (as in Fluss, it takes precedence over `data.dir`, and so over
    `--data-dir`, which stands for `data.dir`), else `data_dir`. Each made absolute and checked:
    InvalidConfigError for an empty entry, a duplicate, or one inside another."""
    if options.DATA_DIRS.key not in config:
        return validated([data_dir])
    # split here, not by the list parser, which drops empty items: "a,,b" is a mistake to report
    raw = str(config[options.DATA_DIRS.key]).split(",")
    if not any(item.strip() for item in raw):
        raise InvalidConfigError("data.dirs is set but lists no directory")
    return validated(raw)


def validated(raw: Iterable[str | Path]) -> list[Path]:
    paths: list[Path] = []
    for entry in raw:
        if not str(entry).strip():
            raise InvalidConfigError("data.dirs must not contain an empty entry")
        path = Path(os.path.normpath(Path(str(entry).strip()).absolute()))
        for other in paths:
            if other == path:
                raise InvalidConfigError(f"data.dirs names {path} twice")
            if path.is_relative_to(other) or other.is_relative_to(path):
                raise InvalidConfigError(
                    f"data.dirs entries must not lie inside each other: {other} and {path}"
                )
        paths.append(path)
    if not paths:
        raise InvalidConfigError("a tablet server needs at least one data directory")
    return paths


def usage_ratio(path: Path) -> tuple[float, int]:
    """(used share, free bytes) of the file system holding `path` (blocking: a stat call).

    The share is df's Use%: used / (used + available to us). It reaches 1.0 exactly when nothing
    is left to write, whatever the file system reserves for root (Fluss's Java counts the reserved
    blocks as used, which on a disk with a large reservation locks writes while df shows it half
    empty)."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    free = st.f_bavail * st.f_frsize
    if used + free <= 0:
        return 0.0, free
    return used / (used + free), free


def _probe(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"1")
        os.fsync(fd)
    finally:
        os.close(fd)


def is_disk_failure(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is an OSError that says the disk is broken."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FAILURE_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class DataDirs:
    def __init__(self, paths: Sequence[Path]) -> None:
        self.dirs: list[DataDir] = [DataDir(p) for p in validated(paths)]
        self._by_path = {d.path: d for d in self.dirs}
        self.write_limit_ratio = options.SERVER_DATA_DISK_WRITE_LIMIT_RATIO.default
        self.write_recover_ratio = options.SERVER_DATA_DISK_WRITE_RECOVER_RATIO.default
        self._locks: list[int] = []

    @property
    def first(self) -> Path:
        return self.dirs[0].path

    def set_ratios(self, limit: float, recover: float) -> None:
        """InvalidConfigError unless 0 < recover < limit <= 1 (Fluss's ranges)."""
        if not (0.0 < recover < limit <= 1.0):
            raise InvalidConfigError(
                f"server.data-disk.write-recover-ratio ({recover}) and server.data-disk.write-limit-ratio "
                f"({limit}) must satisfy 0 < recover < limit <= 1"
            )
        self.write_limit_ratio, self.write_recover_ratio = limit, recover

    def make(self) -> None:
        """Create and lock every directory (blocking). One that cannot be created, or that another
        process holds (two servers configured with one directory would overwrite each other's
        replicas), is an error at start-up. The locks last as long as this process."""
        for d in self.dirs:
            try:
                d.path.mkdir(parents=True, exist_ok=True)
                fd = os.open(d.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                if not is_disk_failure(e):
                    raise InvalidConfigError(f"data directory {d.path} cannot be created: {e}") from e
                # a broken disk does not keep the server from serving the others (as in Fluss)
                log.error("data directory %s is offline: %s", d.path, e)
                d.offline_reason = f"{type(e).__name__}: {e}"
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InvalidConfigError(
                    f"data directory {d.path} is in use by another process (it holds {LOCK_FILE})"
                ) from None
            self._locks.append(fd)
            try:
                d.usage_ratio, d.free_bytes = usage_ratio(d.path)
            except OSError as e:
                log.warning("data directory %s: cannot read its usage: %s", d.path, e)
        if not any(d.online for d in self.dirs):
            raise InvalidConfigError(
                "every data directory failed: " + "; ".join(str(d.path) for d in self.dirs)
            )

    def release(self) -> None:
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()

    def get(self, root: Path) -> DataDir:
        return self._by_path[root]

    def holding(self, relative: Path) -> DataDir | None:
        """The directory in which `relative` (a replica's directory below a root) exists (blocking:
        a stat per directory).
        LogStorageError when two hold it (a disk put back with a stale copy): which one is current
        is for the operator to say, not for a guess."""
        found = [d for d in self.dirs if (d.path / relative).exists()]
        if len(found) > 1:
            where = ", ".join(str(d.path) for d in found)
            raise LogStorageError(
                f"the replica {relative} lies in several data directories ({where}): remove the stale copy"
            )
        return found[0] if found else None

    def choose(self) -> DataDir:
        """Where a new replica goes: an online directory, not write-locked if one is not, with the
        fewest replicas, then the most free space at the last check (no stat: this runs on the event
        loop, and a busy disk holds a stat for long). LogStorageError when every directory is offline."""
        online = [d for d in self.dirs if d.online]
        if not online:
            raise LogStorageError("every data directory of this tablet server is offline")
        unlocked = [d for d in online if not d.write_locked] or online
        fewest = min(d.replicas for d in unlocked)
        candidates = [d for d in unlocked if d.replicas == fewest]
        return max(candidates, key=lambda d: d.free_bytes)  # the first of equals: configured order

    def check_writable(self, root: Path | None, what: str) -> None:
        """DiskWriteLockedError when `root` is write-locked; LogStorageError when it is offline."""
        if root is None:
            return
        d = self._by_path.get(root)
        if d is None:
            return
        if not d.online:
            raise LogStorageError(f"{what}: data directory {d.path} is offline ({d.offline_reason})")
        if d.write_locked:
            raise DiskWriteLockedError(
                f"{what}: the disk of data directory {d.path} is {d.usage_ratio:.1%} full (write limit "
                f"{self.write_limit_ratio:.0%}); writes resume at or below {self.write_recover_ratio:.0%}"
            )

    def sample(self) -> tuple[list[tuple[DataDir, bool]], list[tuple[DataDir, str]]]:
        """Check each online directory (blocking): write and sync a probe file, so that a disk that
        broke while idle is found too, and read its usage for the write protection (hysteresis).
        Returns the directories whose write lock changed (with the new state), and those that
        failed (with the reason). A stat that fails otherwise keeps the state; it is logged."""
        changed: list[tuple[DataDir, bool]] = []
        failed: list[tuple[DataDir, str]] = []
        for d in self.dirs:
            if not d.online:
                continue
            try:
                _probe(d.path / PROBE_FILE)
                d.usage_ratio, d.free_bytes = usage_ratio(d.path)
            except OSError as e:
                if is_disk_failure(e):
                    failed.append((d, f"{type(e).__name__}: {e}"))
                else:  # e.g. ENOSPC for the probe: the write protection's business, not a failure
                    log.warning("checking data directory %s: %s", d.path, e)
                continue
            if self.write_limit_ratio >= 1.0:
                locked = False
            elif not d.write_locked:
                locked = d.usage_ratio >= self.write_limit_ratio
            else:
                locked = d.usage_ratio > self.write_recover_ratio
            if locked != d.write_locked:
                d.write_locked = locked
                changed.append((d, locked))
        return changed, failed

    def mark_offline(self, root: Path, reason: str) -> bool:
        """Take a directory offline; False when it already was."""
        d = self._by_path[root]
        if not d.online:
            return False
        d.offline_reason = reason
        return True
