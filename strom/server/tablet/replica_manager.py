"""The replicas a tablet server hosts, and the leadership the coordinator gives it."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from strom.common.errors import NotLeaderOrFollowerError, UnknownTableOrBucketError
from strom.common.table_bucket import TableBucket

log = logging.getLogger(__name__)


@dataclass
class Replica:
    """One bucket replica on this server. Storage (log and KV tablets) hangs off it."""

    bucket: TableBucket
    database: str
    table: str
    partition_name: str | None
    directory: Path
    leader: int | None = None
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    bucket_epoch: int = 0
    storage: dict[str, object] = field(default_factory=dict)

    def is_leader(self, server_id: int) -> bool:
        return self.leader == server_id


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
    def __init__(self, server_id: int, data_dir: Path) -> None:
        self.server_id = server_id
        self.data_dir = data_dir
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
            replica = Replica(bucket, database, table, partition_name, directory)
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
        return replica

    def stop_replica(self, bucket: TableBucket, delete: bool) -> Replica | None:
        replica = self.replicas.pop(bucket, None)
        if replica is not None and delete:
            shutil.rmtree(replica.directory, ignore_errors=True)
            # drop now-empty table/partition directories left behind
            for parent in (replica.directory.parent, replica.directory.parent.parent):
                if parent != self.data_dir and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
        return replica
