"""The replicas a tablet server hosts, and the leadership the coordinator gives it."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from strom.common.errors import LogStorageError, NotLeaderOrFollowerError, UnknownTableOrBucketError
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import LogTablet

log = logging.getLogger(__name__)


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
    leader: int | None = None
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    bucket_epoch: int = 0
    # how far the lake reaches in this bucket's log (NotifyLakeTableOffset), -1 when not tiered
    lake_log_end_offset: int = -1
    # futures of long-polling fetches waiting for this bucket's next append
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    _arrow_schema: pa.Schema | None = None

    def is_leader(self, server_id: int) -> bool:
        return self.leader == server_id

    def log_tablet(self) -> LogTablet:
        if self.log is None:
            raise LogStorageError(f"the log of {self.bucket} is not open on this server")
        return self.log

    def arrow_schema(self) -> pa.Schema:
        if self._arrow_schema is None:
            self._arrow_schema = self.table_info.schema.to_arrow_schema()
        return self._arrow_schema

    def notify_appended(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def replica_directory(
    data_dir: Path, database: str, table: str, bucket: TableBucket, partition_name: str | None
) -> Path:
    """`<data>/<db>/<table>-<table_id>[/<partition>-p<partition_id>]/bucket-<n>`: readable by a human,
    unique by ids (a re-created table with the same name gets a new directory)."""
    path = data_dir / database / f"{table}-{bucket.table_id}"
    if bucket.partition_id is not None:
        path = path / f"{partition_name}-p{bucket.partition_id}"
    return path / f"bucket-{bucket.bucket}"


class ReplicaManager:
    def __init__(self, server_id: int, data_dir: Path, log_config: Callable[[TableInfo], LogConfig]) -> None:
        self.server_id = server_id
        self.data_dir = data_dir
        self.log_config = log_config
        self.replicas: dict[TableBucket, Replica] = {}

    def get(self, bucket: TableBucket) -> Replica:
        replica = self.replicas.get(bucket)
        if replica is None:
            raise UnknownTableOrBucketError(f"this server (id {self.server_id}) hosts no replica of {bucket}")
        return replica

    def leader_replica(self, bucket: TableBucket) -> Replica:
        replica = self.replicas.get(bucket)
        if replica is None or not replica.is_leader(self.server_id):
            leader = replica.leader if replica else None
            raise NotLeaderOrFollowerError(
                f"server {self.server_id} is not the leader of {bucket}"
                + (f" (the leader is server {leader})" if leader is not None else "")
            )
        return replica

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
    ) -> Replica:
        replica = self.replicas.get(bucket)
        if replica is None:
            directory = replica_directory(self.data_dir, database, table, bucket, partition_name)
            directory.mkdir(parents=True, exist_ok=True)
            meta = directory / "replica.json"
            if not meta.exists():
                meta.write_text(
                    json.dumps(
                        {
                            "table_id": bucket.table_id,
                            "partition_id": bucket.partition_id,
                            "bucket": bucket.bucket,
                            "database": database,
                            "table": table,
                            "partition_name": partition_name,
                        }
                    )
                )
            replica = Replica(bucket, database, table, partition_name, directory, table_info)
            replica.log = LogTablet.open(directory / "log", self.log_config(table_info))
            self.replicas[bucket] = replica
        elif leader_epoch < replica.leader_epoch:
            log.info(
                "ignoring stale leadership for %s (epoch %d < %d)", bucket, leader_epoch, replica.leader_epoch
            )
            return replica
        replica.leader = leader
        replica.leader_epoch = leader_epoch
        replica.replicas = replicas
        replica.isr = isr
        replica.bucket_epoch = bucket_epoch
        if leader == self.server_id and set(isr) <= {self.server_id} and replica.log is not None:
            # A sole in-sync leader has committed everything in its log: after a crash the
            # checkpointed high watermark may lag the recovered log end.
            replica.log.update_high_watermark(replica.log.log_end_offset)
        return replica

    def stop_replica(self, bucket: TableBucket, delete: bool) -> Replica | None:
        replica = self.replicas.pop(bucket, None)
        if replica is not None:
            replica.close()
        if replica is not None and delete:
            shutil.rmtree(replica.directory, ignore_errors=True)
            # drop now-empty table/partition directories left behind
            for parent in (replica.directory.parent, replica.directory.parent.parent):
                if parent != self.data_dir and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
        return replica

    def close(self) -> None:
        for replica in self.replicas.values():
            try:
                replica.close()
            except Exception:
                log.exception("closing %s failed", replica.bucket)
        self.replicas.clear()
