"""The campaign's clients, run inside the client host: one worker per process, on the official pyfluss
client or on strom.client, appending to the RF-3 log table with acks=all, upserting and deleting keys of
its own in the RF-3 primary-key table, and looking keys up, one operation at a time, until a stop file
appears. Every operation goes to the history file as one JSON line when it ends:

    {"worker", "client", "op", "args", "start", "end", "outcome", "value", "error"}

`outcome` is "ok" (acknowledged), "fail" (certainly not applied: refused before it was sent) or
"unknown" (an error or a timeout: it may have happened, now or later). Times are CLOCK_MONOTONIC, which
all processes of the machine share, so the campaign can place operations in its rounds.

Ids are unique over the run: worker w's n-th id is w * ID_SPAN + n, so a record read back names the
operation that wrote it. Each worker writes only its own keys, so every key has a single writer whose
operations are ordered in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pyarrow as pa

LOG_TABLE = "events"
PK_TABLE = "accounts"
TABLES = [LOG_TABLE, PK_TABLE]
BUCKETS = 3
ID_SPAN = 10_000_000
KEYS_PER_WORKER = 24
OP_TIMEOUT_S = 10.0
LOG_SCHEMA = pa.schema([("id", pa.int64()), ("worker", pa.int32())])
PK_SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
TABLE_PROPERTIES = {
    "table.replication.factor": "3",
    "table.datalake.enabled": "true",
    "table.datalake.freshness": "2s",
}


def key_of(worker: int, index: int) -> int:
    return worker * ID_SPAN + index


async def setup(bootstrap: str) -> None:
    """Creates the two tables (idempotent), with pyfluss as a user would."""
    import fluss

    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        admin = connection.get_admin()
        await admin.create_database("fluss", ignore_if_exists=True)
        for name, schema in (
            (LOG_TABLE, fluss.Schema(LOG_SCHEMA)),
            (PK_TABLE, fluss.Schema(PK_SCHEMA, primary_keys=["k"])),
        ):
            await admin.create_table(
                fluss.TablePath("fluss", name),
                fluss.TableDescriptor(schema, bucket_count=BUCKETS, properties=TABLE_PROPERTIES),
                ignore_if_exists=True,
            )
    finally:
        await connection.close()


class Session(ABC):
    """One client's connection and its writers; replaced whole after an error, since a writer whose
    flush failed or timed out may still hold (and later send) what it was given."""

    @abstractmethod
    async def open(self, bootstrap: str) -> None:
        ...

    @abstractmethod
    async def append(self, ids: list[int], worker: int) -> None:
        ...

    @abstractmethod
    async def upsert(self, key: int, value: int) -> None:
        ...

    @abstractmethod
    async def delete(self, key: int) -> None:
        ...

    @abstractmethod
    async def lookup(self, key: int) -> int | None:
        ...

    @abstractmethod
    async def close(self) -> None:
        ...


class PyFlussSession(Session):
    async def open(self, bootstrap: str) -> None:
        import fluss

        config = {"bootstrap.servers": bootstrap, "writer.acks": "all"}
        self.connection = await fluss.FlussConnection.create(fluss.Config(config))
        log = await self.connection.get_table(fluss.TablePath("fluss", LOG_TABLE))
        pk = await self.connection.get_table(fluss.TablePath("fluss", PK_TABLE))
        self.appender = log.new_append().create_writer()
        self.upserter = pk.new_upsert().create_writer()
        self.lookuper = pk.new_lookup().create_lookuper()

    async def append(self, ids: list[int], worker: int) -> None:
        self.appender.write_arrow(
            pa.table({"id": pa.array(ids, pa.int64()), "worker": pa.array([worker] * len(ids), pa.int32())})
        )
        await self.appender.flush()

    async def upsert(self, key: int, value: int) -> None:
        self.upserter.upsert({"k": key, "v": value})
        await self.upserter.flush()

    async def delete(self, key: int) -> None:
        self.upserter.delete({"k": key})
        await self.upserter.flush()

    async def lookup(self, key: int) -> int | None:
        row: Any = await self.lookuper.lookup({"k": key})
        return None if row is None else int(row["v"])

    async def close(self) -> None:
        await self.connection.close()


class StromSession(Session):
    async def open(self, bootstrap: str) -> None:
        from strom.client import Connection

        self.connection = await Connection.create(
            {"bootstrap.servers": bootstrap, "client.writer.acks": "all"}
        )
        log = await self.connection.get_table(f"fluss.{LOG_TABLE}")
        pk = await self.connection.get_table(f"fluss.{PK_TABLE}")
        self.appender = log.new_append().create_writer()
        self.upserter = pk.new_upsert().create_writer()
        self.lookuper = pk.new_lookup().create_lookuper()

    async def append(self, ids: list[int], worker: int) -> None:
        for i in ids:
            self.appender.append({"id": i, "worker": worker})
        await self.appender.flush()

    async def upsert(self, key: int, value: int) -> None:
        self.upserter.upsert({"k": key, "v": value})
        await self.upserter.flush()

    async def delete(self, key: int) -> None:
        self.upserter.delete({"k": key})
        await self.upserter.flush()

    async def lookup(self, key: int) -> int | None:
        row = await self.lookuper.lookup((key,))
        return None if row is None else int(row["v"])

    async def close(self) -> None:
        await self.connection.close()


SESSIONS: dict[str, type[Session]] = {"pyfluss": PyFlussSession, "strom": StromSession}


async def run_worker(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed * 1000 + args.worker)
    stop = Path(args.stop)
    history = open(args.history, "a", buffering=1)  # noqa: SIM115 - one line per operation, flushed
    next_index = 0
    session: Session | None = None

    def record(
        op: str, op_args: dict[str, Any], start: float, outcome: str, value: Any = None, error: str = ""
    ) -> None:
        entry = {
            "worker": args.worker,
            "client": args.client,
            "op": op,
            "args": op_args,
            "start": start,
            "end": time.monotonic(),
            "wall_start": time.time() - (time.monotonic() - start),  # to find it in the servers' logs
            "outcome": outcome,
            "value": value,
            "error": error[:300],
        }
        history.write(json.dumps(entry) + "\n")

    try:
        while not stop.exists():
            if session is None:
                try:
                    candidate = SESSIONS[args.client]()
                    await asyncio.wait_for(candidate.open(args.bootstrap), OP_TIMEOUT_S)
                    session = candidate
                except Exception:
                    await asyncio.sleep(0.5)  # the cluster is partitioned from us, or electing
                    continue
            roll = rng.random()
            start = time.monotonic()
            op_args: dict[str, Any]
            call: Coroutine[Any, Any, int | None]
            if roll < 0.5:
                count = rng.randint(1, 5)
                ids = [key_of(args.worker, next_index + i) for i in range(count)]
                next_index += count
                op, op_args, call = "append", {"ids": ids}, session.append(ids, args.worker)
            elif roll < 0.75:
                key = key_of(args.worker, rng.randrange(KEYS_PER_WORKER))
                value = key_of(args.worker, next_index)
                next_index += 1
                op, op_args, call = "upsert", {"key": key, "value": value}, session.upsert(key, value)
            elif roll < 0.8:
                key = key_of(args.worker, rng.randrange(KEYS_PER_WORKER))
                op, op_args, call = "delete", {"key": key}, session.delete(key)
            else:
                key = key_of(args.worker, rng.randrange(KEYS_PER_WORKER))
                op, op_args, call = "lookup", {"key": key}, session.lookup(key)
            try:
                result = await asyncio.wait_for(call, OP_TIMEOUT_S)
                record(op, op_args, start, "ok", result)
            except Exception as e:
                # a write that raised or timed out may still be applied; a failed read changed nothing
                record(
                    op,
                    op_args,
                    start,
                    "fail" if op == "lookup" else "unknown",
                    error=f"{type(e).__name__}: {e}",
                )
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(session.close(), 5)
                session = None
            if args.pause:
                await asyncio.sleep(args.pause)
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.close(), 5)
        history.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--setup", action="store_true", help="create the tables and exit")
    parser.add_argument("--client", choices=sorted(SESSIONS), default="pyfluss")
    parser.add_argument("--worker", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--history")
    parser.add_argument("--stop")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between operations")
    args = parser.parse_args()
    if args.setup:
        asyncio.run(setup(args.bootstrap))
    else:
        asyncio.run(run_worker(args))


if __name__ == "__main__":
    main()
