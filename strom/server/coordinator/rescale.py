"""Online bucket rescaling: AlterTable with `bucket.num` (docs/operations.md, "Rescaling buckets").

Fluss cannot change the bucket count of an existing table (apache/fluss#327). Here a rescale is a task
stored in the metadata store (document `rescale/<table id>`) that moves through three states, each
step safe to repeat, so a coordinator that takes over after a crash finishes it:

- SEALED: stored together with the table's new descriptor (new `bucket_count`, custom properties
  `strom.rescale.sealed` and `strom.rescale.from`, `strom/common/rescale.py`) and the assignments of the
  new buckets of the table (or of every partition). Tablet servers refuse client writes and lookups on
  a sealed table with a retriable error. The coordinator pushes the table, starts the new buckets, and
  asks each old bucket's leader to EXPORT: the leader waits until every write that got in before the
  seal is committed and answers its log end offset (the cut) and, for a primary-key table, the rows
  whose key hashes to another bucket under the new count. The coordinator IMPORTs those rows into
  their new buckets (an upsert: a repeat writes the same row again) and then DELETEs them from the
  old ones. Exports are all taken before anything is imported, so a bucket that both gives and gets
  rows (2 -> 3) is read before it is written.
- MOVED: the cuts and row counts are stored; the seal is lifted (the table keeps
  `strom.rescale.from`, which makes its servers refuse keys routed by an older count retriably).
- DONE.

The new count applies to every existing partition and to partitions created later.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strom.common.config import TABLE_DATALAKE_FORMAT
from strom.common.errors import FlussError, InvalidAlterTableError, UnknownServerError
from strom.common.lake_enablement import table_lake_enabled
from strom.common.rescale import FROM_PROPERTY, SEALED_PROPERTY
from strom.common.supervision import spawn
from strom.common.table_descriptor import TableDescriptor
from strom.record.columnar_keys import key_bytes_buckets
from strom.record.kv_batch import KvRecordBatch, build_kv_batch
from strom.rpc.api import ApiKey
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.coordinator.controller import assign_replicas
from strom.server.store.base import BucketAssignment, MetadataStore, TableRecord

if TYPE_CHECKING:
    from strom.server.coordinator.controller import Controller
    from strom.server.coordinator.membership import Membership
    from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

DOCUMENT_PREFIX = "rescale/"
EXPORT, IMPORT, DELETE = 0, 1, 2
# how long one step may keep failing (a leader moving, a server restarting) before the run gives up;
# the resume loop starts it again later
STEP_TIMEOUT = 120.0
RETRY_INTERVAL = 0.2
RESUME_INTERVAL = 5.0


class RescaleState(enum.Enum):
    SEALED = "SEALED"
    MOVED = "MOVED"
    DONE = "DONE"


@dataclass
class RescaleTask:
    table_id: int
    from_count: int
    to_count: int
    state: RescaleState = RescaleState.SEALED
    # "<partition id or ->/<bucket>" -> the old bucket's log end offset once sealed: readers that read
    # every old bucket up to its cut before the new buckets see each key's records in order
    cuts: dict[str, int] = field(default_factory=dict)
    moved_rows: int = 0
    started_ms: int = 0
    finished_ms: int = 0

    @property
    def key(self) -> str:
        return task_key(self.table_id)

    def advance(self) -> RescaleState:
        """The next state (DONE stays DONE)."""
        order = list(RescaleState)
        self.state = order[min(order.index(self.state) + 1, len(order) - 1)]
        return self.state

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "table_id": self.table_id,
                "from": self.from_count,
                "to": self.to_count,
                "state": self.state.value,
                "cuts": self.cuts,
                "moved_rows": self.moved_rows,
                "started_ms": self.started_ms,
                "finished_ms": self.finished_ms,
            }
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> RescaleTask:
        d = json.loads(raw)
        return cls(
            d["table_id"],
            d["from"],
            d["to"],
            RescaleState(d["state"]),
            {str(k): int(v) for k, v in d.get("cuts", {}).items()},
            d.get("moved_rows", 0),
            d.get("started_ms", 0),
            d.get("finished_ms", 0),
        )

    def describe(self) -> str:
        """One line for `strom table describe`."""
        text = f"{self.from_count} -> {self.to_count} buckets: {self.state.value}"
        if self.state is not RescaleState.SEALED:
            text += f", {self.moved_rows} rows moved"
        return text


def task_key(table_id: int) -> str:
    # "/task" ends the id, so the prefix of table 1's document is not also table 10's
    return f"{DOCUMENT_PREFIX}{table_id}/task"


def cut_key(partition_id: int | None, bucket: int) -> str:
    return f"{'-' if partition_id is None else partition_id}/{bucket}"


def check_rescalable(table: str, descriptor: TableDescriptor, new_count: int, max_buckets: int) -> None:
    """Refuse, with the reason, a rescale this version cannot do right (nothing is changed)."""
    old = descriptor.bucket_count or 0
    if new_count < old:
        raise InvalidAlterTableError(
            f"Cannot reduce the bucket count of table '{table}' from {old} to {new_count}: buckets can only "
            "be added."
        )
    if new_count > max_buckets:
        raise InvalidAlterTableError(
            f"Bucket count {new_count} exceeds the maximum limit {max_buckets} (max.bucket.num)."
        )
    if table_lake_enabled(descriptor.properties):
        reason = lake_refusal(descriptor)
        if reason is not None:
            raise InvalidAlterTableError(
                f"Cannot rescale lake-enabled table '{table}': {reason}. Disable 'table.datalake.enabled' "
                "first (the lake table keeps what was tiered)."
            )
    if descriptor.has_primary_key:
        engine = descriptor.properties.get("table.merge-engine")
        if engine is not None and engine.strip().lower() not in ("", "default"):
            raise InvalidAlterTableError(
                f"Cannot rescale table '{table}': moving rows between buckets is supported for the "
                f"default merge engine only, not '{engine}'."
            )
        if not descriptor.is_default_bucket_key():
            raise InvalidAlterTableError(
                f"Cannot rescale table '{table}': its bucket key {descriptor.bucket_keys} is not its "
                "primary key, and lookups could not be checked against the new count."
            )
        if descriptor.schema.auto_increment_columns:
            raise InvalidAlterTableError(f"Cannot rescale table '{table}': it has auto-increment columns.")
    elif descriptor.bucket_keys and descriptor.properties.get("table.log.format", "ARROW").upper() != "ARROW":
        raise InvalidAlterTableError(
            f"Cannot rescale table '{table}': writes routed by the old count are detected in ARROW "
            "batches only, and its log format is not ARROW."
        )


def lake_refusal(descriptor: TableDescriptor) -> str | None:
    """Why the lake table of a lake-enabled table cannot follow a new bucket count, or None.

    Tiering itself follows a rescale: each round reads the table's current count, old buckets resume
    from the lake snapshot's offsets and new ones start at 0. What cannot follow is a lake table whose
    layout is the bucket count:
    - Iceberg: a table with a bucket key is partitioned by `bucket(n)` of it, so a new count needs a new
      partition spec. A primary-key table would then need position deletes against data files of the
      old spec (Iceberg applies one only to files of its own spec and partition), and the writer
      writes every file under the current spec. Log tables without a bucket key are partitioned by
      identity on `__bucket`: new buckets are new partition values.
    - Paimon: `bucket` is fixed in the table's options and each manifest entry records the count its
      file was written under (`_TOTAL_BUCKETS`); Paimon writes a bucket under another count only after
      the whole table is rewritten (its INSERT OVERWRITE rescale). Bucket-unaware log tables (no
      bucket key) have no count.
    - Delta: a primary-key round is one MERGE that takes each key's changes from one bucket; a moved key
      has changes in two (its -D in the old bucket, its +I in the new one).
    Log rows never move, and Delta and Lance log tables are not laid out by bucket.
    """
    lake = (descriptor.properties.get(TABLE_DATALAKE_FORMAT.key) or "").strip().lower()
    if descriptor.has_primary_key:
        if lake == "iceberg":
            return (
                "its Iceberg table is partitioned by bucket(n) of the key, and the deletes of keys written "
                "under the old partition spec cannot be written after the spec changes"
            )
        if lake == "paimon":
            return (
                "Paimon fixes the bucket count in the table's 'bucket' option and in its manifests, and "
                "writes under another count only after the whole table is rewritten"
            )
        return (
            f"a {lake or 'Delta'} primary-key round merges each key's changes from one bucket, and a moved "
            "key has changes in two"
        )
    if descriptor.bucket_keys and lake in ("iceberg", "paimon"):
        if lake == "iceberg":
            return "its Iceberg table is partitioned by bucket(n) of the bucket key, and n would change"
        return (
            "Paimon fixes the bucket count in the table's 'bucket' option and in its manifests, and "
            "writes under another count only after the whole table is rewritten"
        )
    return None


def _now_ms(after: int = 0) -> int:
    # modified times must grow: tablet servers take a table's new metadata only if it is newer
    return max(int(time.time() * 1000), after + 1)


class RescaleManager:
    def __init__(
        self,
        store: OrderedStore,
        membership: Membership,
        controller: Controller,
        table_metadata: Any,
        max_buckets: int,
    ) -> None:
        self.store = store
        self.membership = membership
        self.controller = controller
        self.table_metadata = table_metadata  # ids -> [PbTableMetadata]
        self.max_buckets = max_buckets
        self._running: dict[int, asyncio.Task[None]] = {}

    # ---- status

    def task(self, table_id: int) -> RescaleTask | None:
        raw = self.store.get_document(task_key(table_id))
        return None if raw is None else RescaleTask.from_bytes(raw)

    def _tasks(self) -> list[RescaleTask]:
        return [RescaleTask.from_bytes(raw) for _, raw in self.store.list_documents(DOCUMENT_PREFIX)]

    def unfinished(self) -> list[RescaleTask]:
        return [t for t in self._tasks() if t.state is not RescaleState.DONE]

    # ---- start (under the metadata service's DDL lock)

    async def begin(self, record: TableRecord, descriptor: TableDescriptor, new_count: int) -> RescaleTask:
        """Seal the table at its new count and store the task, all in one store transaction."""
        table = f"{record.database}.{record.name}"
        running = self.task(record.table_id)
        if running is not None and running.state is not RescaleState.DONE:
            raise InvalidAlterTableError(
                f"Table '{table}' is being rescaled already ({running.describe()}); try again once done."
            )
        check_rescalable(table, descriptor, new_count, self.max_buckets)
        old_count = descriptor.bucket_count or 0
        custom = dict(descriptor.custom_properties)
        custom[SEALED_PROPERTY] = "true"
        custom[FROM_PROPERTY] = str(old_count)
        sealed = replace(descriptor, bucket_count=new_count, custom_properties=custom)
        altered = replace(
            record, table_json=sealed.to_json_bytes(), modified_time=_now_ms(record.modified_time)
        )
        live = self.membership.locations(self.membership.live_ids())
        assignments: list[BucketAssignment] = []
        physical: list[int | None] = (
            [p.partition_id for p in self.store.list_partitions(record.table_id)]
            if descriptor.is_partitioned
            else [None]
        )
        for partition_id in physical:
            placed = assign_replicas(
                record.table_id, partition_id, new_count, descriptor.replication_factor(), live
            )
            assignments.extend(a for a in placed if a.bucket_id >= old_count)
        task = RescaleTask(record.table_id, old_count, new_count, started_ms=_now_ms())

        def store_it(store: MetadataStore) -> None:
            store.update_table(altered)
            if assignments:
                store.put_buckets(assignments)
            store.put_document(task.key, task.to_bytes())

        await self.store.atomically(store_it)
        log.info("rescaling table %s from %d to %d buckets: sealed", table, old_count, new_count)
        return task

    # ---- running

    async def finish(self, table_id: int) -> RescaleTask:
        """Drive the table's task to DONE (joining a run already going)."""
        running = self._running.get(table_id)
        if running is None or running.done():
            running = spawn(self._run(table_id), name=f"rescale-{table_id}", quiet=True)
            self._running[table_id] = running
        await asyncio.shield(running)
        task = self.task(table_id)
        assert task is not None
        return task

    async def resume_loop(self) -> None:
        """Finish the tasks a previous coordinator (or a failed run) left; runs for the process's life."""
        while True:
            for task in self._tasks():
                if self.store.get_table_by_id(task.table_id) is None:  # dropped: forget its rescale
                    await self.store.delete_documents(f"{DOCUMENT_PREFIX}{task.table_id}/")
            for task in self.unfinished():
                running = self._running.get(task.table_id)
                if running is None or running.done():
                    log.info("resuming the rescale of table %d (%s)", task.table_id, task.describe())
                    self._running[task.table_id] = spawn(
                        self._run(task.table_id), name=f"rescale-{task.table_id}"
                    )
            await asyncio.sleep(RESUME_INTERVAL)

    async def _run(self, table_id: int) -> None:
        while True:
            task = self.task(table_id)
            record = self.store.get_table_by_id(table_id)
            if task is None or task.state is RescaleState.DONE:
                return
            if record is None:  # dropped meanwhile: nothing left to move
                await self.store.delete_documents(f"{DOCUMENT_PREFIX}{table_id}/")
                return
            if task.state is RescaleState.SEALED:
                await self._move(record, task)
            else:
                await self._unseal(record, task)

    async def _push_table(self, table_id: int) -> None:
        await self.controller.broadcast_servers(self.table_metadata({table_id}))

    async def _move(self, record: TableRecord, task: RescaleTask) -> None:
        descriptor = TableDescriptor.from_json_bytes(record.table_json)
        await self._push_table(record.table_id)
        buckets = self.store.list_buckets(record.table_id)
        await self.controller.notify_leadership([a for a in buckets if a.bucket_id >= task.from_count])
        old = sorted((a for a in buckets if a.bucket_id < task.from_count), key=lambda a: a.key)
        # 1. every old bucket's cut and leaving rows, before anything is written
        leaving: dict[tuple[int | None, int], list[tuple[bytes, bytes | None]]] = {}
        arriving: dict[tuple[int | None, int], list[tuple[bytes, bytes | None]]] = defaultdict(list)
        schema_id = record.schema_id
        for a in old:
            response = await self._call(a, EXPORT, task.to_count)
            task.cuts[cut_key(a.partition_id, a.bucket_id)] = response.log_end_offset
            if not descriptor.has_primary_key or not response.HasField("records"):
                continue
            batch = KvRecordBatch.parse(response.records)
            schema_id = batch.schema_id
            rows = [(k, v) for k, v in batch.records if v is not None]
            leaving[(a.partition_id, a.bucket_id)] = [(k, None) for k, _ in rows]
            if rows:
                targets = key_buckets([k for k, _ in rows], task.to_count, descriptor)
                for (key, value), target in zip(rows, targets, strict=True):
                    arriving[(a.partition_id, target)].append((key, value))
        # 2. into their new buckets, 3. out of the old ones
        by_key = {(a.partition_id, a.bucket_id): a for a in self.store.list_buckets(record.table_id)}
        for where, moved in sorted(arriving.items(), key=lambda i: (i[0][0] or -1, i[0][1])):
            await self._call(by_key[where], IMPORT, task.to_count, build_kv_batch(moved, schema_id=schema_id))
        for where, keys in sorted(leaving.items(), key=lambda i: (i[0][0] or -1, i[0][1])):
            if keys:
                await self._call(
                    by_key[where], DELETE, task.to_count, build_kv_batch(keys, schema_id=schema_id)
                )
        task.moved_rows += sum(len(rows) for rows in arriving.values())
        task.advance()
        await self.store.put_document(task.key, task.to_bytes())
        log.info(
            "rescaling table %s.%s: %d rows moved, cuts %s",
            record.database,
            record.name,
            task.moved_rows,
            task.cuts,
        )

    async def _unseal(self, record: TableRecord, task: RescaleTask) -> None:
        descriptor = TableDescriptor.from_json_bytes(record.table_json)
        custom = {k: v for k, v in descriptor.custom_properties.items() if k != SEALED_PROPERTY}
        opened = replace(descriptor, custom_properties=custom)
        altered = replace(
            record, table_json=opened.to_json_bytes(), modified_time=_now_ms(record.modified_time)
        )
        task.advance()
        task.finished_ms = _now_ms()

        def store_it(store: MetadataStore) -> None:
            store.update_table(altered)
            store.put_document(task.key, task.to_bytes())

        await self.store.atomically(store_it)
        await self._push_table(record.table_id)
        log.info(
            "rescaled table %s.%s from %d to %d buckets",
            record.database,
            record.name,
            task.from_count,
            task.to_count,
        )

    async def _call(
        self, assignment: BucketAssignment, action: int, count: int, records: bytes | None = None
    ) -> internal.RescaleBucketResponse:
        """One step at the bucket's current leader, retried while it fails (a leader moving, the seal
        not pushed yet) for up to STEP_TIMEOUT."""
        request = internal.RescaleBucketRequest(
            table_id=assignment.table_id, bucket_id=assignment.bucket_id, bucket_count=count, action=action
        )
        if assignment.partition_id is not None:
            request.partition_id = assignment.partition_id
        if records is not None:
            request.records = records
        deadline = time.monotonic() + STEP_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            current = next(
                (a for a in self.store.list_buckets(assignment.table_id) if a.key == assignment.key), None
            )
            server = (
                None
                if current is None or current.leader is None
                else self.membership.servers.get(current.leader)
            )
            if server is not None:
                try:
                    response = await self.controller.pool.request(
                        server.host, server.port, ApiKey.RESCALE_BUCKET, request, timeout=STEP_TIMEOUT / 4
                    )
                    assert isinstance(response, internal.RescaleBucketResponse)
                    return response
                except (FlussError, OSError) as e:
                    last = e
                    if isinstance(e, FlussError) and not e.retriable:
                        raise
                    if "not sealed" in str(e):
                        await self._push_table(assignment.table_id)
            await asyncio.sleep(RETRY_INTERVAL)
        raise UnknownServerError(
            f"rescale step {action} on bucket {assignment.key} did not succeed in {STEP_TIMEOUT:.0f} s: "
            f"{last}"
        )


def key_buckets(keys: list[bytes], count: int, descriptor: TableDescriptor) -> list[int]:
    """The bucket of each encoded key under `count`: murmur(key) % count with the hash the table's
    clients use (Fluss's Flink-variant murmur, or the one of its `table.datalake.format`); rescaled
    primary-key tables have the default bucket key, so the key bytes are what is hashed."""
    lake = descriptor.properties.get(TABLE_DATALAKE_FORMAT.key)
    return [int(b) for b in key_bytes_buckets(pa.array(keys, pa.binary()), count, lake)]
