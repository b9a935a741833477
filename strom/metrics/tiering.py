"""What the tiering service reports, per table: rounds, records and bytes tiered, failures, the last
round's duration, and how far the lake is behind Fluss (records, and milliseconds since the lake last
held everything the table had)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from strom.metrics.registry import Metrics

TABLE_LABELS = ("database", "table")


class TieringMetrics:
    def __init__(self, metrics: Metrics) -> None:
        m = metrics
        self._rounds = m.counter("table", "rounds", "Tiering rounds committed, per table.", TABLE_LABELS)
        self._records = m.counter(
            "table", "recordCount", "Records written to the lake, per table.", TABLE_LABELS
        )
        self._bytes = m.counter("table", "fileSize", "Bytes of lake files written, per table.", TABLE_LABELS)
        self._failures = m.counter(
            "table", "failures", "Tiering rounds that failed, per table.", TABLE_LABELS
        )
        self._duration = m.gauge(
            "table", "tierDuration", "Duration of the last round in ms, per table.", TABLE_LABELS
        )
        self._pending = m.gauge(
            "table", "pendingRecords", "Records in Fluss not yet in the lake, per table.", TABLE_LABELS
        )
        # table -> (monotonic time up to which the lake was complete, records behind at the last look)
        self._state: dict[tuple[str, str], tuple[float, int]] = {}

        def lag() -> Iterable[tuple[Sequence[str], float]]:
            now = time.monotonic()
            for table, (complete_at, behind) in list(self._state.items()):
                yield table, 0.0 if behind == 0 else (now - complete_at) * 1000

        m.state_gauge(
            "table", "tierLag", "Milliseconds the lake is behind Fluss, per table.", TABLE_LABELS, lag
        )

    def planned(self, database: str, table: str, pending_records: int) -> None:
        self._pending.labels(database, table).set(pending_records)

    def committed(
        self,
        database: str,
        table: str,
        *,
        records: int,
        bytes_written: int,
        seconds: float,
        planned_at: float,
        behind: int,
    ) -> None:
        """A round committed what the table had at `planned_at`; `behind` records arrived since."""
        self._rounds.labels(database, table).inc()
        self._records.labels(database, table).inc(records)
        self._bytes.labels(database, table).inc(bytes_written)
        self._duration.labels(database, table).set(seconds * 1000)
        self._pending.labels(database, table).set(behind)
        self._state[(database, table)] = (planned_at, behind)

    def caught_up(self, database: str, table: str) -> None:
        """A round found nothing to tier: the lake holds everything."""
        self._pending.labels(database, table).set(0)
        self._state[(database, table)] = (time.monotonic(), 0)

    def failed(self, database: str, table: str) -> None:
        self._failures.labels(database, table).inc()
