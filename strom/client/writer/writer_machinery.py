"""The machinery behind a connection's writers: idempotence state, accumulator and sender task, with
flushing and closing. `WriterClient` (log tables) and `KvWriterClient` (primary-key tables) differ
only in the accumulator and sender they plug in and in how they queue records."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from strom.client.writer.accumulator import RecordAccumulator
from strom.client.writer.errors import WriterClosedError
from strom.client.writer.idempotence import IdempotenceManager
from strom.client.writer.sender import PartitionCreator, Sender
from strom.client.writer.write_batch import WriteBatch
from strom.common.table_path import TablePath

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["WriterMachinery"]

log = logging.getLogger(__name__)


class WriterMachinery:
    accumulator_type: type[RecordAccumulator] = RecordAccumulator
    sender_type: type[Sender] = Sender
    description = "writer"  # in the log message of a close that could not drain

    def __init__(self, connection: Connection) -> None:
        config = connection.config
        self.config = config
        self.idempotence = IdempotenceManager(
            config.writer_enable_idempotence, config.writer_max_inflight_requests_per_bucket
        )
        self.accumulator = self.accumulator_type(config, self.idempotence)
        create_partition: PartitionCreator | None = None
        if config.writer_dynamic_create_partition_enabled:
            admin = connection.get_admin()

            async def create(path: TablePath, spec: dict[str, str]) -> None:
                await admin.create_partition(path, spec, ignore_if_exists=True)

            create_partition = create

        self.sender = self.sender_type(
            connection.metadata, connection.pool, config, self.accumulator, self.idempotence, create_partition
        )
        self.sender.start()
        self.closed = False

    async def flush(self) -> list[WriteBatch]:
        """Send everything queued now and wait until it is acknowledged or failed; returns those batches."""
        batches = self.accumulator.incomplete()
        if not batches:
            return []
        self.accumulator.begin_flush()
        try:
            await asyncio.gather(*(asyncio.shield(b.future) for b in batches), return_exceptions=True)
        finally:
            self.accumulator.end_flush()
        return batches

    def before_close(self) -> None:
        """Queue whatever writers still hold back, so that it goes out with the rest."""

    async def close(self) -> None:
        if self.closed:
            return
        self.before_close()
        self.closed = True
        self.accumulator.close()
        timeout = self.config.request_timeout.total_seconds()
        try:
            await asyncio.wait_for(self.flush(), timeout)
            await asyncio.wait_for(self.sender.stop(), timeout)
        except TimeoutError:
            log.warning(
                "%s did not drain within %.1fs of closing; failing what is left", self.description, timeout
            )
            await self.sender.abort()
            error = WriterClosedError("The connection closed before the write was acknowledged.")
            self.accumulator.fail_all_queued(error)
            for batch in self.accumulator.incomplete():
                self.accumulator.finished(batch)
                batch.fail(error)
