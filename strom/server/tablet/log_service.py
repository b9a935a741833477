"""The log APIs of a tablet server: InitWriter, ProduceLog, FetchLog (long-poll, projection),
ListOffsets and LimitScan on log tables.

Produce stores the client's batch bytes as received (only base offset and commit timestamp are patched,
outside the CRC); a fetch returns stored bytes and decodes Arrow only to project columns.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.common.errors import (
    CorruptRecordError,
    FlussError,
    InvalidColumnProjectionError,
    InvalidRequiredAcksError,
    InvalidTableError,
    InvalidTimestampError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    SchemaNotExistError,
    StorageError,
)
from strom.common.predicate import BatchFilter, predicate_from_pb
from strom.common.rescale import refuse_if_sealed
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.metrics.tablet import TabletMetrics
from strom.record.arrow_batch import decode_arrow_batch, project_arrow_batch
from strom.record.batch_statistics import parse_statistics, statistics_may_match
from strom.record.log_batch import (
    LOG_MAGIC_V2,
    MAGIC_OFFSET,
    LogBatchHeader,
    iter_batches,
    read_header,
    records_offset,
    schema_id_offset,
)
from strom.record.schema_evolution import evolve_arrow_batch
from strom.rpc.encoded import EncodedResponse
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.rpc.wire_fields import length_delimited
from strom.server.tablet.fetch_response import encode_fetch_response
from strom.server.tablet.log.log_tablet import AppendResult, wait_durable
from strom.server.tablet.remote_log import RemoteLog, read_remote_batches, remote_fetch_info
from strom.server.tablet.replica_manager import Replica, ReplicaManager
from strom.server.tablet.rescale_routing import check_log_routing

log = logging.getLogger(__name__)
_SCHEMA_ID = struct.Struct("<h")

EARLIEST_OFFSET = -2  # FetchLog's "from the log start"
OFFSET_EARLIEST, OFFSET_LATEST, OFFSET_TIMESTAMP = 0, 1, 2


def _bucket_of(table_id: int, entry: object) -> TableBucket:
    partition = entry.partition_id if entry.HasField("partition_id") else None  # type: ignore[attr-defined]
    return TableBucket(table_id, partition, entry.bucket_id)  # type: ignore[attr-defined]


def earliest_offset(replica: Replica) -> int:
    """The first offset a reader can get: in remote storage when the log's oldest part is tiered."""
    local = replica.log_tablet().log_start_offset
    remote = replica.remote.start_offset if replica.remote is not None else None
    return local if remote is None else min(local, remote)


def first_schema_id(records: bytes | memoryview, offset: int) -> int:
    """The schema id in the header of the first batch of `records` (-1: too short to tell; the
    batch checks report that)."""
    if len(records) < offset + _SCHEMA_ID.size:
        return -1
    return int(_SCHEMA_ID.unpack_from(records, offset)[0])


def _first_log_schema_id(records: bytes | memoryview) -> int:
    """The schema id of the first log batch of `records`, wherever its magic puts it (-1: unknown)."""
    if len(records) <= MAGIC_OFFSET:
        return -1
    magic = records[MAGIC_OFFSET]
    return first_schema_id(records, schema_id_offset(magic)) if magic <= LOG_MAGIC_V2 else -1


def _set_error(target: object, error: FlussError) -> None:
    target.error_code = error.code  # type: ignore[attr-defined]
    target.error_message = error.message  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class _Projection:
    arrow_schema: pa.Schema
    columns: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Evolution:
    """The table's current schema and its older ones: batches of an older schema reach clients
    rebuilt under the current one (strom.record.schema_evolution)."""

    schema_id: int
    schemas: dict[int, Schema]

    def batch(self, buf: bytes, pos: int, header: LogBatchHeader) -> tuple[bytes, int, LogBatchHeader]:
        """(buffer, position, header) of the batch at `pos` under the current schema."""
        if header.schema_id == self.schema_id:
            return buf, pos, header
        old = self.schemas.get(header.schema_id)
        if old is None:
            raise SchemaNotExistError(
                f"batch at offset {header.base_offset} has unknown schema id {header.schema_id}"
            )
        evolved = evolve_arrow_batch(buf, pos, header, old, self.schemas[self.schema_id], self.schema_id)
        return evolved, 0, read_header(evolved)


def _holds_older_schemas(remote: RemoteLog, offset: int, evolution: _Evolution) -> bool:
    segments = remote.covering(offset, max_segments=1)
    return bool(segments) and segments[0].needs_current_schema(evolution.schema_id)


_Index = tuple[int, int]  # (table index, bucket index) in a FetchLog request


@dataclass(frozen=True, slots=True)
class _RemoteRead:
    """Batches a fetch needs from a remote segment (blocking I/O, done in a thread)."""

    remote: RemoteLog
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class _TableRead:
    arrow_schema: pa.Schema
    projection: _Projection | None
    batch_filter: BatchFilter | None
    evolution: _Evolution | None = None


class LogService:
    def __init__(
        self,
        replicas: ReplicaManager,
        min_in_sync_replicas: int = 1,
        max_wait_seconds: float = 30.0,
        traffic: TabletMetrics | None = None,
    ) -> None:
        self.replicas = replicas
        self.traffic = traffic
        self.min_in_sync_replicas = min_in_sync_replicas
        self.max_wait_seconds = max_wait_seconds  # log.fetch.max-wait-time: no fetch holds longer
        # Set by the server: ask the coordinator for a table's current schema (by table id). A client
        # may know a column this server has not heard of yet (it was stopped through an AlterTable,
        # or the UpdateMetadata is still on its way).
        self.refresh_table: Callable[[int], Awaitable[None]] | None = None
        # table id -> the refresh a produce of a newer schema id started: later produces wait for the
        # same one, so they resume (and append) in the order they arrived
        self._schema_refreshes: dict[int, asyncio.Future[None]] = {}

    # ---- writes

    async def init_writer(self, request: pb.InitWriterRequest, ctx: RequestContext) -> pb.InitWriterResponse:
        # Random 62-bit ids are unique in practice without a round trip to the coordinator.
        return pb.InitWriterResponse(writer_id=secrets.randbits(62))

    async def produce_log(self, request: pb.ProduceLogRequest, ctx: RequestContext) -> pb.ProduceLogResponse:
        if request.acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be -1 (all), 0 or 1, got {request.acks}")
        response = pb.ProduceLogResponse()
        waits: list[tuple[pb.PbProduceLogRespForBucket, Replica, int]] = []
        syncs: list[tuple[pb.PbProduceLogRespForBucket, AppendResult]] = []
        views = _records_views(ctx.body, len(request.buckets_req))
        newest = max(
            (
                _first_log_schema_id(views[i] if views is not None else e.records)
                for i, e in enumerate(request.buckets_req)
            ),
            default=-1,
        )
        await self.learn_newer_schema(request.table_id, request.buckets_req, newest)
        for i, entry in enumerate(request.buckets_req):
            bucket = _bucket_of(request.table_id, entry)
            result = response.buckets_resp.add(bucket_id=entry.bucket_id)
            if entry.HasField("partition_id"):
                result.partition_id = entry.partition_id
            try:
                replica = self.replicas.writable_leader_replica(bucket)
                if replica.table_info.has_primary_key:
                    # its log is the changelog of the KV state: only PutKv may write it
                    raise InvalidTableError(
                        f"table '{replica.database}.{replica.table}' has a primary key: write it with "
                        "upserts (PutKv), not appends (ProduceLog)"
                    )
                # No await from the seal check to the append: a rescale's cut comes after every batch
                # that passed it (tablet/rescale_service.py).
                refuse_if_sealed(replica.table_info, "an append")
                tablet = replica.log_tablet()
                if request.acks == -1 and len(replica.isr) < self.min_in_sync_replicas:
                    raise NotEnoughReplicasError(
                        f"{bucket} has {len(replica.isr)} in-sync replica(s) {list(replica.isr)}, fewer than "
                        f"log.replica.min-in-sync-replicas-number = {self.min_in_sync_replicas}"
                    )
                # reading the field would copy the bytes out of the message (once per access)
                records = views[i] if views is not None else entry.records
                check_log_routing(replica, records)
                appended = tablet.append_as_leader(records, replica.batch_check())
                if self.traffic is not None:
                    self.traffic.produced(
                        replica.database, replica.table, len(records), appended.record_count
                    )
                replica.notify_appended()
                replica.maybe_advance_high_watermark()
                result.base_offset = appended.first_offset
                if appended.durable is not None:
                    syncs.append((result, appended))
                if request.acks == -1:
                    waits.append((result, replica, appended.last_offset + 1))
            except FlussError as e:
                if isinstance(e, CorruptRecordError):
                    log.warning("refused a produce batch for %s from %s: %s", bucket, ctx.peer, e.message)
                elif isinstance(e, StorageError):
                    self.replicas.storage_failed(self.replicas.replicas.get(bucket), e)
                _set_error(result, e)
        if waits:
            timeout = max(request.timeout_ms, 1) / 1000
            errors = await asyncio.gather(
                *(r.replication_error(end, timeout, "the append to") for _, r, end in waits)
            )
            for (result, _, _), error in zip(waits, errors, strict=True):
                if error is not None:
                    result.ClearField("base_offset")
                    _set_error(result, error)
        await acknowledge_when_durable(syncs, "base_offset")
        return response

    async def learn_newer_schema(self, table_id: int, entries: Iterable[Any], schema_id: int) -> None:
        """A writer sends batches of a schema id newer than this server knows: it missed the AlterTable's
        UpdateMetadata (the coordinator's connection to it broke under packet loss, and the coordinator
        does not send it again; found by the fault campaign's alter_one_way scenario). Ask the
        coordinator for the table's current schema before the batches are checked, rather than refuse
        them until a restart. An id the coordinator does not know either is refused as before."""
        if self.refresh_table is None or schema_id < 0:
            return
        for entry in entries:
            replica = self.replicas.replicas.get(_bucket_of(table_id, entry))
            if replica is None:
                continue
            if schema_id > replica.table_info.schema_id:
                try:
                    await asyncio.shield(self._schema_refresh(table_id))
                except FlussError as e:
                    log.info("could not learn schema %d of table %d: %s", schema_id, table_id, e)
            return

    def learn_schema_soon(self, table_id: int) -> None:
        """A follower got batches of a schema id it does not know (its leader heard of an AlterTable it
        missed): learn the table's schemas in the background; the fetcher retries after its backoff."""
        if self.refresh_table is not None:
            self._schema_refresh(table_id)

    def _schema_refresh(self, table_id: int) -> asyncio.Future[None]:
        """The one refresh of the table's schemas in flight, started if there is none."""
        assert self.refresh_table is not None
        refresh = self._schema_refreshes.get(table_id)
        if refresh is None:
            refresh = asyncio.ensure_future(self.refresh_table(table_id))
            self._schema_refreshes[table_id] = refresh

            def done(future: asyncio.Future[None]) -> None:
                self._schema_refreshes.pop(table_id, None)
                if not future.cancelled() and future.exception() is not None:
                    log.warning("learning the schemas of table %d failed: %s", table_id, future.exception())

            refresh.add_done_callback(done)
        return refresh

    # ---- reads

    def _table_read(self, replica: Replica, table_req: pb.PbFetchLogReqForTable) -> _TableRead:
        """Projection and filter of one table in a fetch, checked against the table's schema."""
        schema = replica.arrow_schema()
        projection: _Projection | None = None
        if table_req.projection_pushdown_enabled:
            columns = tuple(table_req.projected_fields)
            n = len(schema)
            if not columns or any(c < 0 or c >= n for c in columns) or list(columns) != sorted(set(columns)):
                raise InvalidColumnProjectionError(
                    f"projected fields {list(columns)} of table '{replica.database}.{replica.table}' must "
                    f"be distinct ascending column indexes in [0, {n})"
                )
            if columns != tuple(range(n)):
                projection = _Projection(schema, columns)
        batch_filter: BatchFilter | None = None
        if table_req.HasField("filter_predicate"):
            table_schema = replica.table_info.schema
            column_of_field = {c.column_id: i for i, c in enumerate(table_schema.columns)}
            column_types = {c.column_id: c.data_type for c in table_schema.columns}
            predicate = predicate_from_pb(table_req.filter_predicate, column_types)
            batch_filter = BatchFilter(predicate, column_of_field)
        evolution = None
        if len(replica.schema_history) > 1:
            schemas = {**replica.schema_history, replica.table_info.schema_id: replica.table_info.schema}
            evolution = _Evolution(replica.table_info.schema_id, schemas)
        return _TableRead(schema, projection, batch_filter, evolution)

    def _read_bucket(
        self,
        replica: Replica,
        fetch_offset: int,
        max_bytes: int,
        plan: _TableRead,
        result: pb.PbFetchLogRespForBucket,
        remote_batches: bytes | None = None,
    ) -> tuple[int, bytes] | _RemoteRead:
        """Fills one bucket's answer; returns the bytes scanned in the log (for min_bytes) and the
        records to send, or the remote read it needs first (`remote_batches`: its result)."""
        tablet = replica.log_tablet()
        earliest = earliest_offset(replica)
        if fetch_offset == EARLIEST_OFFSET:
            fetch_offset = earliest
        scanned = None
        if fetch_offset < tablet.log_start_offset and replica.remote is not None:
            if plan.evolution is not None and _holds_older_schemas(
                replica.remote, fetch_offset, plan.evolution
            ):
                # batches of an older schema in remote storage: rebuilt here as local ones are, after
                # a bounded read of the remote directory that the caller does in a thread
                if remote_batches is None:
                    return _RemoteRead(replica.remote, fetch_offset, max_bytes)
                scanned = remote_batches
            elif remote_fetch_info(
                replica.remote, fetch_offset, replica.partition_name, result.remote_log_fetch_info
            ):
                # tiered data: the client downloads these segments from remote storage itself
                result.high_watermark = tablet.high_watermark
                result.log_start_offset = earliest
                return sum(
                    s.segment_size_in_bytes for s in result.remote_log_fetch_info.remote_log_segments
                ), b""
        if scanned is None:
            fetched = tablet.read(fetch_offset, max_bytes, max_offset=tablet.high_watermark)
            result.high_watermark = fetched.high_watermark
            scanned = fetched.records
        else:
            result.high_watermark = tablet.high_watermark
        result.log_start_offset = earliest
        records = scanned
        if records and (
            plan.projection is not None or plan.batch_filter is not None or plan.evolution is not None
        ):
            kept: list[bytes] = []
            skipped = False
            scanned_end = fetch_offset
            by_stats = by_stats_bytes = 0
            current_schema = replica.table_info.schema_id
            for pos, header in iter_batches(records):
                scanned_end = header.next_offset
                buf = records
                if (
                    plan.batch_filter is not None
                    and header.has_statistics_field
                    and header.schema_id == current_schema  # positions are the current schema's
                    and not self._statistics_may_match(plan, records, pos, header)
                ):
                    # the statistics prove no row matches: no Arrow decoding at all
                    skipped = True
                    by_stats += 1
                    by_stats_bytes += header.size
                    continue
                if plan.evolution is not None:
                    buf, pos, header = plan.evolution.batch(records, pos, header)
                if plan.batch_filter is not None:
                    batch, _ = decode_arrow_batch(buf, pos, header, plan.arrow_schema)
                    if not plan.batch_filter.may_match(batch):
                        skipped = True
                        continue
                if plan.projection is not None:
                    kept.append(
                        project_arrow_batch(buf, pos, header, plan.arrow_schema, plan.projection.columns)
                    )
                else:
                    kept.append(buf[pos : pos + header.size])
            if skipped:
                # lets the client move past batches the filter pruned
                result.filtered_end_offset = scanned_end
            if by_stats and self.traffic is not None:
                self.traffic.skipped_by_statistics(replica.database, replica.table, by_stats, by_stats_bytes)
            records = b"".join(kept)
        return len(scanned), records

    @staticmethod
    def _statistics_may_match(plan: _TableRead, records: bytes, pos: int, header: LogBatchHeader) -> bool:
        """Whether a V1 or V2 batch's statistics leave room for a row matching the fetch's filter (stored
        batches were validated on append, so a block that fails to parse now only means: unsure)."""
        assert plan.batch_filter is not None
        try:
            start = records_offset(records, pos, header)
            stats = parse_statistics(
                records, pos + header.header_size, start, header.record_count, plan.arrow_schema
            )
        except CorruptRecordError:
            return True
        if stats is None:
            return True
        return statistics_may_match(
            plan.batch_filter.predicate,
            stats,
            plan.batch_filter.column_of_field,
            plan.arrow_schema,
            header.record_count,
        )

    def _read_for_follower(
        self,
        replica: Replica,
        follower: int,
        entry: pb.PbFetchLogReqForBucket,
        result: pb.PbFetchLogRespForBucket,
    ) -> tuple[int, bytes]:
        """A follower's fetch: its offset says how far it has the log; it reads up to the log end."""
        if follower not in replica.replicas:
            raise NotLeaderOrFollowerError(f"server {follower} is not a replica of {replica.bucket}")
        tablet = replica.log_tablet()
        replica.record_follower_fetch(follower, entry.fetch_offset)
        fetched = tablet.read(entry.fetch_offset, entry.max_fetch_bytes)
        result.high_watermark = tablet.high_watermark
        result.log_start_offset = tablet.log_start_offset
        return len(fetched.records), fetched.records

    async def fetch_log(self, request: pb.FetchLogRequest, ctx: RequestContext) -> EncodedResponse:
        asked = (request.max_wait_ms if request.HasField("max_wait_ms") else 0) / 1000
        max_wait = min(max(asked, 0.0), self.max_wait_seconds)
        min_bytes = request.min_bytes if request.HasField("min_bytes") else 1
        deadline = time.monotonic() + max_wait
        if request.follower_server_id < 0:
            await self._learn_projected_columns(request)
        remote: dict[tuple[int, int], bytes] = {}
        while True:
            response, records, total, waiting_on, wanted = self._fetch_once(request, remote)
            if wanted:
                # remote storage is read in a thread, never on the loop; then the fetch is answered
                # again with those batches (the rest of it from the log as it is by then)
                loop = asyncio.get_running_loop()
                for key, read in wanted.items():
                    remote[key] = await loop.run_in_executor(
                        None, read_remote_batches, read.remote, read.offset, read.max_bytes
                    )
                continue
            remaining = deadline - time.monotonic()
            if total >= min_bytes or remaining <= 0 or not waiting_on:
                if self.traffic is not None and total:
                    self.traffic.fetched(response, records, request.follower_server_id >= 0)
                return encode_fetch_response(response, records)
            # Long-poll: hold an empty fetch until data arrives or max_wait_ms passes, so clients do
            # not spin (the official client sends 500 ms and would otherwise loop thousands of times).
            waiter = asyncio.get_running_loop().create_future()
            for replica in waiting_on:
                replica.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                pass
            finally:
                for replica in waiting_on:
                    if waiter in replica.waiters:
                        replica.waiters.remove(waiter)

    async def _learn_projected_columns(self, request: pb.FetchLogRequest) -> None:
        """Projections naming a column beyond the schema this server knows: learn the table's current
        schema before the fetch is checked (it still fails if the column is not there either)."""
        if self.refresh_table is None:
            return
        for table_req in request.tables_req:
            if not table_req.projection_pushdown_enabled or not table_req.projected_fields:
                continue
            for entry in table_req.buckets_req:
                replica = self.replicas.replicas.get(_bucket_of(table_req.table_id, entry))
                if replica is not None:
                    if max(table_req.projected_fields) >= len(replica.arrow_schema()):
                        try:
                            await self.refresh_table(table_req.table_id)
                        except FlussError as e:
                            log.info("could not refresh the schema of table %d: %s", table_req.table_id, e)
                    break

    def _fetch_once(
        self, request: pb.FetchLogRequest, remote: dict[tuple[int, int], bytes]
    ) -> tuple[pb.FetchLogResponse, dict[_Index, bytes], int, list[Replica], dict[_Index, _RemoteRead]]:
        """The answer without record bytes, the record bytes by (table index, bucket index), the
        bytes scanned, the replicas that had nothing to give, and the remote reads (by the same
        index) that must happen before the answer can be given; `remote`: those already read."""
        response = pb.FetchLogResponse()
        records: dict[tuple[int, int], bytes] = {}
        total = 0
        budget = request.max_bytes if request.max_bytes > 0 else 16 * 1024 * 1024
        waiting_on: list[Replica] = []
        wanted: dict[tuple[int, int], _RemoteRead] = {}
        for t, table_req in enumerate(request.tables_req):
            table_resp = response.tables_resp.add(table_id=table_req.table_id)
            plan: _TableRead | None = None
            plan_error: FlussError | None = None
            for b, entry in enumerate(table_req.buckets_req):
                bucket = _bucket_of(table_req.table_id, entry)
                result = table_resp.buckets_resp.add(bucket_id=entry.bucket_id)
                if entry.HasField("partition_id"):
                    result.partition_id = entry.partition_id
                replica = None
                try:
                    replica = self.replicas.leader_replica(bucket)
                    if request.follower_server_id >= 0:
                        size, data = self._read_for_follower(
                            replica, request.follower_server_id, entry, result
                        )
                        if data:
                            records[(t, b)] = data
                        total += size
                        if size == 0:
                            waiting_on.append(replica)
                        continue
                    if plan is None and plan_error is None:
                        try:
                            plan = self._table_read(replica, table_req)
                        except FlussError as e:
                            plan_error = e
                    if plan_error is not None:
                        raise plan_error
                    assert plan is not None
                    read = self._read_bucket(
                        replica,
                        entry.fetch_offset,
                        min(entry.max_fetch_bytes, budget),
                        plan,
                        result,
                        remote.get((t, b)),
                    )
                    if isinstance(read, _RemoteRead):
                        wanted[(t, b)] = read
                        continue
                    size, data = read
                    if data:
                        records[(t, b)] = data
                    budget = max(0, budget - size)
                    total += size
                    if size == 0:
                        waiting_on.append(replica)
                except FlussError as e:
                    log.debug("fetch of %s failed: %s", bucket, e)
                    _set_error(result, e)
                    if replica is not None and replica.log is not None:
                        # a follower out of range needs to know where the leader's log starts
                        result.log_start_offset = replica.log.log_start_offset
                        result.high_watermark = replica.log.high_watermark
        return response, records, total, waiting_on, wanted

    async def list_offsets(
        self, request: pb.ListOffsetsRequest, ctx: RequestContext
    ) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        partition = request.partition_id if request.HasField("partition_id") else None
        for bucket_id in request.bucket_id:
            result = response.buckets_resp.add(bucket_id=bucket_id)
            try:
                replica = self.replicas.leader_replica(TableBucket(request.table_id, partition, bucket_id))
                tablet = replica.log_tablet()
                if request.offset_type == OFFSET_EARLIEST:
                    result.offset = earliest_offset(replica)
                elif request.offset_type == OFFSET_LATEST:
                    result.offset = tablet.high_watermark
                elif request.offset_type == OFFSET_TIMESTAMP:
                    if not request.HasField("startTimestamp"):
                        raise InvalidTimestampError("ListOffsets by timestamp needs a timestamp")
                    found = tablet.offset_for_timestamp(request.startTimestamp)
                    # No batch at or after the timestamp: the next offset to be written.
                    result.offset = (
                        min(found, tablet.high_watermark) if found is not None else tablet.high_watermark
                    )
                else:
                    raise InvalidTimestampError(f"unknown offset type {request.offset_type}")
            except FlussError as e:
                _set_error(result, e)
        return response

    async def limit_scan(self, request: pb.LimitScanRequest, ctx: RequestContext) -> pb.LimitScanResponse:
        partition = request.partition_id if request.HasField("partition_id") else None
        response = pb.LimitScanResponse(is_log_table=True)
        try:
            replica = self.replicas.leader_replica(
                TableBucket(request.table_id, partition, request.bucket_id)
            )
            tablet = replica.log_tablet()
            end = tablet.high_watermark
            start = max(tablet.log_start_offset, end - max(request.limit, 0))
            chunks: list[bytes] = []
            offset = start
            while offset < end:
                fetched = tablet.read(offset, 8 * 1024 * 1024, max_offset=end)
                if not fetched.records:
                    break
                chunks.append(fetched.records)
                last = None
                for _, header in iter_batches(fetched.records):
                    last = header
                assert last is not None
                offset = last.next_offset
            if chunks:
                response.records = b"".join(chunks)
        except FlussError as e:
            response.error_code = e.code
            response.error_message = e.message
        return response


def _records_views(body: bytes | bytearray, buckets: int) -> list[memoryview] | None:
    """Each bucket's records (ProduceLogRequest field 4, its field 3; the last one wins, as in
    protobuf) as views of the request body; None when the body is not at hand."""
    if not body:
        return None
    views = []
    for bucket in length_delimited(memoryview(body), 4):
        occurrences = list(length_delimited(bucket, 3))
        views.append(occurrences[-1] if occurrences else memoryview(b""))
    return views if len(views) == buckets else None


def wake(waiters: Iterable[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


async def acknowledge_when_durable(syncs: list[tuple[Any, AppendResult]], offset_field: str) -> None:
    """With log.flush.interval-messages: a write is answered once the fsync its append started is
    done (off the event loop); a failed fsync fails it."""
    for result, appended in syncs:
        try:
            await wait_durable(appended)
        except FlussError as e:
            if not result.HasField("error_code") or result.error_code == 0:
                result.ClearField(offset_field)
                _set_error(result, e)
