"""Counts the supervision events of a process (`strom.common.supervision`) in its metrics.

`fluss_<scope>_supervision_taskFailures{task}` counts background tasks that ended with an exception,
`..._taskRestarts{task}` the restarts of supervised loops, `..._fatalFailures{task}` the failures that
ended the process (seen only if a scrape or a push happens before the exit, but logged either way).
"""

from __future__ import annotations

from collections.abc import Callable

from strom.common import supervision
from strom.metrics.registry import Metrics


def register_supervision_metrics(metrics: Metrics) -> Callable[[], None]:
    """Start counting; returns the function that stops it (call it when the server stops)."""
    counters = {
        supervision.Event.FAILED: metrics.counter(
            "supervision", "taskFailures", "Background tasks that ended with an exception.", ["task"]
        ),
        supervision.Event.RESTARTED: metrics.counter(
            "supervision", "taskRestarts", "Restarts of supervised background loops.", ["task"]
        ),
        supervision.Event.FATAL: metrics.counter(
            "supervision", "fatalFailures", "Failures that ended the process.", ["task"]
        ),
    }

    def count(event: supervision.Event, task: str) -> None:
        counters[event].labels(task=task).inc()

    return supervision.add_listener(count)
