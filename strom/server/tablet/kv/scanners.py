"""ScanKv (Fluss 1.0, 1061): paged, consistent full scans of a primary-key bucket.

The first request (`bucket_scan_req`) opens a scanner on the bucket leader's KV tablet: a RocksDB
snapshot (KvTablet.open_scan) and the changelog offset it covers, answered as `log_offset`, so a
reader can go on from the changelog without gaps or duplicates. The answer carries an opaque
`scanner_id`; every next request names it, with `call_seq_id` one above the previous one (a retry of
the same number is refused, as in Fluss, rather than silently skipping a page). Each answer holds at
least one row and then rows up to min(`batch_size_bytes`, `kv.scanner.max-batch-size`) as one
ValueRecordBatch. The reads run on an executor thread, one at a time per scanner.

A scanner ends when its last row is sent, when the client closes it, when its bucket's tablet
closes (leadership moved: the next request gets NOT_LEADER_OR_FOLLOWER) or after `kv.scanner.ttl`
without a request; an expired one is answered SCANNER_EXPIRED for a while, then UNKNOWN_SCANNER_ID.
At most `kv.scanner.max-per-bucket` and `kv.scanner.max-per-server` scanners are open at once
(TOO_MANY_SCANNERS beyond).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import (
    InvalidConfigError,
    InvalidScanRequestError,
    KvStorageError,
    NotLeaderOrFollowerError,
    ScannerExpiredError,
    TooManyScannersError,
    UnknownScannerIdError,
)
from strom.common.table_bucket import TableBucket
from strom.server.tablet.kv.kv_tablet import KvScan, KvTablet

__all__ = ["ScanPage", "ScannerManager"]

log = logging.getLogger(__name__)

# how many expired scanner ids are remembered, to answer SCANNER_EXPIRED rather than UNKNOWN_SCANNER_ID
_REMEMBERED_EXPIRED = 1000


@dataclass(slots=True, eq=False)
class _Scanner:
    scanner_id: bytes
    bucket: TableBucket
    tablet: KvTablet
    scan: KvScan
    remaining: int | None  # rows still allowed by the request's limit
    last_access: float
    owner: object  # the principal that opened it: no one else may read on
    call_seq_id: int = -1
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True, slots=True)
class ScanPage:
    scanner_id: bytes | None  # None: nothing was opened (an empty bucket)
    values: list[bytes]
    has_more: bool
    log_offset: int | None  # set on the answer that opened the scan


class ScannerManager:
    def __init__(self, config: Configuration) -> None:
        self.ttl_s = config.get(options.KV_SCANNER_TTL).total_seconds()
        self.check_interval_s = config.get(options.KV_SCANNER_EXPIRATION_INTERVAL).total_seconds()
        self.max_per_bucket = config.get(options.KV_SCANNER_MAX_PER_BUCKET)
        self.max_per_server = config.get(options.KV_SCANNER_MAX_PER_SERVER)
        self.max_batch_bytes = int(config.get(options.KV_SCANNER_MAX_BATCH_SIZE))
        for name, value in (
            (options.KV_SCANNER_MAX_PER_BUCKET.key, self.max_per_bucket),
            (options.KV_SCANNER_MAX_PER_SERVER.key, self.max_per_server),
            (options.KV_SCANNER_MAX_BATCH_SIZE.key, self.max_batch_bytes),
        ):
            if value < 1:
                raise InvalidConfigError(f"{name} must be at least 1, not {value}")
        if self.ttl_s <= 0 or self.check_interval_s <= 0:
            raise InvalidConfigError(
                f"{options.KV_SCANNER_TTL.key} and {options.KV_SCANNER_EXPIRATION_INTERVAL.key} "
                "must be positive"
            )
        self._scanners: dict[bytes, _Scanner] = {}
        self._expired: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._scanners)

    # ---- requests

    async def open(
        self,
        bucket: TableBucket,
        tablet: KvTablet,
        limit: int | None,
        batch_bytes: int,
        call_seq_id: int,
        owner: object = None,
    ) -> ScanPage:
        """A new scan of `tablet`, answered with its first page."""
        if limit is not None and limit <= 0:
            raise InvalidScanRequestError(f"limit must be positive, not {limit}")
        if call_seq_id != 0:
            raise InvalidScanRequestError(
                f"Out-of-order scan request: expected callSeqId=0 but got {call_seq_id}."
            )
        if len(self._scanners) >= self.max_per_server:
            raise TooManyScannersError(
                f"This tablet server has {len(self._scanners)} open scanners "
                f"({options.KV_SCANNER_MAX_PER_SERVER.key} = {self.max_per_server})."
            )
        on_bucket = sum(1 for s in self._scanners.values() if s.bucket == bucket)
        if on_bucket >= self.max_per_bucket:
            raise TooManyScannersError(
                f"Bucket {bucket} has {on_bucket} open scanners "
                f"({options.KV_SCANNER_MAX_PER_BUCKET.key} = {self.max_per_bucket})."
            )
        scan = tablet.open_scan()
        scanner = _Scanner(os.urandom(16), bucket, tablet, scan, limit, time.monotonic(), owner)
        self._scanners[scanner.scanner_id] = scanner
        try:
            page = await self._next(scanner, batch_bytes, 0)
        except BaseException:
            self._drop(scanner)
            raise
        if not page.has_more and not page.values:
            return ScanPage(None, [], False, scan.log_offset)  # an empty bucket: no session, as Fluss
        return ScanPage(page.scanner_id, page.values, page.has_more, scan.log_offset)

    async def continue_scan(
        self, scanner_id: bytes, batch_bytes: int, call_seq_id: int, is_leader: bool, owner: object = None
    ) -> ScanPage:
        scanner = self._find(scanner_id, owner)
        if scanner.busy.locked():
            raise InvalidScanRequestError(
                f"Concurrent scan request on scanner ID for bucket {scanner.bucket}; only one in-flight "
                "ScanKv request per scanner is allowed."
            )
        if call_seq_id != scanner.call_seq_id + 1:
            raise InvalidScanRequestError(
                f"Out-of-order scan request: expected callSeqId={scanner.call_seq_id + 1} but got "
                f"{call_seq_id}."
            )
        if not is_leader or scanner.tablet.closed:
            self._drop(scanner)
            raise NotLeaderOrFollowerError(
                f"Leader is no longer local for bucket {scanner.bucket}; restart the scan against the "
                "new leader."
            )
        return await self._next(scanner, batch_bytes, call_seq_id)

    def bucket_of(self, scanner_id: bytes) -> TableBucket | None:
        scanner = self._scanners.get(scanner_id)
        return None if scanner is None else scanner.bucket

    def close(self, scanner_id: bytes, owner: object = None) -> None:
        """The client is done: release the scanner (an unknown id is fine, as in Fluss)."""
        scanner = self._scanners.get(scanner_id)
        if scanner is not None and scanner.owner == owner:
            self._drop(scanner)

    def _find(self, scanner_id: bytes, owner: object) -> _Scanner:
        scanner = self._scanners.get(scanner_id)
        if scanner is not None and scanner.owner == owner:
            return scanner
        if scanner_id in self._expired:
            raise ScannerExpiredError(
                "Scanner session has expired due to inactivity "
                f"({options.KV_SCANNER_TTL.key} = {self.ttl_s:g} s). Please start a new scan."
            )
        raise UnknownScannerIdError("Unknown scanner ID. The session may have expired or never existed.")

    async def _next(self, scanner: _Scanner, batch_bytes: int, call_seq_id: int) -> ScanPage:
        batch_bytes = min(batch_bytes, self.max_batch_bytes)
        async with scanner.busy:
            scanner.last_access = time.monotonic()
            try:
                values, has_more = await asyncio.get_running_loop().run_in_executor(
                    None, scanner.tablet.read_scan, scanner.scan, batch_bytes, scanner.remaining
                )
            except KvStorageError:
                self._scanners.pop(scanner.scanner_id, None)
                scanner.tablet.close_scan(scanner.scan)
                if scanner.tablet.closed:
                    raise NotLeaderOrFollowerError(
                        f"The kv tablet of bucket {scanner.bucket} closed during the scan (leadership "
                        "moved); restart the scan against the new leader."
                    ) from None
                raise
            finally:
                if scanner.scanner_id not in self._scanners:  # closed or expired during the read
                    scanner.tablet.close_scan(scanner.scan)
            scanner.call_seq_id = call_seq_id
            scanner.last_access = time.monotonic()
            if scanner.remaining is not None:
                scanner.remaining -= len(values)
        if not has_more:
            self._drop(scanner)
        return ScanPage(scanner.scanner_id, values, has_more, None)

    def _drop(self, scanner: _Scanner) -> None:
        self._scanners.pop(scanner.scanner_id, None)
        if not scanner.busy.locked():
            scanner.tablet.close_scan(scanner.scan)
        # else a read runs on an executor thread: `_next` releases the scan when it returns

    # ---- expiry

    def expire_idle(self, now: float | None = None) -> int:
        """Close the scanners idle for longer than the TTL; returns how many."""
        now = time.monotonic() if now is None else now
        idle = [
            s for s in self._scanners.values() if now - s.last_access > self.ttl_s and not s.busy.locked()
        ]
        for scanner in [s for s in self._scanners.values() if s.tablet.closed and not s.busy.locked()]:
            self._drop(scanner)  # its tablet closed (leadership moved): the snapshot is gone already
        for scanner in idle:
            self._drop(scanner)
            self._expired[scanner.scanner_id] = None
            while len(self._expired) > _REMEMBERED_EXPIRED:
                self._expired.popitem(last=False)
        if idle:
            log.info("closed %d idle kv scanner(s) (%s)", len(idle), options.KV_SCANNER_TTL.key)
        return len(idle)

    async def run_expiry(self) -> None:
        """The supervised loop that closes idle scanners every `kv.scanner.expiration-interval`."""
        while True:
            await asyncio.sleep(self.check_interval_s)
            self.expire_idle()

    def close_all(self) -> None:
        for scanner in list(self._scanners.values()):
            self._drop(scanner)
