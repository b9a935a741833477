"""A client workload for failure tests and the failover benchmark: the official pyfluss client writes
rows with ids 0, 1, 2... (acks=all, idempotent: pyfluss's defaults) from a thread of its own, one small
flush at a time, and remembers which ids were acknowledged and when. Whatever kills servers meanwhile,
every acknowledged id must be readable afterwards, exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import fluss
import pyarrow as pa

from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb

LOG_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
PK_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


async def create_table(
    bootstrap: str,
    name: str,
    *,
    primary_key: bool = False,
    buckets: int = 1,
    replication: int = 3,
    properties: dict[str, str] | None = None,
) -> None:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        schema = fluss.Schema(PK_SCHEMA, primary_keys=["id"]) if primary_key else fluss.Schema(LOG_SCHEMA)
        await connection.get_admin().create_table(
            fluss.TablePath("fluss", name),
            fluss.TableDescriptor(
                schema,
                bucket_count=buckets,
                properties={"table.replication.factor": str(replication), **(properties or {})},
            ),
            ignore_if_exists=True,
        )
    finally:
        await connection.close()


@dataclass
class AckedWriter:
    bootstrap: str
    table: str
    primary_key: bool = False
    rows_per_flush: int = 10
    # (monotonic time the flush returned, first id, count) of every acknowledged flush
    acks: list[tuple[float, int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> AckedWriter:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        self.wait_for_acks(1)
        return self

    def stop(self) -> set[int]:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(120)
        assert not self._thread.is_alive(), "the writer did not stop"
        return self.acked_ids()

    def acked_ids(self) -> set[int]:
        return {i for _, first, count in list(self.acks) for i in range(first, first + count)}

    def wait_for_acks(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acks) < count:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"only {len(self.acks)} acknowledged flushes in {timeout}s"
            time.sleep(0.02)

    def resumed_after(self, moment: float, timeout: float = 60) -> float:
        """Seconds from `moment` until the first flush acknowledged after it."""
        deadline = time.monotonic() + timeout
        while True:
            later = [t for t, _, _ in list(self.acks) if t > moment]
            if later:
                return min(later) - moment
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"no write acknowledged within {timeout}s"
            time.sleep(0.01)

    async def _run(self) -> None:
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": self.bootstrap}))
        try:
            table = await connection.get_table(fluss.TablePath("fluss", self.table))
            writer: Any = (
                table.new_upsert().create_writer() if self.primary_key else table.new_append().create_writer()
            )
            next_id = 0
            while not self._stop.is_set():
                batch = rows(next_id, self.rows_per_flush)
                if self.primary_key:
                    for row in batch.to_pylist():
                        writer.upsert(row)
                else:
                    writer.write_arrow(batch)
                try:
                    await writer.flush()
                except Exception as e:  # not acknowledged: the ids may or may not be there
                    self.errors.append(f"{type(e).__name__}: {e}")
                    return
                self.acks.append((time.monotonic(), next_id, self.rows_per_flush))
                next_id += self.rows_per_flush
        finally:
            await connection.close()


async def read_log_ids(bootstrap: str, table_name: str, buckets: int = 1) -> list[int]:
    """Every id in a log table, duplicates included."""
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        table = await connection.get_table(fluss.TablePath("fluss", table_name))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
        return sorted((await scanner.to_arrow())["id"].to_pylist())
    finally:
        await connection.close()


async def lookup_missing(bootstrap: str, table_name: str, ids: set[int]) -> list[int]:
    """The ids of a primary-key table that a lookup does not find with their value.

    Strom's client sends the keys in full batches; pyfluss 1.0 would wait its batch timeout per key."""
    from strom.client import Connection

    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        table = await connection.get_table(f"fluss.{table_name}")
        wanted = sorted(ids)
        found = await table.new_lookup().create_lookuper().lookup_many([(i,) for i in wanted])
        return [i for i, row in zip(wanted, found, strict=True) if row is None or row.get("v") != f"v{i}"]


def bucket_leaders(host: str, port: int, table: str) -> dict[int, tuple[int | None, int]]:
    """bucket -> (leader, leader epoch) as the coordinator (or a standby, forwarding) reports it."""

    async def main() -> dict[int, tuple[int | None, int]]:
        connection = await RpcConnection.connect(host, port)
        try:
            request = pb.MetadataRequest()
            request.table_path.add(database_name="fluss", table_name=table)
            response = await connection.request(ApiKey.GET_METADATA, request, timeout=10)
        finally:
            connection.close()
        return {
            b.bucket_id: (b.leader_id if b.HasField("leader_id") else None, b.leader_epoch)
            for b in response.table_metadata[0].bucket_metadata
        }

    return asyncio.run(main())


def wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
