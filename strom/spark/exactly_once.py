"""Exactly-once streaming appends to log tables: tasks stage rows, the driver commits each
micro-batch once, fenced by Fluss 1.0 producer offsets.

A log table cannot take rows back, so a micro-batch must not be visible in pieces that a retry
would write again. Tasks therefore write nothing: each returns its prepared rows (Arrow IPC) in its
commit message, and a retried or killed task leaves no trace. The driver's `commit(batch)` then
writes the batch under two producer-offset registrations, whose ids derive from the query's
producer id (``sink.producer-id``, Spark's query id, or its checkpoint location) and the batch id:

1. ``<producer>_<batch>_done`` exists: an earlier driver committed this batch and died before
   Spark's commit log recorded it. Nothing is written.
2. ``<producer>_<batch>`` is registered with every bucket's end offset before the first row is
   written. Registration is write-once, so a driver that re-runs the batch after a crash gets the
   first attempt's offsets back (ALREADY_EXISTS) and knows rows of the batch may already sit above
   them. It reads each bucket from there to its end and writes only the rows of the batch that
   are not found there (as a multiset: a row written twice by the batch counts twice).
3. After the flush, ``<producer>_<batch>_done`` is registered; the previous batch's registrations
   are deleted (Spark runs batch B only once B-1 is in its commit log, so B-1 never runs again).

The recovery read in step 2 cannot tell this query's rows from identical rows another writer
appended to the same buckets while the batch was in flight: such a row would be taken for ours and
not written. docs/spark.md states this limit.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import signal
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from strom.client.admin import Admin
from strom.client.offset_spec import OffsetSpec
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.spark import bridge
from strom.spark.options import ConnectionOptions, SparkOptionError
from strom.spark.read_splits import BucketRange, ReadSpec
from strom.spark.sink import SinkPlan, WriteKind

log = logging.getLogger(__name__)

PRODUCER_ID = "sink.producer-id"
EXACTLY_ONCE = "sink.exactly-once"
# Test-only fault point, "<batch id>@<process group>": that micro-batch's commit SIGKILLs the
# driver's process group (exactly once: after half the rows are flushed; at least once: after the
# tasks wrote). Spark runs the commit in a Python worker outside that group, which dies too.
CRASH_ENV = "STROM_TEST_SPARK_CRASH"
# Test-only fault point, "<batch id>@<marker file>[@executor]": the first attempt of every task of
# that micro-batch SIGKILLs its own Python worker (with "@executor": the executor's JVM, on a
# cluster) after touching the marker, once its rows are staged (exactly once) or written and
# flushed (at least once), before it reports: an executor lost mid-micro-batch. Spark then runs the
# task again.
TASK_CRASH_ENV = "STROM_TEST_SPARK_TASK_CRASH"
CHECKPOINT_LOCATION = "checkpointLocation"
# Spark's streaming query id (kept in the checkpoint, the same after a restart), which Strom's JVM
# glue (FlussTable.newWriteBuilder) adds to a write's options.
QUERY_ID = "__spark.query-id"
# Registrations must outlive a query that is down for a while: a batch whose rows were written but
# not yet in Spark's commit log is recognised only while its `_done` registration lives.
REGISTRATION_TTL_MS = 30 * 24 * 3600 * 1000
_VALID = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass
class StagedRows(WriterCommitMessage):
    """One task's prepared rows, as an Arrow IPC stream (empty bytes when it had none)."""

    rows: int
    ipc: bytes


def enabled(options: Mapping[str, str]) -> bool:
    raw = str(options.get(EXACTLY_ONCE, "true")).strip().lower()
    if raw not in ("true", "false"):
        raise SparkOptionError(f"Invalid value for '{EXACTLY_ONCE}': '{raw}'. Use true or false.")
    return raw == "true"


def _crash_requested(batch_id: int) -> int | None:
    """The process group to kill when a test asked for a crash in this micro-batch."""
    batch, _, group = os.environ.get(CRASH_ENV, "").partition("@")
    return int(group) if batch == str(batch_id) and group else None


def crash_point(batch_id: int) -> None:
    """Kill the whole driver (the Python driver and its JVM) when a test asked for it here."""
    group = _crash_requested(batch_id)
    if group is not None:
        log.warning("Test fault point: killing the driver in micro-batch %s", batch_id)
        os.killpg(group, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def task_crash_point() -> None:
    """In a task: kill this Python worker when a test asked for it in this micro-batch's first attempt."""
    batch, _, rest = os.environ.get(TASK_CRASH_ENV, "").partition("@")
    if not batch:
        return
    marker, _, target = rest.partition("@")
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.attemptNumber() != 0:
        return
    if context.getLocalProperty("streaming.sql.batchId") != batch:
        return
    log.warning("Test fault point: killing the Python worker of task %s", context.taskAttemptId())
    with open(marker, "a") as out:
        out.write(f"{context.taskAttemptId()}\n")
    if target == "executor":
        os.kill(_executor_jvm(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves (an ancestor: the JVM starts the daemon
    that forks the workers)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent's pid
    raise RuntimeError("Test fault point: no executor JVM above this Python worker (local mode?)")


def producer_id(options: Mapping[str, str]) -> str:
    """The stable name of a streaming query's registrations: ``sink.producer-id``, else Spark's query
    id (with the JVM glue), else one derived from the checkpoint location. The query id is best: a
    new checkpoint at an old location is a new query and must not find the old one's registrations."""
    given = options.get(PRODUCER_ID)
    if given is not None:
        if not _VALID.match(given):
            raise SparkOptionError(
                f"Invalid value for '{PRODUCER_ID}': '{given}'. Use 1-100 letters, digits, '_' or '-'."
            )
        return given
    query = options.get(QUERY_ID)
    if query:
        return "spark_" + re.sub(r"[^A-Za-z0-9_-]", "_", query)[:90]
    checkpoint = options.get(CHECKPOINT_LOCATION)
    if checkpoint is None:
        raise SparkOptionError(
            "Exactly-once streaming appends to a log table need a stable producer id: set option "
            f"'{CHECKPOINT_LOCATION}' on the writeStream (the id derives from it) or '{PRODUCER_ID}'."
        )
    return "spark_" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:32]


def stage(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> StagedRows:
    """A task's rows prepared for the table, kept for the driver instead of written."""
    sink = io.BytesIO()
    writer: pa.ipc.RecordBatchStreamWriter | None = None
    rows = 0
    for batch in batches:
        prepared = plan.prepare(batch)
        if prepared is None:
            continue
        _, cast = prepared
        if writer is None:
            writer = pa.ipc.new_stream(sink, plan.arrow_schema)
        writer.write_batch(cast)
        rows += cast.num_rows
    if writer is None:
        return StagedRows(0, b"")
    writer.close()
    return StagedRows(rows, sink.getvalue())


def _unstage(plan: SinkPlan, messages: list[WriterCommitMessage | None]) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, StagedRows):
            raise TypeError(f"Unexpected commit message {type(message).__name__} for an exactly-once write")
        if message.ipc:
            batches.extend(pa.ipc.open_stream(message.ipc))
    return pa.Table.from_batches(batches, schema=plan.arrow_schema)


async def _end_offsets(admin: Admin, table: TableInfo) -> dict[TableBucket, int]:
    buckets = range(table.bucket_count)
    if not table.is_partitioned:
        ends = await admin.list_offsets(table.table_path, buckets, OffsetSpec.latest())
        return {TableBucket(table.table_id, None, b): o for b, o in ends.items()}
    out: dict[TableBucket, int] = {}
    for partition in await admin.list_partition_infos(table.table_path):
        ends = await admin.list_offsets(
            table.table_path, buckets, OffsetSpec.latest(), partition_name=partition.partition_name
        )
        out.update({TableBucket(table.table_id, partition.partition_id, b): o for b, o in ends.items()})
    return out


def _partition_names(connection: ConnectionOptions, table: TableInfo) -> dict[int, str]:
    if not table.is_partitioned:
        return {}
    infos = bridge.run_admin(connection, lambda a: a.list_partition_infos(table.table_path))
    return {p.partition_id: p.partition_name for p in infos}


def _already_written(
    connection: ConnectionOptions, plan: SinkPlan, start: Mapping[TableBucket, int]
) -> Counter[str]:
    """The rows in every bucket from the first attempt's registered offsets to the end."""
    table = plan.table
    ends = bridge.run_admin(connection, lambda a: _end_offsets(a, table))
    names = _partition_names(connection, table)
    ranges = [
        # A bucket the registration does not name (a partition created since) starts at 0.
        BucketRange(
            b.partition_id,
            names.get(b.partition_id) if b.partition_id is not None else None,
            b.bucket,
            start.get(b, 0),
            end,
        )
        for b, end in ends.items()
    ]
    spec = ReadSpec(
        connection.bootstrap_servers,
        connection.client,
        table,
        plan.columns,
        merge_by_key=False,
        include_change_type=False,
        include_metadata=False,
        predicate=None,
        spark_schema_json="",
    )
    found: Counter[str] = Counter()
    for scanned in bridge.scan(spec, ranges):
        found.update(_key(r) for r in scanned.batch.select(list(plan.columns)).to_pylist())
    return found


def _key(row: dict[str, Any]) -> str:
    # repr, not the tuple: lists and maps in rows are not hashable.
    return repr(tuple(row.values()))


def _missing(rows: pa.Table, found: Counter[str]) -> pa.Table:
    """`rows` without one occurrence of each row in `found`."""
    keep = []
    for i, row in enumerate(rows.to_pylist()):
        key = _key(row)
        if found[key] > 0:
            found[key] -= 1
        else:
            keep.append(i)
    return rows.take(pa.array(keep, pa.int64()))


async def _forget(admin: Admin, producer: str, batch_id: int) -> None:
    for name in (f"{producer}_{batch_id}", f"{producer}_{batch_id}_done"):
        await admin.delete_producer_offsets(name)


def commit_batch(
    connection: ConnectionOptions,
    plan: SinkPlan,
    producer: str,
    batch_id: int,
    messages: list[WriterCommitMessage | None],
) -> int:
    """Write micro-batch `batch_id` once; answers how many rows this call wrote."""
    started, done = f"{producer}_{batch_id}", f"{producer}_{batch_id}_done"
    if bridge.run_admin(connection, lambda a: a.get_producer_offsets(done)) is not None:
        log.info(
            "Micro-batch %s of producer %s was committed before; not writing it again", batch_id, producer
        )
        return 0
    rows = _unstage(plan, messages)
    ends = bridge.run_admin(connection, lambda a: _end_offsets(a, plan.table))
    fresh = bridge.run_admin(
        connection, lambda a: a.register_producer_offsets(started, ends, ttl_ms=REGISTRATION_TTL_MS)
    )
    if not fresh:
        registered = bridge.run_admin(connection, lambda a: a.get_producer_offsets(started))
        if registered is None:
            raise RuntimeError(
                f"Producer offsets '{started}' vanished while micro-batch {batch_id} was recovered"
            )
        found = _already_written(connection, plan, registered.offsets)
        before = rows.num_rows
        rows = _missing(rows, found)
        log.warning(
            "Micro-batch %s of producer %s was partly written by an earlier attempt: %d of %d rows "
            "found in the table, writing the other %d",
            batch_id,
            producer,
            before - rows.num_rows,
            before,
            rows.num_rows,
        )
    half = rows.num_rows // 2 if _crash_requested(batch_id) is not None else rows.num_rows
    for part in (rows.slice(0, half), rows.slice(half)):
        with bridge.table_writer(connection, plan) as writer:
            for chunk in part.to_batches():
                writer.write(WriteKind.APPEND, chunk)
        if part.num_rows and half < rows.num_rows:
            crash_point(batch_id)
    after = bridge.run_admin(connection, lambda a: _end_offsets(a, plan.table))
    bridge.run_admin(
        connection, lambda a: a.register_producer_offsets(done, after, ttl_ms=REGISTRATION_TTL_MS)
    )
    if batch_id > 0:
        bridge.run_admin(connection, lambda a: _forget(a, producer, batch_id - 1))
    return rows.num_rows
