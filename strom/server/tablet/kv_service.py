"""The primary-key APIs of a tablet server: PutKv, Lookup, PrefixLookup, LimitScan and ScanKv on PK
tables.

PutKv merges each bucket's KvRecordBatch in the bucket's KV tablet and appends the resulting changelog
to the bucket's log (the write-ahead log of the KV state); RocksDB gets the rows once the changelog is
committed (the high watermark passes it), and acks=all answers after that, as ProduceLog does. Writes
of one bucket are serialized, so each merges against the previous one. Lookups read committed
rows only and return the stored bytes (`int16 schema id` + CompactedRow) unchanged.

The PutKvs of one connection append in the order they arrived, as Fluss's one request thread per
connection does: an idempotent writer pipelines up to five batches of a bucket, and a request that
waits for a KV tablet to open (a bucket just led again) must not be overtaken on another bucket by
the next request, or the writer's next batch sequence reaches the log first and is refused as out
of order, which the writer cannot retry.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pyarrow as pa

from strom.common.errors import (
    CorruptRecordError,
    FlussError,
    InvalidRequiredAcksError,
    InvalidScanRequestError,
    InvalidTableError,
    LakeStorageNotConfiguredError,
    NonPrimaryKeyTableError,
    NotEnoughReplicasError,
    StorageError,
    UnknownServerError,
    UnsupportedVersionError,
)
from strom.common.rescale import refuse_if_sealed, stale_routing, was_rescaled
from strom.common.table_bucket import TableBucket
from strom.record.columnar_keys import key_bytes_buckets
from strom.record.kv_batch import KV_SCHEMA_ID_OFFSET, KvRecordBatch, kv_record_count
from strom.record.value_batch import build_value_batch
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.server.tablet.historical_lookup import HistoricalLookup
from strom.server.tablet.kv.auto_increment import AllocateIds
from strom.server.tablet.kv.key_rows import KeyRows
from strom.server.tablet.kv.kv_manager import KvManager
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.scanners import ScannerManager, ScanPage
from strom.server.tablet.log.log_tablet import AppendResult
from strom.server.tablet.log_service import (
    LogService,
    acknowledge_when_durable,
    earliest_offset,
    first_schema_id,
)
from strom.server.tablet.replica_manager import Replica, ReplicaManager

log = logging.getLogger(__name__)

KV_FORMAT_VERSION_2 = 2


def _bucket_of(table_id: int, entry: object) -> TableBucket:
    partition = entry.partition_id if entry.HasField("partition_id") else None  # type: ignore[attr-defined]
    return TableBucket(table_id, partition, entry.bucket_id)  # type: ignore[attr-defined]


def _set_error(target: object, error: FlussError) -> None:
    target.error_code = error.code  # type: ignore[attr-defined]
    target.error_message = error.message  # type: ignore[attr-defined]


def _check_lookup_routing(replica: Replica, keys: list[bytes]) -> None:
    """After a rescale, a lookup routed by the old bucket count would miss its key silently: refuse
    it retriably instead (rescaled tables use the default bucket key, so the key bytes are hashed)."""
    info = replica.table_info
    refuse_if_sealed(info, "a lookup")
    if not keys or not was_rescaled(info.descriptor) or replica.bucket.bucket < 0:
        return
    buckets = key_bytes_buckets(pa.array(keys, pa.binary()), info.bucket_count, info.datalake_format)
    wrong = np.flatnonzero(buckets != replica.bucket.bucket)
    if len(wrong):
        raise stale_routing(info, replica.bucket.bucket, int(buckets[wrong[0]]))


def _unexpected(bucket: TableBucket, what: str, e: Exception) -> FlussError:
    log.exception("%s on %s failed", what, bucket)
    return UnknownServerError(f"{what} on {bucket} failed: {type(e).__name__}: {e}")


class KvService:
    def __init__(
        self,
        replicas: ReplicaManager,
        kv: KvManager,
        log_service: LogService | None = None,
        min_in_sync_replicas: int = 1,
        allocate_ids: AllocateIds | None = None,
        historical: HistoricalLookup | None = None,
        scanners: ScannerManager | None = None,
    ) -> None:
        self.replicas = replicas
        # ScanKv sessions (None: ScanKv is refused)
        self.scanners = scanners
        # lookups of expired partitions, read from the lake (None: refused)
        self.historical = historical
        # where auto-increment id ranges come from (the coordinator)
        self.allocate_ids = allocate_ids
        self.min_in_sync_replicas = min_in_sync_replicas
        self.kv = kv
        # LimitScan on log tables is the log service's
        self.log_service = log_service

    # ---- checks

    @staticmethod
    def _check_pk_table(replica: Replica, api_version: int) -> None:
        info = replica.table_info
        if not info.has_primary_key:
            raise NonPrimaryKeyTableError(
                f"table '{info.table_path}' has no primary key; use ProduceLog and FetchLog for log tables"
            )
        # Old clients encode bucket keys the old way: refuse tables that use the new key encoding.
        if (
            api_version == 0
            and info.datalake_format is not None
            and info.kv_format_version == KV_FORMAT_VERSION_2
            and not info.descriptor.is_default_bucket_key()
        ):
            raise UnsupportedVersionError(
                f"Client API version {api_version} is not supported for table '{info.table_path}'. This "
                f"table uses new key encoding strategy (kv format version {KV_FORMAT_VERSION_2}). Please "
                "upgrade your Fluss client to a newer version."
            )

    async def _leader_kv(self, bucket: TableBucket, api_version: int) -> tuple[Replica, KvTablet]:
        replica = self.replicas.leader_replica(bucket)
        self._check_pk_table(replica, api_version)
        return replica, await self.kv.leader_tablet(replica)

    # ---- writes

    async def put_kv(self, request: pb.PutKvRequest, ctx: RequestContext) -> pb.PutKvResponse:
        if request.acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be -1 (all), 0 or 1, got {request.acks}")
        target_columns = list(request.target_columns) or None
        response = pb.PutKvResponse()
        waits: list[tuple[pb.PbPutKvRespForBucket, Replica, int]] = []
        syncs: list[tuple[pb.PbPutKvRespForBucket, AppendResult]] = []
        # Taken before this handler's first await, so in arrival order; released before waiting for
        # the replicas, which need not keep the order.
        async with _append_order(ctx):
            if self.log_service is not None:  # a schema this server missed: learn it first
                newest = max(
                    (first_schema_id(e.records, KV_SCHEMA_ID_OFFSET) for e in request.buckets_req), default=-1
                )
                await self.log_service.learn_newer_schema(request.table_id, request.buckets_req, newest)
            for entry in request.buckets_req:
                bucket = _bucket_of(request.table_id, entry)
                result = response.buckets_resp.add(bucket_id=entry.bucket_id)
                if entry.HasField("partition_id"):
                    result.partition_id = entry.partition_id
                try:
                    self.replicas.writable_leader_replica(bucket)
                    replica, kv = await self._leader_kv(bucket, ctx.api_version)
                    if request.acks == -1 and len(replica.isr) < self.min_in_sync_replicas:
                        raise NotEnoughReplicasError(
                            f"{bucket} has {len(replica.isr)} in-sync replica(s) {list(replica.isr)}, "
                            "fewer than "
                            f"log.replica.min-in-sync-replicas-number = {self.min_in_sync_replicas}"
                        )
                    appended = await self._append(replica, kv, entry.records, target_columns)
                    traffic = self.log_service.traffic if self.log_service is not None else None
                    if traffic is not None:
                        records = kv_record_count(entry.records)
                        traffic.produced(replica.database, replica.table, len(entry.records), records)
                    end = appended.last_offset + 1
                    result.log_end_offset = end
                    if appended.durable is not None:
                        syncs.append((result, appended))
                    if request.acks == -1:
                        waits.append((result, replica, end))
                except FlussError as e:
                    if isinstance(e, CorruptRecordError):
                        log.warning("refused a PutKv batch for %s from %s: %s", bucket, ctx.peer, e.message)
                    elif isinstance(e, StorageError):
                        self.replicas.storage_failed(self.replicas.replicas.get(bucket), e)
                    _set_error(result, e)
                except Exception as e:
                    _set_error(result, _unexpected(bucket, "PutKv", e))
        if waits:
            timeout = max(request.timeout_ms, 1) / 1000
            errors = await asyncio.gather(
                *(replica.replication_error(end, timeout, "the changelog of") for _, replica, end in waits)
            )
            for (result, replica, _), error in zip(waits, errors, strict=True):
                self._flush_committed(replica)
                if error is not None:
                    result.ClearField("log_end_offset")
                    _set_error(result, error)
        await acknowledge_when_durable(syncs, "log_end_offset")
        return response

    async def _append(
        self,
        replica: Replica,
        kv: KvTablet,
        records: bytes,
        target_columns: list[int] | None,
        *,
        rescaling: bool = False,
    ) -> AppendResult:
        """Merge one bucket's KvRecordBatch and append its changelog (committed at once when alone).
        Only the rescale's own moves (`rescaling`) write to a sealed table."""
        async with self.kv.lock(replica.bucket):
            if not rescaling:
                # under the lock: a rescale's export takes it too, so no write lands behind it
                refuse_if_sealed(replica.table_info, "a write")
            await self._reserve_auto_increment_ids(kv, records)
            # No await from here: the merge, the append and the staging see one state.
            # A leader alone in the ISR commits on append: its writes go to RocksDB at once.
            alone = set(replica.isr) <= {self.replicas.server_id}
            appended = kv.put_as_leader(records, target_columns, commit=alone)
            replica.notify_appended()
            self._commit(replica)
        return appended

    async def _reserve_auto_increment_ids(self, kv: KvTablet, records: bytes) -> None:
        """Cache enough auto-increment ids for every record of the batch to create a key."""
        if kv.auto_increment is None:
            return
        if self.allocate_ids is None:
            raise UnknownServerError("this tablet server cannot allocate auto-increment ids")
        # The header's record count is the client's word: count the records of a batch that checks out
        # (prepare_put refuses any other, before it draws an id).
        batch = KvRecordBatch.parse(records)
        if batch.crc_is_valid():
            await kv.auto_increment.reserve(len(batch.records), self.allocate_ids)

    def _commit(self, replica: Replica) -> None:
        """Advance the high watermark as far as the ISR allows, and bring RocksDB up to it."""
        replica.maybe_advance_high_watermark()
        self._flush_committed(replica)

    def _flush_committed(self, replica: Replica) -> None:
        # Normally the replica clamps its high watermark with KvManager.flush_to_high_watermark, so
        # this finds nothing to do; it keeps lookups current if that hook is not wired.
        if replica.log is not None:
            self.kv.flush_to_high_watermark(replica, replica.log.high_watermark)

    # ---- reads

    async def lookup(self, request: pb.LookupRequest, ctx: RequestContext) -> pb.LookupResponse:
        response = pb.LookupResponse()
        for entry in request.buckets_req:
            bucket = _bucket_of(request.table_id, entry)
            result = response.buckets_resp.add(bucket_id=entry.bucket_id)
            if entry.HasField("partition_id"):
                result.partition_id = entry.partition_id
            if entry.HasField("original_partition_name"):
                result.original_partition_name = entry.original_partition_name
            try:
                replica, kv = await self._leader_kv(bucket, ctx.api_version)
                _check_lookup_routing(replica, list(entry.keys))
                if entry.HasField("original_partition_name"):
                    await self._historical_values(request, replica, entry, result)
                    continue
                values = kv.multi_get(list(entry.keys))
                if request.insert_if_not_exists and None in values:
                    values = await self._insert_missing(replica, kv, list(entry.keys), values, request)
                add = result.values.add
                for value in values:
                    if value is None:
                        add()  # an empty PbValue: not found
                    else:
                        add(values=value)
            except FlussError as e:
                del result.values[:]
                _set_error(result, e)
            except Exception as e:
                del result.values[:]
                _set_error(result, _unexpected(bucket, "Lookup", e))
        return response

    async def _historical_values(
        self,
        request: pb.LookupRequest,
        replica: Replica,
        entry: pb.PbLookupReqForBucket,
        result: pb.PbLookupRespForBucket,
    ) -> None:
        """A lookup of an expired partition, sent to the `__historical__` bucket: read from the lake."""
        if request.insert_if_not_exists:
            raise InvalidTableError(
                f"insert_if_not_exists is not supported for lookups of the expired partition "
                f"'{entry.original_partition_name}' of {replica.table_info.table_path}"
            )
        if self.historical is None:
            raise LakeStorageNotConfiguredError("this tablet server has no lake to answer historical lookups")
        values = await self.historical.lookup(
            replica.table_info,
            replica.partition_name,
            entry.bucket_id,
            entry.original_partition_name,
            list(entry.keys),
        )
        add = result.values.add
        for value in values:
            if value is None:
                add()
            else:
                add(values=value)

    async def _insert_missing(
        self,
        replica: Replica,
        kv: KvTablet,
        keys: list[bytes],
        values: list[bytes | None],
        request: pb.LookupRequest,
    ) -> list[bytes | None]:
        """Lookup's insert_if_not_exists, as Fluss: insert the missing keys as a partial update of the
        primary key (auto-increment filled; a key another writer inserted meanwhile is left as it is),
        wait for the acks, and look them up again."""
        acks = request.acks if request.HasField("acks") else -1
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be -1 (all), 0 or 1, got {acks}")
        rows = KeyRows(replica.table_info)
        missing = [key for key, value in zip(keys, values, strict=True) if value is None]
        appended = await self._append(replica, kv, rows.batch(missing), rows.target_columns)
        # Lookups read committed rows: the inserted rows are answered once the in-sync replicas have them,
        # whatever the acks.
        timeout = max(request.timeout_ms if request.HasField("timeout_ms") else 30_000, 1) / 1000
        end = appended.last_offset + 1
        error = await replica.replication_error(end, timeout, "the inserted keys of")
        if error is not None:
            raise error
        self._flush_committed(replica)
        inserted = dict(zip(missing, kv.multi_get(missing), strict=True))
        return [inserted[key] if value is None else value for key, value in zip(keys, values, strict=True)]

    async def prefix_lookup(
        self, request: pb.PrefixLookupRequest, ctx: RequestContext
    ) -> pb.PrefixLookupResponse:
        response = pb.PrefixLookupResponse()
        for entry in request.buckets_req:
            bucket = _bucket_of(request.table_id, entry)
            result = response.buckets_resp.add(bucket_id=entry.bucket_id)
            if entry.HasField("partition_id"):
                result.partition_id = entry.partition_id
            try:
                replica, kv = await self._leader_kv(bucket, ctx.api_version)
                refuse_if_sealed(replica.table_info, "a prefix lookup")
                for values in kv.prefix_lookup(list(entry.keys)):
                    result.value_lists.add(values=values)
            except FlussError as e:
                del result.value_lists[:]
                _set_error(result, e)
            except Exception as e:
                del result.value_lists[:]
                _set_error(result, _unexpected(bucket, "PrefixLookup", e))
        return response

    async def get_table_stats(
        self, request: pb.GetTableStatsRequest, ctx: RequestContext
    ) -> pb.GetTableStatsResponse:
        """GetTableStats (Fluss 1.0) for the buckets this server leads: a primary-key table's live
        keys (the KV tablet's row count), a log table's records from the earliest readable offset
        (remote storage included) to the high watermark. Errors are per bucket."""
        response = pb.GetTableStatsResponse()
        for entry in request.buckets_req:
            partition = entry.partition_id if entry.HasField("partition_id") else None
            bucket = TableBucket(request.table_id, partition, entry.bucket_id)
            result = response.buckets_resp.add(bucket_id=entry.bucket_id)
            if partition is not None:
                result.partition_id = partition
            try:
                replica = self.replicas.leader_replica(bucket)
                if replica.table_info.has_primary_key:
                    _, kv = await self._leader_kv(bucket, ctx.api_version)
                    if kv.row_count is None:
                        raise InvalidTableError(
                            f"Row count is disabled for table '{replica.table_info.table_path}': its "
                            "changelog image is WAL, which does not keep it. Set "
                            "'table.changelog.image' to FULL to have it."
                        )
                    result.row_count = kv.row_count
                else:
                    result.row_count = replica.log_tablet().high_watermark - earliest_offset(replica)
            except FlussError as e:
                _set_error(result, e)
            except Exception as e:
                _set_error(result, _unexpected(bucket, "GetTableStats", e))
        return response

    async def limit_scan(self, request: pb.LimitScanRequest, ctx: RequestContext) -> pb.LimitScanResponse:
        """LimitScan for every table: PK tables here (one ValueRecordBatch), log tables in LogService."""
        partition = request.partition_id if request.HasField("partition_id") else None
        bucket = TableBucket(request.table_id, partition, request.bucket_id)
        response = pb.LimitScanResponse(is_log_table=False)
        try:
            replica = self.replicas.leader_replica(bucket)
            if not replica.table_info.has_primary_key:
                if self.log_service is None:
                    raise NonPrimaryKeyTableError(
                        f"table '{replica.table_info.table_path}' has no primary key"
                    )
                return await self.log_service.limit_scan(request, ctx)
            _, kv = await self._leader_kv(bucket, ctx.api_version)
            response.records = build_value_batch(kv.limit_scan(request.limit))
        except FlussError as e:
            _set_error(response, e)
        except Exception as e:
            _set_error(response, _unexpected(bucket, "LimitScan", e))
        return response

    async def scan_kv(self, request: pb.ScanKvRequest, ctx: RequestContext) -> pb.ScanKvResponse:
        """ScanKv (1061): a page of a consistent full scan of a primary-key bucket (scanners.py)."""
        response = pb.ScanKvResponse()
        try:
            page = await self._scan_page(request, ctx)
        except FlussError as e:
            _set_error(response, e)
            return response
        except Exception as e:
            log.exception("ScanKv failed")
            _set_error(response, UnknownServerError(f"ScanKv failed: {type(e).__name__}: {e}"))
            return response
        if page.scanner_id is not None:
            response.scanner_id = page.scanner_id
        response.has_more_results = page.has_more
        if page.values:
            response.records = build_value_batch(page.values)
        if page.log_offset is not None:
            response.log_offset = page.log_offset
        return response

    async def _scan_page(self, request: pb.ScanKvRequest, ctx: RequestContext) -> ScanPage:
        scanners = self.scanners
        if scanners is None:
            raise InvalidScanRequestError("ScanKv is not enabled on this tablet server")
        opening = request.HasField("bucket_scan_req")
        continuing = request.HasField("scanner_id")
        closing = request.HasField("close_scanner") and request.close_scanner
        # the request's shape first, as Fluss: a malformed request never opens a snapshot
        if opening and continuing:
            raise InvalidScanRequestError("ScanKvRequest must not set both bucket_scan_req and scanner_id.")
        if opening and closing:
            raise InvalidScanRequestError(
                "ScanKvRequest must not set close_scanner together with bucket_scan_req."
            )
        if not opening and not continuing:
            raise InvalidScanRequestError(
                "ScanKvRequest must have either bucket_scan_req (new scan) or scanner_id (continuation)."
            )
        if closing:
            scanners.close(request.scanner_id, ctx.session.principal)
            return ScanPage(request.scanner_id, [], False, None)
        if not request.HasField("batch_size_bytes"):
            raise InvalidScanRequestError("batch_size_bytes is required for data-fetching scan requests.")
        if request.batch_size_bytes <= 0:
            raise InvalidScanRequestError("batch_size_bytes must be greater than 0.")
        if not request.HasField("call_seq_id"):
            raise InvalidScanRequestError(
                "call_seq_id is required for ScanKV requests to ensure in-order processing."
            )
        if continuing:
            scanner_bucket = scanners.bucket_of(request.scanner_id)
            is_leader = scanner_bucket is None or self._leads(scanner_bucket)
            return await scanners.continue_scan(
                request.scanner_id,
                request.batch_size_bytes,
                request.call_seq_id,
                is_leader,
                ctx.session.principal,
            )
        req = request.bucket_scan_req
        bucket = TableBucket(
            req.table_id, req.partition_id if req.HasField("partition_id") else None, req.bucket_id
        )
        _, kv = await self._leader_kv(bucket, ctx.api_version)
        limit = req.limit if req.HasField("limit") else None
        return await scanners.open(
            bucket, kv, limit, request.batch_size_bytes, request.call_seq_id, ctx.session.principal
        )

    def _leads(self, bucket: TableBucket) -> bool:
        try:
            self.replicas.leader_replica(bucket)
        except FlussError:
            return False
        return True


def _append_order(ctx: RequestContext) -> asyncio.Lock:
    """The lock that keeps the PutKv appends of one connection in arrival order (FIFO)."""
    lock = ctx.session.attributes.get("kv_append_order")
    if lock is None:
        lock = ctx.session.attributes["kv_append_order"] = asyncio.Lock()
    return lock
