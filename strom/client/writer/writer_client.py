"""One writer machinery per connection: accumulator, sender task and idempotence state, shared by all
append writers of that connection (as in Fluss, where a connection owns one WriterClient).

It starts with the first writer and stops when the connection closes: queued rows are flushed
first (for at most ``client.request-timeout``), then whatever is left fails.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from strom.client.writer.bucket_assigner import (
    NoKeyBucketAssigner,
    RoundRobinBucketAssigner,
    StickyBucketAssigner,
)
from strom.client.writer.errors import WriterClosedError
from strom.client.writer.write_batch import BatchFormat, WriteBatch
from strom.client.writer.writer_machinery import WriterMachinery
from strom.common.config import NoKeyAssigner
from strom.common.table_path import PhysicalTablePath

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["StagingWriter", "WriterClient"]


class StagingWriter(Protocol):
    def route_staged(self) -> None:
        """Queue rows the writer still holds back."""


class WriterClient(WriterMachinery):
    def __init__(self, connection: Connection) -> None:
        super().__init__(connection)
        self._assigners: dict[PhysicalTablePath, NoKeyBucketAssigner] = {}
        self._writers: weakref.WeakSet[StagingWriter] = weakref.WeakSet()

    # ------------------------------------------------------------------ appending

    def no_key_assigner(self, path: PhysicalTablePath, num_buckets: int) -> NoKeyBucketAssigner:
        assigner = self._assigners.get(path)
        if assigner is None:
            if self.config.writer_bucket_no_key_assigner == NoKeyAssigner.ROUND_ROBIN:
                assigner = RoundRobinBucketAssigner(path, num_buckets)
            else:
                assigner = StickyBucketAssigner(path, num_buckets)
            self._assigners[path] = assigner
        return assigner

    def append(
        self,
        path: PhysicalTablePath,
        fmt: BatchFormat,
        records: pa.RecordBatch,
        bucket: int | None,
        num_buckets: int,
    ) -> WriteBatch:
        """Queue Arrow rows for a given bucket, or for the one the no-key assigner picks when `bucket`
        is None; returns the batch they went into."""
        if self.closed:
            raise WriterClosedError("Cannot append: the connection's writer is closed.")
        if bucket is not None:
            outcome = self.accumulator.append(path, bucket, fmt, records)
        else:
            cluster = self.sender.metadata.cluster
            assigner = self.no_key_assigner(path, num_buckets)
            chosen = assigner.assign(cluster)
            outcome = self.accumulator.append(
                path, chosen, fmt, records, abort_if_batch_full=assigner.abort_if_batch_full
            )
            if outcome.batch is None:
                # The sticky bucket's batch is full: move on to another bucket for a fresh batch.
                assigner.on_new_batch(cluster, chosen)
                outcome = self.accumulator.append(path, assigner.assign(cluster), fmt, records)
        assert outcome.batch is not None
        return outcome.batch

    def round_robin_buckets(self, path: PhysicalTablePath, num_buckets: int, count: int) -> np.ndarray | None:
        """A bucket per row under the round-robin assigner; None under the sticky one."""
        assigner = self.no_key_assigner(path, num_buckets)
        if not isinstance(assigner, RoundRobinBucketAssigner):
            return None
        return assigner.assign_many(self.sender.metadata.cluster, count)

    # ------------------------------------------------------------------ flush and close

    def register(self, writer: StagingWriter) -> None:
        self._writers.add(writer)

    def before_close(self) -> None:
        for writer in list(self._writers):
            writer.route_staged()  # rows still waiting to be routed go out with the rest
