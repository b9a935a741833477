"""Whether the tablet server's previous process stopped cleanly (Kafka's clean shutdown file).

A graceful stop (SIGTERM) closes every log (fsynced, checkpointed) and then records `clean-shutdown`
in the data directory, durably. A start removes the record before anything is written, so a process
that dies any other way (kill -9, power loss, a crash) leaves none behind, and the next start reports
an *unclean* shutdown to the coordinator: its replicas may have lost their unflushed tails, and they
are not eligible to lead until they caught up again (eligible leader replicas, KIP-966). An empty new
data directory counts as unclean too: a replaced disk holds nothing of what was acknowledged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from strom.server.tablet.log.segment import fsync_path

__all__ = ["CLEAN_SHUTDOWN_RECORD", "CleanShutdown"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_RECORD = "clean-shutdown"


class CleanShutdown:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CLEAN_SHUTDOWN_RECORD
        self.unclean = True  # until begin() found the record

    def begin(self) -> None:
        """At start (blocking: run it off the event loop): read and remove the record, durably."""
        self.unclean = not self.path.exists()
        if self.unclean:
            new = not any(p.name not in (".lock", ".probe") for p in self.path.parent.iterdir())  # data_dirs
            log.log(
                logging.INFO if new else logging.WARNING,
                "no clean-shutdown record in %s (%s): this server's replicas are not eligible to lead "
                "until they are back in the ISR",
                self.path.parent,
                "a new data directory" if new else "the previous process did not stop cleanly",
            )
            return
        self.path.unlink()
        fsync_path(self.path.parent)

    def record(self) -> None:
        """After a graceful stop closed every log: the next start may trust this data directory."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_path(self.path.parent)
