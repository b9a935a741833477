"""Reading log tables (and primary-key changelogs) bucket by bucket, from ``new_scan().create_log_scanner()``.

    scanner = table.new_scan().project_by_name(["id", "name"]).create_log_scanner()
    scanner.subscribe_buckets({b: EARLIEST_OFFSET for b in range(table.bucket_count)})
    batches = await scanner.poll_batches(1000)      # list[ScanBatch]: Arrow + bucket + offsets
    records = await scanner.poll(1000)              # ScanRecords: rows as dicts, with offsets
    everything = await scanner.to_arrow()           # up to the end offsets at the time of the call

Startup modes (``table.new_scan().startup_mode("full")``, see `startup`): ``await
scanner.subscribe_startup()`` subscribes every bucket (of every partition) where the mode says; in
``full`` mode the buckets of a primary-key table first hand out their KV snapshot's rows as inserts
(offset and timestamp -1), then their changelog after it.

A poll returns as soon as fetched data is there, or empty once its timeout passed. Buckets may be
given a stop offset (`stop_at`, or the `end` of `subscribe`): rows at or past it are never returned and
the bucket is finished once its position reaches it, so ``[start, end)`` ranges are read exactly
(what Spark splits need). `finished` is True when every subscribed bucket is. Errors a fetch cannot
recover from (an offset out of range, a corrupt batch) are raised by the poll that meets them; leader
changes are followed by refreshing the metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from strom.client.closing import AsyncClosing
from strom.client.offset_spec import OffsetSpec
from strom.client.scanner.log_fetcher import EARLIEST_OFFSET, BucketPosition, CompletedFetch, LogFetcher
from strom.client.scanner.scan_records import ScanBatch, ScanRecords
from strom.client.scanner.snapshot_feed import SnapshotFeed
from strom.client.scanner.snapshot_reader import SnapshotReader
from strom.client.scanner.startup import StartupMode, StartupSpec
from strom.client.scanner.table_scan import ReadPlan
from strom.common.errors import FlussError, LogOffsetOutOfRangeError
from strom.common.table_bucket import TableBucket

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["EARLIEST_OFFSET", "LogScanner"]

BucketKey = int | tuple[int, int] | TableBucket
# One kind of key per mapping (Mapping is invariant in its keys): end_offsets()'s TableBucket keys fit.
_Key = TypeVar("_Key", bound=BucketKey)

class LogScanner(AsyncClosing):
    def __init__(self, table: Table, plan: ReadPlan, startup: StartupSpec | None = None) -> None:
        connection = table.connection
        self.table = table
        self.plan = plan
        self.startup = startup or StartupSpec()
        # KV snapshots still to hand out (startup mode full on a primary-key table).
        self._feed: SnapshotFeed | None = None
        self._positions: dict[TableBucket, BucketPosition] = {}
        self._fetcher = LogFetcher(
            table.path,
            table.table_id,
            plan,
            self._positions,
            connection.metadata,
            connection.pool,
            connection.config,
        )
        self._max_poll_records = connection.config.scanner_log_max_poll_records
        self._closed = False
        connection.track_scanner(self)  # closed with the connection, so no fetch outlives it

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of returned batches: the projected columns in the order asked for."""
        return self.plan.output_schema

    # ------------------------------------------------------------------ subscriptions

    def _bucket(self, key: BucketKey) -> TableBucket:
        if isinstance(key, TableBucket):
            bucket = key
        elif isinstance(key, tuple):
            bucket = TableBucket(self.table.table_id, int(key[0]), int(key[1]))
        else:
            bucket = TableBucket(self.table.table_id, None, int(key))
        if bucket.table_id != self.table.table_id:
            raise ValueError(
                f"{bucket} is not a bucket of table '{self.table.path}' (id {self.table.table_id})"
            )
        if not 0 <= bucket.bucket < self.table.bucket_count:
            raise ValueError(
                f"Table '{self.table.path}' has {self.table.bucket_count} buckets; no bucket {bucket.bucket}."
            )
        if self.table.is_partitioned and bucket.partition_id is None:
            raise ValueError(f"Table '{self.table.path}' is partitioned: subscribe with a partition id.")
        if not self.table.is_partitioned and bucket.partition_id is not None:
            raise ValueError(
                f"Table '{self.table.path}' is not partitioned: subscribe without a partition id."
            )
        return bucket

    def _subscribe(self, bucket: TableBucket, offset: int, end: int | None) -> None:
        if offset < 0 and offset != EARLIEST_OFFSET:
            raise ValueError(f"start offset {offset} is invalid: use an offset >= 0 or EARLIEST_OFFSET (-2)")
        if end is not None and end < 0:
            raise ValueError(f"end offset {end} must not be negative")
        self._fetcher.drop(lambda c: c.bucket == bucket)
        if self._feed is not None:
            self._feed.discard(bucket)
        self._positions[bucket] = BucketPosition(bucket, offset, end)

    def subscribe(self, bucket: int, offset: int = EARLIEST_OFFSET, end: int | None = None) -> None:
        """Read a bucket of a non-partitioned table from `offset`, up to `end` (exclusive) if given."""
        self._subscribe(self._bucket(bucket), offset, end)

    def subscribe_buckets(self, offsets: Mapping[int, int]) -> None:
        for bucket, offset in offsets.items():
            self.subscribe(bucket, offset)

    def subscribe_partition(
        self, partition_id: int, bucket: int, offset: int = EARLIEST_OFFSET, end: int | None = None
    ) -> None:
        self._subscribe(self._bucket((partition_id, bucket)), offset, end)

    def subscribe_partition_buckets(self, offsets: Mapping[tuple[int, int], int]) -> None:
        for (partition_id, bucket), offset in offsets.items():
            self.subscribe_partition(partition_id, bucket, offset)

    def unsubscribe(self, bucket: int) -> None:
        self._unsubscribe(self._bucket(bucket))

    def unsubscribe_partition(self, partition_id: int, bucket: int) -> None:
        self._unsubscribe(self._bucket((partition_id, bucket)))

    def _unsubscribe(self, bucket: TableBucket) -> None:
        self._positions.pop(bucket, None)
        self._fetcher.drop(lambda c: c.bucket == bucket)
        if self._feed is not None:
            self._feed.discard(bucket)

    async def subscribe_startup(
        self, buckets: Iterable[int] | None = None, partition_ids: Iterable[int] | None = None
    ) -> None:
        """Subscribe buckets (all by default) of the table, or of the given partitions (all that exist
        now by default), where the scan's startup mode says."""
        table = self.table
        bucket_ids = list(range(table.bucket_count)) if buckets is None else sorted({int(b) for b in buckets})
        for b in bucket_ids:
            self._bucket(b if not table.is_partitioned else (0, b))  # range check
        admin = table.connection.get_admin()
        parts: list[tuple[int | None, str | None]] = [(None, None)]
        if table.is_partitioned:
            infos = await admin.list_partition_infos(table.path)
            names = {p.partition_id: p.partition_name for p in infos}
            wanted = list(names) if partition_ids is None else [int(p) for p in partition_ids]
            unknown = [p for p in wanted if p not in names]
            if unknown:
                raise ValueError(f"Table '{table.path}' has no partition(s) with id {unknown}.")
            parts = [(p, names[p]) for p in wanted]
        elif partition_ids is not None:
            raise ValueError(f"Table '{table.path}' is not partitioned: subscribe without partition ids.")
        mode = self.startup.mode
        for partition_id, name in parts:
            buckets_here = [TableBucket(table.table_id, partition_id, b) for b in bucket_ids]
            if mode is StartupMode.EARLIEST or (mode is StartupMode.FULL and not table.has_primary_key):
                for bucket in buckets_here:
                    self._subscribe(bucket, EARLIEST_OFFSET, None)
            elif mode is StartupMode.FULL:
                await self._subscribe_full(buckets_here, partition_id)
            else:
                spec = OffsetSpec.latest()
                if mode is StartupMode.TIMESTAMP:
                    assert self.startup.timestamp_ms is not None
                    spec = OffsetSpec.timestamp(self.startup.timestamp_ms)
                offsets = await admin.list_offsets(table.path, bucket_ids, spec, partition_name=name)
                for bucket in buckets_here:
                    self._subscribe(bucket, offsets[bucket.bucket], None)

    async def _subscribe_full(self, buckets: list[TableBucket], partition_id: int | None) -> None:
        if self._feed is None:
            output = list(self.plan.output_schema.names)
            self._feed = SnapshotFeed(
                SnapshotReader(self.table), lambda batch: batch.select(output), self._reposition
            )
        latest = await self._feed.reader.latest(partition_id)
        for bucket in buckets:
            snapshot = latest.get(bucket.bucket)
            if snapshot is None:
                self._subscribe(bucket, EARLIEST_OFFSET, None)
            else:
                # The changelog after the snapshot is fetched meanwhile, but held back until the
                # snapshot's rows are out.
                self._subscribe(bucket, snapshot[1], None)
                self._feed.add(bucket, snapshot[0], snapshot[1])

    def _reposition(self, bucket: TableBucket, offset: int) -> None:
        """Move a held bucket's changelog start (its snapshot was replaced before it was read)."""
        position = self._positions.get(bucket)
        if position is not None:
            self._fetcher.drop(lambda c: c.bucket == bucket)
            position.offset = offset

    def stop_at(self, end_offsets: Mapping[_Key, int]) -> None:
        """Stop subscribed buckets at these offsets (exclusive): a bounded read of ``[start, end)``."""
        for key, end in end_offsets.items():
            bucket = self._bucket(key)
            position = self._positions.get(bucket)
            if position is None:
                raise ValueError(f"{bucket} is not subscribed")
            if end < 0:
                raise ValueError(f"end offset {end} must not be negative")
            position.stop = end
            # Already fetched rows past the new stop must not come out.
            self._fetcher.drop(_fetched_from(bucket))

    def positions(self) -> dict[TableBucket, int]:
        """The next offset to read per subscribed bucket (-2 until the first answer for an earliest start)."""
        return {b: p.offset for b, p in self._positions.items()}

    def high_watermarks(self) -> dict[TableBucket, int]:
        """The high watermark each bucket's last fetch reported (-1 before the first)."""
        return {b: p.high_watermark for b, p in self._positions.items()}

    @property
    def subscribed(self) -> list[TableBucket]:
        return list(self._positions)

    @property
    def snapshots_pending(self) -> bool:
        """Whether KV snapshot rows (startup mode full) are still to be handed out."""
        return self._feed is not None and self._feed.active

    @property
    def finished(self) -> bool:
        """Every subscribed bucket reached its stop offset (never True for an unbounded bucket)."""
        if self._feed is not None and self._feed.active:
            return False
        return all(p.finished for p in self._positions.values())

    # ------------------------------------------------------------------ polling

    async def poll_batches(self, timeout_ms: float, max_records: int | None = None) -> list[ScanBatch]:
        """Fetched batches (whole, unless `max_records` cuts them), waiting up to `timeout_ms` for data."""
        if self._closed:
            raise FlussError("The log scanner is closed.")
        fetcher = self._fetcher
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            fetcher.data_ready.clear()
            batches = self._collect(max_records)
            feed = self._feed
            if feed is not None and feed.active:
                budget = None if max_records is None else max_records - sum(b.num_rows for b in batches)
                if budget is None or budget > 0:
                    wait = 0.0 if batches else deadline - loop.time()
                    batches.extend(await feed.next_batches(wait, budget))
            fetcher.send_fetches()  # prefetch what was just consumed, or start fetching
            if batches or self.finished or not self._positions:
                return batches
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if feed is not None and feed.active:
                continue  # the feed waits for its next snapshot itself
            try:
                await asyncio.wait_for(fetcher.data_ready.wait(), remaining)
            except TimeoutError:
                return []

    async def poll(self, timeout_ms: float) -> ScanRecords:
        """At most ``client.scanner.log.max-poll-records`` records, grouped by bucket."""
        return ScanRecords.of(await self.poll_batches(timeout_ms, self._max_poll_records))

    async def poll_arrow(self, timeout_ms: float) -> pa.Table:
        """The fetched rows as one Arrow table (empty, with the schema, when nothing came)."""
        batches = await self.poll_batches(timeout_ms)
        return pa.Table.from_batches([b.batch for b in batches], schema=self.arrow_schema)

    def _collect(self, max_records: int | None) -> list[ScanBatch]:
        out: list[ScanBatch] = []
        budget = max_records if max_records is not None else -1
        completed = self._fetcher.completed
        held = self._feed.held if self._feed is not None else ()
        skipped: list[CompletedFetch] = []
        while completed and budget != 0:
            fetch = completed[0]
            if fetch.bucket in held:
                skipped.append(completed.popleft())  # its snapshot comes first
                continue
            position = self._positions.get(fetch.bucket)
            if position is None or position.offset != fetch.fetch_offset:
                completed.popleft()  # unsubscribed or repositioned since it was fetched
                continue
            if fetch.error is not None:
                completed.popleft()
                raise self._describe(fetch)
            if fetch.high_watermark >= 0:
                position.high_watermark = fetch.high_watermark
            while fetch.batches and budget != 0:
                batch = fetch.batches[0]
                if 0 < budget < batch.num_rows:
                    # Hand out the first part; the rest waits for the next poll.
                    head = ScanBatch(
                        batch.bucket,
                        batch.batch.slice(0, budget),
                        batch.base_offset,
                        batch.timestamp,
                        None if batch.change_types is None else batch.change_types[:budget],
                    )
                    fetch.batches[0] = ScanBatch(
                        batch.bucket,
                        batch.batch.slice(budget),
                        batch.base_offset + budget,
                        batch.timestamp,
                        None if batch.change_types is None else batch.change_types[budget:],
                    )
                    batch = head
                else:
                    fetch.batches.popleft()
                out.append(batch)
                position.offset = batch.next_offset
                fetch.fetch_offset = batch.next_offset
                if budget > 0:
                    budget -= batch.num_rows
            if fetch.batches:
                break  # out of budget
            completed.popleft()
            if fetch.next_offset is not None and fetch.next_offset > position.offset:
                position.offset = fetch.next_offset
        completed.extendleft(reversed(skipped))
        return out

    def _describe(self, fetch: CompletedFetch) -> FlussError:
        error = fetch.error
        assert error is not None
        where = f"bucket {fetch.bucket.bucket}" + (
            f" of partition {fetch.bucket.partition_id}" if fetch.bucket.partition_id is not None else ""
        )
        if isinstance(error, LogOffsetOutOfRangeError):
            bounds = ""
            if fetch.log_start_offset >= 0 or fetch.high_watermark >= 0:
                bounds = f" (the log holds offsets {fetch.log_start_offset} to {fetch.high_watermark})"
            return LogOffsetOutOfRangeError(
                f"Cannot read {where} of table '{self.table.path}' from offset {fetch.fetch_offset}: "
                f"it is out of range{bounds}. Subscribe again from EARLIEST_OFFSET or a valid offset. "
                f"Server: {error}"
            )
        return type(error)(
            f"Fetching {where} of table '{self.table.path}' at offset {fetch.fetch_offset} failed: {error}"
        )

    # ------------------------------------------------------------------ bounded reads

    async def end_offsets(self) -> dict[TableBucket, int]:
        """The latest offset (high watermark) of every subscribed bucket, asked of their leaders."""
        admin = self.table.connection.get_admin()
        by_partition: dict[int | None, list[int]] = {}
        for bucket in self._positions:
            by_partition.setdefault(bucket.partition_id, []).append(bucket.bucket)
        metadata = self.table.connection.metadata
        ends: dict[TableBucket, int] = {}
        for partition_id, buckets in by_partition.items():
            name: str | None = None
            if partition_id is not None:
                name = metadata.partition_name(partition_id)
                if name is None:
                    await metadata.refresh_partitions(self.table.path, [partition_id])
                    name = metadata.partition_name(partition_id)
                if name is None:
                    raise FlussError(f"Partition id {partition_id} of table '{self.table.path}' is unknown.")
            offsets = await admin.list_offsets(
                self.table.path, buckets, OffsetSpec.latest(), partition_name=name
            )
            for bucket_id, offset in offsets.items():
                ends[TableBucket(self.table.table_id, partition_id, bucket_id)] = offset
        return ends

    async def to_arrow(self) -> pa.Table:
        """Everything from the current positions up to the end offsets at the time of the call."""
        batches = [b.batch async for b in self.iter_batches(to_end=True)]
        return pa.Table.from_batches(batches, schema=self.arrow_schema)

    async def to_pandas(self) -> Any:
        return (await self.to_arrow()).to_pandas()

    async def iter_batches(
        self, timeout_ms: float = 1000, *, to_end: bool = False
    ) -> AsyncIterator[ScanBatch]:
        """Batches until every bucket is finished. With `to_end`, buckets first get a stop offset at
        their current end (never later than a stop they already have)."""
        if to_end and self._positions:
            for bucket, end in (await self.end_offsets()).items():
                position = self._positions.get(bucket)
                if position is not None and (position.stop is None or end < position.stop):
                    position.stop = end
                    self._fetcher.drop(_fetched_from(bucket))
        if any(p.stop is None for p in self._positions.values()):
            raise ValueError("iter_batches needs a stop offset for every bucket (stop_at or to_end=True)")
        while not self.finished:
            for batch in await self.poll_batches(timeout_ms):
                yield batch

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._feed is not None:
                await self._feed.close()
            await self._fetcher.close()

    def __repr__(self) -> str:
        return f"LogScanner({self.table.path}, {len(self._positions)} buckets)"


def _fetched_from(bucket: TableBucket) -> Callable[[CompletedFetch], bool]:
    """Matches answers of `bucket`; binds it now, for calls inside a loop over buckets."""
    return lambda c: c.bucket == bucket
