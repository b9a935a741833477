"""A tablet server's data directories as metrics: Fluss's diskUsageRatio and diskWriteLocked (per
directory here, since Strom locks one disk at a time), and whether a directory is offline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from strom.metrics.registry import Metrics


class _Dir(Protocol):
    @property
    def path(self) -> object: ...
    @property
    def usage_ratio(self) -> float: ...
    @property
    def write_locked(self) -> bool: ...
    @property
    def online(self) -> bool: ...


class _Dirs(Protocol):
    @property
    def dirs(self) -> Sequence[_Dir]: ...


class DiskMetrics:
    def __init__(self, metrics: Metrics, data_dirs: _Dirs) -> None:
        self._dirs = data_dirs
        labels = ("dir",)
        self._usage = metrics.gauge("", "diskUsageRatio", "Used share of a data directory's disk.", labels)
        self._locked = metrics.gauge(
            "",
            "diskWriteLocked",
            "1 while writes to a data directory's replicas are refused (its disk reached "
            "server.data-disk.write-limit-ratio).",
            labels,
        )
        self._offline = metrics.gauge(
            "", "dataDirOffline", "1 once a data directory failed (its replicas went offline).", labels
        )
        self.update()

    def update(self) -> None:
        for d in self._dirs.dirs:
            name = str(d.path)
            self._usage.labels(name).set(d.usage_ratio)
            self._locked.labels(name).set(1 if d.write_locked else 0)
            self._offline.labels(name).set(0 if d.online else 1)
