"""Tiered log storage: bucket leaders copy closed log segments to `remote.data.dir` and keep only the
newest `table.log.tiered.local-segments` of them on local disk.

Remote layout (what Fluss clients download from): `<remote>/log/<db>/<table>-<id>[/<partition>-p<pid>]/
<bucket>/<segment id>/<base offset, 20 digits>.log`, plus `manifest.json` in the bucket directory listing
the remote segments. A fetch below the local log start is answered with `remote_log_fetch_info`, and the
client reads those segments itself — except segments holding batches of an older schema of a table that
has since added columns: clients (pyfluss 1.0) read every batch with the current schema, so the server
reads those segments itself and answers with the batches rebuilt under the current schema, as it does
for local ones. Only log tables are tiered: a primary-key table's changelog stays local because it
rebuilds the KV state. Remote segments expire by table.log.ttl; for lake-enabled tables only once the
lake has their records (strom/server/tablet/log/lake_hold.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from strom.common.errors import InvalidConfigError
from strom.common.file_io import load_file_io
from strom.record.log_batch import MAX_HEADER_SIZE, V0_HEADER_SIZE, iter_batches, read_header
from strom.server.tablet.log.lake_hold import (
    RetentionOutcome,
    Verdict,
    drop_tiered_remote,
    lake_hold,
)
from strom.server.tablet.replica_manager import Replica, ReplicaManager

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    segment_id: str
    start_offset: int
    end_offset: int  # exclusive: the next segment's base offset
    size: int
    max_timestamp: int
    # the oldest schema id of its batches; None in manifests written before it was recorded
    min_schema_id: int | None = None

    def needs_current_schema(self, schema_id: int) -> bool:
        """Whether a reader on `schema_id` needs some of its batches rebuilt (or may: unknown)."""
        return self.min_schema_id is None or self.min_schema_id != schema_id


@dataclass
class RemoteLog:
    """The remote part of one bucket's log."""

    tablet_dir: str
    segments: list[RemoteSegment] = field(default_factory=list)
    # where tiering has got to: kept (and in the manifest) when every segment has expired, so that the
    # segments already uploaded are not uploaded again
    tiered_end: int | None = None

    @property
    def start_offset(self) -> int | None:
        return self.segments[0].start_offset if self.segments else None

    @property
    def end_offset(self) -> int | None:
        return self.segments[-1].end_offset if self.segments else self.tiered_end

    def covering(self, offset: int, max_segments: int = 4) -> list[RemoteSegment]:
        """The segments a reader at `offset` needs next."""
        for i, segment in enumerate(self.segments):
            if segment.end_offset > offset:
                return self.segments[i : i + max_segments]
        return []

    def to_json(self) -> str:
        segments = [asdict(s) for s in self.segments]
        return json.dumps({"version": 1, "segments": segments, "end_offset": self.end_offset})


def remote_tablet_dir(remote_root: str, replica: Replica) -> str:
    path = f"{remote_root.rstrip('/')}/log/{replica.database}/{replica.table}-{replica.bucket.table_id}"
    if replica.bucket.partition_id is not None:
        path += f"/{replica.partition_name}-p{replica.bucket.partition_id}"
    return f"{path}/{replica.bucket.bucket}"


class RemoteLogManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        remote_root: str,
        commit_manifest: Callable[[Replica, RemoteLog, str], Awaitable[None]],
        max_upload_segments: int = 5,
        on_retention: Callable[[Replica, str, RetentionOutcome], None] | None = None,
    ) -> None:
        if max_upload_segments < 1:
            raise InvalidConfigError(
                f"remote.log.task-max-upload-segments must be at least 1, got {max_upload_segments}"
            )
        # a backlog is uploaded over several task runs, oldest first, so one run stays bounded
        self.max_upload_segments = max_upload_segments
        self.replicas = replicas
        self.remote_root = remote_root
        self.commit_manifest = commit_manifest
        # told what each expiry pass deleted, forced out and held for the lake (metrics, loud logs)
        self.on_retention = on_retention or (lambda replica, tier, outcome: None)
        self.fs = load_file_io(remote_root).fs

    def remote_log(self, replica: Replica) -> RemoteLog:
        """The bucket's remote log, loaded from its manifest the first time (e.g. after a leader change)."""
        if replica.remote is None:
            directory = remote_tablet_dir(self.remote_root, replica)
            remote = RemoteLog(directory)
            manifest = f"{directory}/{MANIFEST}"
            if self.fs.exists(manifest):
                obj = json.loads(self.fs.cat_file(manifest))
                remote.segments = [RemoteSegment(**s) for s in obj["segments"]]
                remote.tiered_end = obj.get("end_offset")  # absent in manifests written before it was
            replica.remote = remote
        return replica.remote

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for replica in list(self.replicas.replicas.values()):
                if (
                    replica.is_leader(self.replicas.server_id)
                    and replica.log is not None
                    and not replica.table_info.has_primary_key
                ):
                    try:
                        await self.tier(replica)
                    except Exception:
                        log.exception("tiering the log of %s failed", replica.bucket)

    async def tier(self, replica: Replica) -> int:
        """Upload committed closed segments not yet remote, then trim local ones; returns uploads."""
        tablet = replica.log_tablet()
        remote = await asyncio.to_thread(self.remote_log, replica)
        uploaded_end = remote.end_offset or 0
        todo = [
            s
            for s in tablet.closed_segments()
            if s.base_offset >= uploaded_end and s.next_offset <= tablet.high_watermark
        ][: self.max_upload_segments]
        for segment in todo:
            segment_id = uuid.uuid4().hex
            target = f"{remote.tablet_dir}/{segment_id}/{segment.base_offset:020d}.log"
            min_schema_id = await asyncio.to_thread(self._upload, str(segment.path), target)
            remote.segments.append(
                RemoteSegment(
                    segment_id,
                    segment.base_offset,
                    segment.next_offset,
                    segment.size,
                    segment.max_timestamp,
                    min_schema_id,
                )
            )
        doomed, outcome = self._expire(replica, remote)
        self.on_retention(replica, "remote", outcome)
        if doomed:  # deleting remote files blocks (a network round trip each on object storage)
            await asyncio.to_thread(self._delete_remote, remote, doomed)
        expired = len(doomed)
        if todo or expired:
            manifest = await asyncio.to_thread(self._write_manifest, remote)
            await self.commit_manifest(replica, remote, manifest)
            log.info(
                "%s: %d segment(s) uploaded, %d expired, remote log [%s, %s)",
                replica.bucket,
                len(todo),
                expired,
                remote.start_offset,
                remote.end_offset,
            )
        self._trim_local(replica, remote)
        return len(todo)

    def _upload(self, source: str, target: str) -> int | None:
        """Copy a closed segment; returns the oldest schema id of its batches."""
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        self.fs.put_file(source, target)
        with open(source, "rb") as f:
            return oldest_schema_id(f)

    def _write_manifest(self, remote: RemoteLog) -> str:
        path = f"{remote.tablet_dir}/{MANIFEST}"
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        self.fs.pipe_file(temporary, remote.to_json().encode())
        self.fs.mv(temporary, path)  # readers see the old or the new manifest, never half of one
        return path

    def _expire(self, replica: Replica, remote: RemoteLog) -> tuple[list[RemoteSegment], RetentionOutcome]:
        """Remote segments older than table.log.ttl leave the remote log, oldest first (for a
        lake-enabled table, once the lake has them or the hold bound forces them out; with
        `table.datalake.remote-log.drop-tiered`, as soon as the lake has them); returns them (their
        files are for `_delete_remote`) and what stays held for the lake."""
        info = replica.table_info
        ttl = int(info.log_ttl.total_seconds() * 1000)
        hold = lake_hold(info.properties, replica.lake_log_end_offset)
        drop_tiered = hold is not None and drop_tiered_remote(info.properties)
        if ttl <= 0 and not drop_tiered:
            return [], RetentionOutcome()
        now = int(time.time() * 1000)
        expired: list[RemoteSegment] = []
        forced = 0
        forced_end = -1
        while remote.segments:
            segment = remote.segments[0]
            if drop_tiered and hold is not None and hold.covers(segment.end_offset):
                verdict = Verdict.DELETE
            elif ttl <= 0:
                break
            elif hold is None:
                verdict = Verdict.DELETE if now - segment.max_timestamp > ttl else Verdict.KEEP
            else:
                verdict = hold.verdict(segment.end_offset, segment.max_timestamp, now, ttl)
            if verdict is Verdict.KEEP or verdict is Verdict.HOLD:
                break
            if verdict is Verdict.FORCE:
                forced += 1
                forced_end = segment.end_offset
            remote.tiered_end = segment.end_offset
            expired.append(remote.segments.pop(0))
        held = held_bytes = 0
        if hold is not None and ttl > 0:
            for segment in remote.segments:
                if hold.verdict(segment.end_offset, segment.max_timestamp, now, ttl) is not Verdict.HOLD:
                    break
                held += 1
                held_bytes += segment.size
        return expired, RetentionOutcome(len(expired), forced, forced_end, held, held_bytes)

    def _delete_remote(self, remote: RemoteLog, segments: list[RemoteSegment]) -> None:
        for segment in segments:
            self.fs.rm(f"{remote.tablet_dir}/{segment.segment_id}", recursive=True)

    @staticmethod
    def _trim_local(replica: Replica, remote: RemoteLog) -> None:
        """Keep the newest table.log.tiered.local-segments closed segments locally; older ones are remote."""
        tablet = replica.log_tablet()
        keep = max(0, replica.table_info.tiered_log_local_segments)
        closed = tablet.closed_segments()
        removable = closed[: max(0, len(closed) - keep)]
        remote_end = remote.end_offset or 0
        removable = [s for s in removable if s.next_offset <= remote_end]
        if removable:
            tablet.advance_log_start_offset(removable[-1].next_offset)


def remote_fetch_info(remote: RemoteLog, offset: int, partition_name: str | None, target: Any) -> bool:
    """Fill a PbRemoteLogFetchInfo for a reader at `offset`; False when the remote log lacks it."""
    segments = remote.covering(offset)
    if not segments or segments[0].start_offset > offset:
        return False
    target.remote_log_tablet_dir = remote.tablet_dir
    if partition_name is not None:
        target.partition_name = partition_name
    for s in segments:
        target.remote_log_segments.add(
            remote_log_segment_id=s.segment_id,
            remote_log_start_offset=s.start_offset,
            remote_log_end_offset=s.end_offset,
            segment_size_in_bytes=s.size,
            max_timestamp=s.max_timestamp,
        )
    target.first_start_pos = 0  # the client skips the rows below its fetch offset
    return True


def oldest_schema_id(f: Any) -> int | None:
    """The smallest schema id among the batches of a segment file, reading only their headers."""
    found: int | None = None
    pos = 0
    while True:
        f.seek(pos)
        head = f.read(MAX_HEADER_SIZE)  # any magic's header
        if len(head) < V0_HEADER_SIZE:
            return found
        header = read_header(head)
        found = header.schema_id if found is None else min(found, header.schema_id)
        pos += header.size


def read_remote_batches(remote: RemoteLog, offset: int, max_bytes: int) -> bytes:
    """Whole batches of the remote segment holding `offset`, from the batch that contains it: at least
    one batch, then as many as fit in `max_bytes` (for segments the server hands over rebuilt)."""
    segments = remote.covering(offset, max_segments=1)
    if not segments:
        return b""
    segment = segments[0]
    location = load_file_io(f"{remote.tablet_dir}/{segment.segment_id}/{segment.start_offset:020d}.log")
    with location.fs.open(location.path, "rb") as f:
        pos = 0
        while True:  # skip the batches below the offset, reading headers only
            f.seek(pos)
            head = f.read(MAX_HEADER_SIZE)  # any magic's header
            if len(head) < V0_HEADER_SIZE:
                return b""
            header = read_header(head)
            if header.next_offset > offset:
                break
            pos += header.size
        f.seek(pos)
        data = f.read(max(max_bytes, header.size))
    end = 0
    for batch_pos, batch in iter_batches(data):
        end = batch_pos + batch.size
    return data[:end]
