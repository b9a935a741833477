"""What a tablet server reports: traffic per table, replication, ISR changes, KV snapshots, and (as state
gauges) its leaders, replicas, under-replicated buckets, log sizes and RocksDB memory."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from strom.common.table_path import TablePath
from strom.metrics.registry import Metrics
from strom.rpc.gen import fluss_api_pb2 as pb

TABLE_LABELS = ("database", "table")


class _Replica(Protocol):
    bucket: Any
    database: str
    table: str
    log: Any
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    held_local: tuple[int, int]
    held_remote: tuple[int, int]


TIER_LABELS = (*TABLE_LABELS, "tier")


class TabletMetrics:
    def __init__(
        self,
        metrics: Metrics,
        server_id: int,
        replicas: Callable[[], Iterable[_Replica]],
        kv_memory: Callable[[], int],
        table_path: Callable[[int], TablePath | None],
    ) -> None:
        m = metrics
        self._server_id = server_id
        self._table_path = table_path
        self._bytes_in = m.counter("table", "bytesIn", "Bytes clients wrote, per table.", TABLE_LABELS)
        self._messages_in = m.counter(
            "table", "messagesIn", "Records clients wrote, per table.", TABLE_LABELS
        )
        self._bytes_out = m.counter("table", "bytesOut", "Bytes clients read, per table.", TABLE_LABELS)
        self._stats_skipped = m.counter(
            "table",
            "batchesSkippedByStatistics",
            "Log batches a filtered fetch left out because their statistics prove no row matches, per table.",
            TABLE_LABELS,
        )
        self._stats_skipped_bytes = m.counter(
            "table",
            "bytesSkippedByStatistics",
            "Bytes of log batches a filtered fetch left out on their statistics alone, per table.",
            TABLE_LABELS,
        )
        self._replication_in = m.counter("", "replicationBytesIn", "Bytes copied from leaders.")
        self._replication_out = m.counter("", "replicationBytesOut", "Bytes followers copied from here.")
        self._isr_shrinks = m.counter("", "isrShrinks", "Followers dropped from ISRs of buckets led here.")
        self._isr_expands = m.counter("", "isrExpands", "Followers taken back into ISRs of buckets led here.")
        self._snapshot_size = m.gauge(
            "table", "kvSnapshotSize", "Size of the latest KV snapshots, per table.", TABLE_LABELS
        )
        self._snapshot_time = m.histogram(
            "",
            "kvSnapshotDurationMs",
            "Time to take and upload one KV snapshot.",
            buckets=(10, 50, 100, 500, 1000, 5000, 30000, 120000),
        )
        self._snapshot_sizes: dict[Any, tuple[tuple[str, str], int]] = {}
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}

        def leaders() -> Iterable[tuple[Sequence[str], float]]:
            yield (), sum(1 for r in replicas() if r.leader == server_id)

        def hosted() -> Iterable[tuple[Sequence[str], float]]:
            yield (), sum(1 for _ in replicas())

        def under_replicated() -> Iterable[tuple[Sequence[str], float]]:
            yield (), sum(1 for r in replicas() if r.leader == server_id and len(r.isr) < len(r.replicas))

        def per_table(measure: Callable[[Any], int]) -> Callable[[], Iterable[tuple[Sequence[str], float]]]:
            def collect() -> Iterable[tuple[Sequence[str], float]]:
                totals: dict[tuple[str, str], int] = defaultdict(int)
                for r in replicas():
                    if r.log is not None:
                        totals[(r.database, r.table)] += measure(r.log)
                return totals.items()

            return collect

        m.state_gauge("", "leaderCount", "Buckets this server leads.", (), leaders)
        m.state_gauge("", "replicaCount", "Bucket replicas on this server.", (), hosted)
        m.state_gauge(
            "",
            "underReplicated",
            "Buckets led here with fewer in-sync replicas than replicas.",
            (),
            under_replicated,
        )
        sizes = per_table(lambda tablet: tablet.size_in_bytes)
        segments = per_table(lambda tablet: tablet.segment_count)
        m.state_gauge("table", "logSize", "Bytes of local log segments, per table.", TABLE_LABELS, sizes)
        m.state_gauge("table", "numSegments", "Local log segments, per table.", TABLE_LABELS, segments)

        def held(index: int) -> Callable[[], Iterable[tuple[Sequence[str], float]]]:
            # lake-enabled tables: log past its TTL kept because the lake does not have it yet
            def collect() -> Iterable[tuple[Sequence[str], float]]:
                totals: dict[tuple[str, str, str], int] = defaultdict(int)
                for r in replicas():
                    totals[(r.database, r.table, "local")] += r.held_local[index]
                    totals[(r.database, r.table, "remote")] += r.held_remote[index]
                return totals.items()

            return collect

        m.state_gauge(
            "table",
            "lakeRetentionHeldSegments",
            "Log segments past table.log.ttl kept until the lake has them, per table and tier.",
            TIER_LABELS,
            held(0),
        )
        m.state_gauge(
            "table",
            "lakeRetentionHeldBytes",
            "Bytes of log segments past table.log.ttl kept until the lake has them, per table and tier.",
            TIER_LABELS,
            held(1),
        )
        self._hold_expired = m.counter(
            "table",
            "lakeRetentionHoldExpired",
            "Log segments deleted before the lake had them, because "
            "table.datalake.retention-hold.max-duration passed (records lost), per table and tier.",
            TIER_LABELS,
        )
        m.state_gauge(
            "",
            "rocksdbMemoryUsageTotal",
            "RocksDB memory of the KV tablets here.",
            (),
            lambda: [((), kv_memory())],
        )

    def _table(self, database: str, table: str) -> tuple[Any, Any, Any]:
        key = (database, table)
        children = self._children.get(key)
        if children is None:
            children = (
                self._bytes_in.labels(database, table),
                self._messages_in.labels(database, table),
                self._bytes_out.labels(database, table),
            )
            self._children[key] = children
        return children

    # ---- events

    def produced(self, database: str, table: str, size: int, records: int) -> None:
        bytes_in, messages_in, _ = self._table(database, table)
        bytes_in.inc(size)
        messages_in.inc(records)

    def fetched(
        self, response: pb.FetchLogResponse, records: Mapping[tuple[int, int], bytes], follower: bool
    ) -> None:
        """A FetchLog answer; `records` are its record bytes by (table index, bucket index)."""
        sizes: dict[int, int] = defaultdict(int)
        for (t, _), data in records.items():
            sizes[t] += len(data)
        for t, size in sizes.items():
            if follower:
                self._replication_out.inc(size)
                continue
            path = self._table_path(response.tables_resp[t].table_id)
            if path is not None:
                self._table(path.database_name, path.table_name)[2].inc(size)

    def skipped_by_statistics(self, database: str, table: str, batches: int, size: int) -> None:
        self._stats_skipped.labels(database, table).inc(batches)
        self._stats_skipped_bytes.labels(database, table).inc(size)

    def retention_hold_expired(self, database: str, table: str, tier: str, segments: int) -> None:
        self._hold_expired.labels(database, table, tier).inc(segments)

    def replicated(self, size: int) -> None:
        self._replication_in.inc(size)

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self._isr_shrinks.inc(before - after)
        elif after > before:
            self._isr_expands.inc(after - before)

    def kv_snapshot(self, bucket: Any, database: str, table: str, size: int, seconds: float) -> None:
        self._snapshot_time.observe(seconds * 1000)
        self._snapshot_sizes[bucket] = ((database, table), size)
        totals: dict[tuple[str, str], int] = defaultdict(int)
        for key, value in self._snapshot_sizes.values():
            totals[key] += value
        for (db, name), value in totals.items():
            self._snapshot_size.labels(db, name).set(value)
