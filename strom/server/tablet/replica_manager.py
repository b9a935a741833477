"""The replicas a tablet server hosts, and the leadership the coordinator gives it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from strom.common.config import LogFormat
from strom.common.errors import (
    FencedLeaderEpochError,
    FlussError,
    LogStorageError,
    NotLeaderOrFollowerError,
    RequestTimeoutError,
    UnknownTableOrBucketError,
)
from strom.common.schema import Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.record.batch_validation import BatchCheck, log_batch_check
from strom.server.tablet.data_dirs import DataDir, DataDirs, OfflineDirError, is_disk_failure
from strom.server.tablet.durable_file import write_file_durably
from strom.server.tablet.log.leader_epoch import EpochEntry
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import LogTablet
from strom.server.tablet.replica_opener import ReplicaOpener, fsync_all

log = logging.getLogger(__name__)


@dataclass
class FollowerState:
    """What a leader knows about one follower, from its fetches."""

    log_end_offset: int = -1
    last_caught_up: float = field(default_factory=time.monotonic)


@dataclass
class Replica:
    """One bucket replica on this server: its leadership and its storage (the log tablet, and for
    primary-key tables the KV tablet)."""

    bucket: TableBucket
    database: str
    table: str
    partition_name: str | None
    directory: Path
    table_info: TableInfo
    log: LogTablet | None = None
    # the data directory (one of `data.dirs`) this replica's files lie in
    data_root: Path | None = None
    leader: int | None = None
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    bucket_epoch: int = 0
    # the part of the log copied to remote storage (strom.server.tablet.remote_log.RemoteLog), once loaded
    remote: Any = None
    # how far the lake reaches in this bucket's log (NotifyLakeTableOffset), -1 when not tiered
    lake_log_end_offset: int = -1
    # (segments, bytes) past their TTL kept because the lake lacks them, from the last retention pass
    held_local: tuple[int, int] = (0, 0)
    held_remote: tuple[int, int] = (0, 0)
    # futures of long-polling fetches waiting for this bucket's next append
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    # this server's id; leader-side replication state follows
    local_id: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # (offset, future) pairs of acks=all writes waiting for the high watermark to reach offset
    hw_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    # limits a candidate high watermark to what dependent state (RocksDB of a PK table) already holds
    hw_clamp: Callable[[int], int] | None = None
    # follower side of a new leader term: truncate by leader epoch (OffsetForLeaderEpoch) before fetching
    needs_truncation: bool = False
    # the leader's epoch entries not yet covered by this follower's log (copied as the data arrives)
    pending_epochs: list[EpochEntry] = field(default_factory=list)
    # every schema of the table by id (shared by its replicas), so batches of writers still on an
    # older schema are checked against the schema they were written with
    schema_history: dict[int, Schema] = field(default_factory=dict)
    _arrow_schema: pa.Schema | None = None
    _batch_check: BatchCheck | None = None
    # (table info, bucketer, Arrow schema) of a rescaled log table (tablet/rescale_routing.py)
    rescale_routing: tuple[Any, Any, pa.Schema] | None = None

    def is_leader(self, server_id: int) -> bool:
        return self.leader == server_id

    # ---- leader side of replication

    def record_follower_fetch(self, follower: int, fetch_offset: int) -> None:
        """A follower fetching from `fetch_offset` has everything below it."""
        state = self.followers.setdefault(follower, FollowerState())
        state.log_end_offset = fetch_offset
        if fetch_offset >= self.log_tablet().log_end_offset:
            state.last_caught_up = time.monotonic()
        self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> None:
        """High watermark = the smallest log end among in-sync replicas (the leader included)."""
        tablet = self.log_tablet()
        candidate = tablet.log_end_offset
        for member in self.isr:
            if member != self.local_id:
                state = self.followers.get(member)
                candidate = min(candidate, state.log_end_offset if state is not None else -1)
        if self.hw_clamp is not None and candidate > tablet.high_watermark:
            candidate = self.hw_clamp(candidate)
        if candidate > tablet.high_watermark:
            tablet.update_high_watermark(candidate)
            ready = [w for w in self.hw_waiters if w[0] <= candidate]
            self.hw_waiters = [w for w in self.hw_waiters if w[0] > candidate]
            for _, waiter in ready:
                if not waiter.done():
                    waiter.set_result(None)
            self.notify_appended()  # clients long-poll on the high watermark, not the log end

    async def wait_for_high_watermark(self, offset: int, timeout: float) -> bool:
        """Until the high watermark reaches `offset` (acks=all); False on timeout. Raises
        NotLeaderOrFollowerError when this replica stops leading first (see `give_up_leadership`)."""
        if self.log_tablet().high_watermark >= offset:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.hw_waiters.append((offset, waiter))
        try:
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            return False

    async def replication_error(self, offset: int, timeout: float, what: str) -> FlussError | None:
        """None once the in-sync replicas have everything below `offset` (acks=all); otherwise the
        error the writer gets: NOT_LEADER_OR_FOLLOWER when this replica stopped leading meanwhile, or a
        request timeout naming `what` was written."""
        try:
            if await self.wait_for_high_watermark(offset, timeout):
                return None
        except NotLeaderOrFollowerError as e:
            return e
        return RequestTimeoutError(
            f"{what} {self.bucket} (up to offset {offset}) was not replicated to the in-sync replicas "
            f"{list(self.isr)} within {timeout:.1f}s"
        )

    def give_up_leadership(self, why: str) -> None:
        """Fail the acks=all writes still waiting here: a follower's high watermark follows another
        leader, so they would only time out. Answered NOT_LEADER_OR_FOLLOWER at once, the writer
        refreshes its metadata and retries on the new leader (Kafka completes its delayed produces
        the same way)."""
        waiters, self.hw_waiters = self.hw_waiters, []
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(NotLeaderOrFollowerError(f"{self.bucket} {why}"))

    def apply_isr_change(self, isr: tuple[int, ...], leader_epoch: int, bucket_epoch: int) -> bool:
        """Take an ISR the coordinator accepted, unless newer state already arrived: the answer to an
        AdjustIsr can be overtaken by a NotifyLeaderAndIsr (a reassignment, a new leader) sent after
        the coordinator accepted it, and an older ISR must not overwrite it — it may name a replica
        that was removed since, and acks=all writes would wait for that replica forever."""
        if leader_epoch != self.leader_epoch or bucket_epoch <= self.bucket_epoch:
            return False
        self.isr = isr
        self.bucket_epoch = bucket_epoch
        self.maybe_advance_high_watermark()
        return True

    def isr_change(self, max_lag: float) -> tuple[int, ...] | None:
        """The ISR this leader should propose: laggards out, caught-up followers in (or None)."""
        tablet = self.log_tablet()
        now = time.monotonic()
        isr = set(self.isr)
        for member in list(isr):
            if member == self.local_id:
                continue
            state = self.followers.get(member)
            if state is None or now - state.last_caught_up > max_lag:
                isr.discard(member)
        for follower, state in self.followers.items():
            if (
                follower in self.replicas
                and follower not in isr
                and state.log_end_offset >= tablet.high_watermark
                and now - state.last_caught_up <= max_lag
            ):
                isr.add(follower)
        isr.add(self.local_id)
        new = tuple(r for r in self.replicas if r in isr)
        return None if set(new) == set(self.isr) else new

    def adopt_leader_epochs(self) -> None:
        """Copy the leader's epoch entries whose first offset this follower's log now holds."""
        tablet = self.log_tablet()
        while self.pending_epochs and self.pending_epochs[0].start_offset < tablet.log_end_offset:
            entry = self.pending_epochs.pop(0)
            tablet.leader_epochs.assign(entry.epoch, entry.start_offset)

    def log_tablet(self) -> LogTablet:
        if self.log is None:
            raise LogStorageError(f"the log of {self.bucket} is not open on this server")
        return self.log

    def arrow_schema(self) -> pa.Schema:
        if self._arrow_schema is None:
            self._arrow_schema = self.table_info.schema.to_arrow_schema()
        return self._arrow_schema

    def batch_check(self) -> BatchCheck:
        """How this table's batches are checked before its log takes them (`batch_validation`): what
        a client produces and what a follower copies from its leader."""
        if self._batch_check is None:
            info = self.table_info
            current = info.schema_id
            arrow_by_id: dict[int, pa.Schema] = {}

            def arrow_schema_of(schema_id: int) -> pa.Schema | None:
                if schema_id == current:
                    return self.arrow_schema()
                if schema_id not in arrow_by_id and schema_id in self.schema_history:
                    arrow_by_id[schema_id] = self.schema_history[schema_id].to_arrow_schema()
                return arrow_by_id.get(schema_id)

            self._batch_check = log_batch_check(
                arrow_schema_of,
                # a primary-key table's changelog is always ARROW (the KV tablet builds it)
                arrow=info.log_format is LogFormat.ARROW or info.has_primary_key,
                table=f"{self.database}.{self.table}",
            )
        return self._batch_check

    def table_altered(self, info: TableInfo) -> None:
        """AlterTable changed the table's options or schema: checks are rebuilt for the new one."""
        self.table_info = info
        self._arrow_schema = None
        self._batch_check = None

    def notify_appended(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def release(self) -> None:
        """Close without making the log durable (no fsyncs): its files are about to be deleted."""
        if self.log is not None:
            self.log.release()
            self.log = None


def replica_directory(
    data_dir: Path, database: str, table: str, bucket: TableBucket, partition_name: str | None
) -> Path:
    """`<data>/<db>/<table>-<table_id>[/<partition>-p<partition_id>]/bucket-<n>`: readable by a human,
    unique by ids (a re-created table with the same name gets a new directory).

    Names come from requests, so each must be one plain path component, and the result must stay
    inside `data_dir` (LogStorageError otherwise): a replica is never created anywhere else."""
    for what, name in (("database", database), ("table", table), ("partition", partition_name)):
        if name is not None and not _is_plain_component(name):
            raise LogStorageError(f"{what} name {name!r} cannot name a directory of {bucket}")
    path = data_dir / database / f"{table}-{bucket.table_id}"
    if bucket.partition_id is not None:
        path = path / f"{partition_name}-p{bucket.partition_id}"
    path = path / f"bucket-{bucket.bucket}"
    if not path.resolve().is_relative_to(data_dir.resolve()):
        raise LogStorageError(f"the directory of {bucket} would lie outside {data_dir}")
    return path


def _ensure_replica_meta(
    path: Path,
    bucket: TableBucket,
    database: str,
    table: str,
    partition_name: str | None,
    sync_later: list[Path] | None = None,
) -> None:
    """Write the replica's identity file unless a readable one is there. It is written durably, and
    an unreadable one (a power cut before an older, unsynced write reached the disk leaves it empty)
    counts as absent, so it is rewritten rather than kept broken forever. `sync_later`: written
    without syncing, the file and its directory are added there for the caller to sync."""
    try:
        if isinstance(json.loads(path.read_bytes()), dict):
            return
    except (OSError, ValueError):
        pass
    body = {
        "table_id": bucket.table_id,
        "partition_id": bucket.partition_id,
        "bucket": bucket.bucket,
        "database": database,
        "table": table,
        "partition_name": partition_name,
    }
    if sync_later is None:
        write_file_durably(path, json.dumps(body).encode())
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(json.dumps(body).encode())
    tmp.replace(path)
    # the table's directory too: mkdir created the bucket's directory in it
    sync_later += [path, path.parent, path.parent.parent]


def _is_plain_component(name: str) -> bool:
    return (
        bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name
    )


# Where deleted replicas' directories wait for `purge_trash` (a '.' is in no database name, so no
# replica directory can collide with it).
TRASH_DIR = "deleted.trash"


class ReplicaManager:
    def __init__(
        self, server_id: int, data_dir: Path | DataDirs, log_config: Callable[[TableInfo], LogConfig]
    ) -> None:
        self.server_id = server_id
        self.data_dirs = data_dir if isinstance(data_dir, DataDirs) else DataDirs([data_dir])
        self.log_config = log_config
        self.replicas: dict[TableBucket, Replica] = {}
        # tables whose last replica here was deleted (dropped): requests for them are for no bucket
        self.deleted_tables: set[int] = set()
        # role-change hooks: the tablet server starts and stops follower fetching (and KV tablets)
        self.on_leader: Callable[[Replica], None] = lambda replica: None
        self.on_follower: Callable[[Replica], None] = lambda replica: None
        self.on_stopped: Callable[[Replica], None] = lambda replica: None
        # a data directory failed (the tablet server takes it offline and tells the coordinator)
        self.on_dir_failed: Callable[[Path, str], None] = lambda root, reason: None
        # a new replica's log opens in an executor (`take_leadership`), in batches whose file syncs
        # run together (replica_opener.py: one at a time, 2,048 new buckets took ~40 s); one bucket's
        # files are opened by one caller at a time (the future of that open, here), so two notices of
        # one new bucket never open its files twice; a stop that comes meanwhile is remembered
        self._opening: dict[TableBucket, asyncio.Future[None]] = {}
        self._opener: ReplicaOpener[LogTablet] = ReplicaOpener()
        self._stopped_while_opening: set[TableBucket] = set()

    @property
    def data_dir(self) -> Path:
        """The first data directory (the only one without `data.dirs`)."""
        return self.data_dirs.first

    def _relative(self, database: str, table: str, bucket: TableBucket, partition_name: str | None) -> Path:
        return replica_directory(self.data_dir, database, table, bucket, partition_name).relative_to(
            self.data_dir
        )

    def _place(
        self,
        database: str,
        table: str,
        bucket: TableBucket,
        partition_name: str | None,
        found: tuple[DataDir | None] | None = None,
    ) -> tuple[DataDir, Path]:
        """The data directory and replica directory of a replica new to this process: where its files
        already are (a restart), else in the least-used online directory. Counted at once, so buckets
        opening concurrently spread over the directories. `found`: where the files are, looked up
        by the caller in an executor (else looked up here, with a stat per directory)."""
        if found is None:
            found = (self.data_dirs.holding(self._relative(database, table, bucket, partition_name)),)
        root = found[0]
        if root is not None and not root.online:
            raise OfflineDirError(
                f"the replica of {bucket} lies in data directory {root.path}, which is offline "
                f"({root.offline_reason})"
            )
        if root is None:
            root = self.data_dirs.choose()
        root.replicas += 1
        return root, replica_directory(root.path, database, table, bucket, partition_name)

    def _unplace(self, root: Path | None) -> None:
        if root is not None:
            d = self.data_dirs.get(root)
            d.replicas = max(0, d.replicas - 1)

    def replicas_in(self, root: Path) -> list[Replica]:
        return [r for r in self.replicas.values() if r.data_root == root]

    def storage_failed(self, replica: Replica | None, error: BaseException) -> None:
        """An operation on `replica`'s files failed: when the error says the disk is broken (EIO, a
        read-only file system...), its data directory fails (`on_dir_failed`)."""
        if replica is not None and replica.data_root is not None and is_disk_failure(error):
            self.on_dir_failed(replica.data_root, str(error))

    def take_dir_offline(self, root: Path, reason: str) -> list[Replica] | None:
        """Mark a data directory offline and close the replicas in it (without syncing: the disk is
        broken); they are gone from this server until it restarts. None when it was offline already."""
        if not self.data_dirs.mark_offline(root, reason):
            return None
        gone = self.replicas_in(root)
        for replica in gone:
            del self.replicas[replica.bucket]
            self._unplace(root)
            replica.give_up_leadership(f"lies in the failed data directory {root}")
            try:
                self.on_stopped(replica)
            except Exception:
                log.exception("stopping %s of the failed data directory %s", replica.bucket, root)
            try:
                replica.release()
            except Exception as e:  # a broken disk may refuse even a close
                log.warning("closing %s of the failed data directory %s: %s", replica.bucket, root, e)
        return gone

    def get(self, bucket: TableBucket) -> Replica:
        replica = self.replicas.get(bucket)
        if replica is None:
            raise UnknownTableOrBucketError(f"this server (id {self.server_id}) hosts no replica of {bucket}")
        return replica

    def leader_replica(self, bucket: TableBucket) -> Replica:
        replica = self.replicas.get(bucket)
        if replica is None and bucket.table_id in self.deleted_tables:
            # not retriable in effect: no leader will ever come back for it
            raise UnknownTableOrBucketError(f"{bucket} belongs to a dropped table")
        if replica is None or not replica.is_leader(self.server_id):
            leader = replica.leader if replica else None
            raise NotLeaderOrFollowerError(
                f"server {self.server_id} is not the leader of {bucket}"
                + (f" (the leader is server {leader})" if leader is not None else "")
            )
        return replica

    def writable_leader_replica(self, bucket: TableBucket) -> Replica:
        """`leader_replica` for a client write: refused with DISK_WRITE_LOCKED while the replica's data
        directory is write-locked (its disk nearly full), or with a storage error while it is offline."""
        replica = self.leader_replica(bucket)
        self.data_dirs.check_writable(replica.data_root, f"the write to {bucket} is refused")
        return replica

    @contextlib.asynccontextmanager
    async def _opening_files(self, bucket: TableBucket) -> AsyncIterator[None]:
        """Exclusive use of one bucket's files while they open: waits for another open of them."""
        while (other := self._opening.get(bucket)) is not None:
            await asyncio.shield(other)
        done = asyncio.get_running_loop().create_future()
        self._opening[bucket] = done
        try:
            yield
        finally:
            del self._opening[bucket]
            done.set_result(None)

    async def take_leadership(
        self,
        bucket: TableBucket,
        *,
        database: str,
        table: str,
        partition_name: str | None,
        table_info: TableInfo,
        leader: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        bucket_epoch: int,
    ) -> Replica:
        """`become_leader_or_follower`, with a new replica's log opened in an executor: opening recovers
        the log (reads and checks every unflushed batch, may truncate a torn tail), which must not stall
        the event loop. Several buckets open at once; one bucket's opens follow each other."""
        async with self._opening_files(bucket):
            opened: LogTablet | None = None
            placed: DataDir | None = None
            if bucket not in self.replicas and self.server_id in replicas:
                relative = self._relative(database, table, bucket, partition_name)
                # the stats run in an executor; the choice and its count on the loop, so that buckets
                # opening at once still spread over the directories
                holding = await asyncio.to_thread(self.data_dirs.holding, relative)
                placed, directory = self._place(database, table, bucket, partition_name, (holding,))
                self._stopped_while_opening.discard(bucket)
                config = self.log_config(table_info)

                def open_replica(sync_later: list[Path]) -> LogTablet:
                    # what needs an fsync goes into sync_later, synced with the batch (replica_opener)
                    directory.mkdir(parents=True, exist_ok=True)
                    _ensure_replica_meta(
                        directory / "replica.json", bucket, database, table, partition_name, sync_later
                    )
                    tablet = LogTablet.open(directory / "log", config, sync_later=sync_later)
                    try:
                        sync_later.append(tablet.directory)  # its new files' entries
                        if leader == self.server_id:
                            # the leader epoch's entry, which become_leader_or_follower would write (and
                            # fsync) on the event loop; should it refuse the leadership, the entry names
                            # an epoch with no records in it, which truncation by epoch passes over
                            tablet.leader_epochs.assign(leader_epoch, tablet.log_end_offset)
                    except BaseException:
                        tablet.close()
                        raise
                    return tablet

                try:
                    opened = await self._opener.open(open_replica, LogTablet.close)
                except BaseException:
                    self._unplace(placed.path)
                    raise
                if bucket in self._stopped_while_opening:  # stopped (or dropped) while its files opened
                    self._stopped_while_opening.discard(bucket)
                    opened.close()
                    self._unplace(placed.path)
                    raise UnknownTableOrBucketError(f"{bucket} was stopped on this server while it opened")
            try:
                return self.become_leader_or_follower(
                    bucket,
                    database=database,
                    table=table,
                    partition_name=partition_name,
                    table_info=table_info,
                    leader=leader,
                    leader_epoch=leader_epoch,
                    replicas=replicas,
                    isr=isr,
                    bucket_epoch=bucket_epoch,
                    opened_log=opened,
                    placed=placed,
                )
            except BaseException:
                if opened is not None and bucket not in self.replicas:
                    opened.close()
                    self._unplace(placed.path if placed is not None else None)
                raise

    async def log_on_disk(self, bucket: TableBucket) -> LogTablet | None:
        """The log of a bucket this server holds no replica of yet, as it lies on disk: opened (so
        recovered: a torn tail is cut) and closed again, or None when there is none. The coordinator
        asks before a last-resort election, to elect the replica with the longest log. The caller
        reads the closed tablet's log end and leader epochs only."""
        async with self._opening_files(bucket):  # never beside take_leadership opening the same files
            if bucket in self.replicas:
                return self.replicas[bucket].log
            directory = self._directory_on_disk(bucket)
            if directory is None:
                return None

            def open_and_close() -> LogTablet:
                # The table's own LogConfig is not needed to read the log: recovery checks batches,
                # not sizes; close() fsyncs what recovery kept, so the next open finds it clean.
                tablet = LogTablet.open(directory / "log", LogConfig())
                tablet.close()
                return tablet

            return await asyncio.to_thread(open_and_close)

    def _directory_on_disk(self, bucket: TableBucket) -> Path | None:
        """`replica_directory` without the names (the coordinator's question carries ids only). A
        table's directory ends in `-<table_id>`, so the pattern names one table; a readable
        replica.json must agree (an unreadable one, emptied by a power cut, does not hide the log)."""
        table_glob = f"*/*-{bucket.table_id}"
        if bucket.partition_id is not None:
            table_glob += f"/*-p{bucket.partition_id}"
        found = (
            (root.path, directory)
            for root in self.data_dirs.dirs
            if root.online
            for directory in root.path.glob(f"{table_glob}/bucket-{bucket.bucket}")
        )
        for root_path, directory in found:
            if directory.relative_to(root_path).parts[0] == TRASH_DIR or not (directory / "log").is_dir():
                continue
            try:
                meta = json.loads((directory / "replica.json").read_bytes())
            except (OSError, ValueError):
                meta = None
            ids = (bucket.table_id, bucket.partition_id, bucket.bucket)
            if (
                isinstance(meta, dict)
                and (meta.get("table_id"), meta.get("partition_id"), meta.get("bucket")) != ids
            ):
                continue
            return directory
        return None

    def become_leader_or_follower(
        self,
        bucket: TableBucket,
        *,
        database: str,
        table: str,
        partition_name: str | None,
        table_info: TableInfo,
        leader: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        bucket_epoch: int,
        opened_log: LogTablet | None = None,
        placed: DataDir | None = None,
    ) -> Replica:
        if self.server_id not in replicas:
            raise UnknownTableOrBucketError(
                f"server {self.server_id} is not in the replica list {list(replicas)} of {bucket}"
            )
        replica = self.replicas.get(bucket)
        if replica is None:
            self.deleted_tables.discard(bucket.table_id)
            if placed is None:  # else take_leadership placed it, and opened its files in an executor
                placed, directory = self._place(database, table, bucket, partition_name)
                try:
                    directory.mkdir(parents=True, exist_ok=True)
                    _ensure_replica_meta(directory / "replica.json", bucket, database, table, partition_name)
                    opened_log = LogTablet.open(directory / "log", self.log_config(table_info))
                except BaseException:
                    self._unplace(placed.path)
                    raise
            else:
                directory = replica_directory(placed.path, database, table, bucket, partition_name)
            replica = Replica(bucket, database, table, partition_name, directory, table_info)
            replica.data_root = placed.path
            replica.log = opened_log
            self.replicas[bucket] = replica
        elif leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {leader_epoch} for {bucket} is older than the current leader epoch "
                f"{replica.leader_epoch}"
            )
        elif leader_epoch == replica.leader_epoch and leader != replica.leader:
            raise FencedLeaderEpochError(
                f"leader epoch {leader_epoch} of {bucket} belongs to leader {replica.leader}, not {leader}"
            )
        was_leader = replica.leader == self.server_id
        new_term = leader_epoch > replica.leader_epoch
        replica.local_id = self.server_id
        replica.leader = leader
        replica.leader_epoch = leader_epoch
        replica.replicas = replicas
        replica.isr = isr
        replica.bucket_epoch = bucket_epoch
        if leader == self.server_id:
            if new_term or not was_leader:
                # every follower starts unknown; the high watermark moves once they fetch
                replica.followers = {r: FollowerState() for r in replicas if r != self.server_id}
                replica.needs_truncation = False
                replica.pending_epochs = []
            tablet = replica.log_tablet()
            tablet.leader_epochs.assign(leader_epoch, tablet.log_end_offset)
            # A sole in-sync leader has committed everything in its log, so after a crash it also
            # recovers a high watermark that its checkpoint may have left behind.
            replica.maybe_advance_high_watermark()
            self.on_leader(replica)
        else:
            replica.give_up_leadership(f"is now a follower of server {leader} (leader epoch {leader_epoch})")
            if new_term:
                # What this replica wrote beyond the new leader's log goes before it fetches: the fetcher
                # asks the leader where this replica's last epoch ends (KIP-101), see replica_fetcher.py.
                replica.needs_truncation = True
                replica.pending_epochs = []
            replica.followers = {}
            self.on_follower(replica)
        return replica

    def stop_replica(
        self, bucket: TableBucket, delete: bool, leader_epoch: int | None = None
    ) -> Replica | None:
        """Close (and with `delete` remove) a replica. A request from an older leader epoch than this
        replica's is refused: it was decided before the leadership this replica has now."""
        current = self.replicas.get(bucket)
        if current is None and bucket in self._opening:
            self._stopped_while_opening.add(bucket)
        if current is not None and leader_epoch is not None and leader_epoch < current.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {leader_epoch} in the stop request for {bucket} is older than its current "
                f"leader epoch {current.leader_epoch}"
            )
        replica = self.replicas.pop(bucket, None)
        if delete and replica is not None and not any(b.table_id == bucket.table_id for b in self.replicas):
            self.deleted_tables.add(bucket.table_id)
        if replica is not None:
            self._unplace(replica.data_root)
            replica.give_up_leadership("is no longer on this server")
            self.on_stopped(replica)
            if delete:
                replica.release()
            else:
                replica.close()
        if replica is not None and delete:
            root = replica.data_root or self.data_dir
            self._move_to_trash(root, replica.directory)
            # drop now-empty table/partition directories left behind
            for parent in (replica.directory.parent, replica.directory.parent.parent):
                if parent != root and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
        return replica

    def _move_to_trash(self, root: Path, directory: Path) -> None:
        """Take a deleted replica's directory away at once (one rename, cheap on the event loop, and a
        replica created again in its place starts empty); `purge_trash` deletes the files later."""
        if not directory.exists():
            return
        trash = root / TRASH_DIR
        try:
            trash.mkdir(exist_ok=True)
            directory.rename(trash / uuid.uuid4().hex)
        except OSError:  # e.g. on another file system: delete it here and now
            shutil.rmtree(directory, ignore_errors=True)

    def purge_trash(self) -> None:
        """Delete the files of deleted replicas. Blocking (a big log is many files): run it in an
        executor. Also removes what a crash left in the trash."""
        for root in self.data_dirs.dirs:
            trash = root.path / TRASH_DIR
            if root.online and trash.is_dir():
                for path in list(trash.iterdir()):
                    shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Close every replica's log (blocking: run it in an executor). The logs close together, step
        by step (`LogTablet.closing`), each step's fsyncs in parallel: one log after another, 2,048
        replicas' ~8 fsyncs each outlasted the 15 s a stop is given, and the next start found them
        unclean."""
        steps: list[tuple[Replica, Iterator[list[Path]]]] = []
        for replica in self.replicas.values():
            if replica.log is not None:
                steps.append((replica, replica.log.closing()))
        while steps:
            going: list[tuple[Replica, Iterator[list[Path]], list[Path]]] = []
            for replica, step in steps:
                try:
                    going.append((replica, step, next(step)))
                except StopIteration:
                    replica.log = None
                except Exception:
                    log.exception("closing %s failed", replica.bucket)
            try:
                fsync_all([p for _, _, written in going for p in written])
            except OSError:
                # a failing disk (one of several data directories): each log syncs its own, and one
                # whose files cannot be synced goes no further (its clean-shutdown marker would lie)
                synced = []
                for replica, step, written in going:
                    try:
                        fsync_all(written)
                        synced.append((replica, step, written))
                    except OSError as e:
                        log.error("closing %s failed: its files could not be synced: %s", replica.bucket, e)
                going = synced
            steps = [(replica, step) for replica, step, _ in going]
        self.replicas.clear()
