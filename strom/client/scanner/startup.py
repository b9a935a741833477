"""Where a scan starts (``scan.startup.mode``): earliest, latest, full or timestamp.

* ``full`` (Fluss's default): for a primary-key table, each bucket's latest KV snapshot as inserts,
  then its changelog from the snapshot's offset (from the earliest offset when the bucket has no
  snapshot yet); for a log table, the same as ``earliest``.
* ``earliest``: every bucket from the start of its log (the whole changelog of a primary-key table).
* ``latest``: from each bucket's high watermark, i.e. only what is written from now on.
* ``timestamp``: from the first offset committed at or after ``scan.startup.timestamp`` (epoch ms).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StartupMode", "StartupSpec"]

STARTUP_MODE_KEY = "scan.startup.mode"
STARTUP_TIMESTAMP_KEY = "scan.startup.timestamp"


class StartupMode(enum.StrEnum):
    FULL = "full"
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class StartupSpec:
    mode: StartupMode = StartupMode.FULL
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.mode is StartupMode.TIMESTAMP) != (self.timestamp_ms is not None):
            raise ValueError("a startup timestamp goes with the 'timestamp' startup mode, and only with it")

    @classmethod
    def of(cls, mode: StartupMode | str, timestamp_ms: int | None = None) -> StartupSpec:
        try:
            parsed = StartupMode(str(mode).strip().lower())
        except ValueError:
            choices = ", ".join(m.value for m in StartupMode)
            raise ValueError(f"unknown startup mode {mode!r}; use one of {choices}") from None
        return cls(parsed, None if timestamp_ms is None else int(timestamp_ms))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> StartupSpec:
        """From ``scan.startup.mode`` and ``scan.startup.timestamp`` (epoch ms), as Fluss names them."""
        mode = options.get(STARTUP_MODE_KEY, StartupMode.FULL.value)
        timestamp = options.get(STARTUP_TIMESTAMP_KEY)
        return cls.of(mode, None if timestamp is None else int(timestamp))
