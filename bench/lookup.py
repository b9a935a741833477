"""Primary-key lookups with `strom.client`: the latency of one caller looking keys up one at a time
(p50, p99), and the keys per second of 64 concurrent callers, against references from the same run: a
rocksdict get plus an asyncio loopback round trip (what one lookup cannot beat), and rocksdict gets of
single keys in one thread (what 64 callers' lookups are made of).

    .venv/bin/python bench/lookup.py [--keys 100000] [--large] [--json]
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from common import Row, cluster, parser, report

from strom.client import Connection
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor

CALLERS = 64


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


async def load(bootstrap: str, keys: int) -> None:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        schema = Schema.from_arrow_schema(
            pa.schema(
                [pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("score", pa.float64())]
            ),
            primary_key=["id"],
        )
        await connection.get_admin().create_table("fluss.lookups", TableDescriptor(schema, bucket_count=2))
        writer = (await connection.get_table("fluss.lookups")).new_upsert().create_writer()
        ids = np.arange(keys, dtype=np.int64)
        writer.write_arrow(
            pa.table({"id": ids, "name": [f"user-{i}" for i in range(keys)], "score": ids * 0.5})
        )
        await writer.flush()


async def strom_lookups(bootstrap: str, keys: int, single: int, seconds: float) -> tuple[list[float], float]:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        lookuper = (await connection.get_table("fluss.lookups")).new_lookup().create_lookuper()
        rng = np.random.default_rng(7)
        latencies = []
        for key in rng.integers(0, keys, single):
            started = time.perf_counter()
            row = await lookuper.lookup({"id": int(key)})
            latencies.append((time.perf_counter() - started) * 1000)
            assert row is not None and row["id"] == key
        done = 0
        start = asyncio.Event()
        deadline = float("inf")

        async def caller(seed: int) -> None:
            nonlocal done
            # keys drawn up front, as the reference's probes are: a numpy draw per lookup costs ~2 us,
            # a fifth of a lookup's own client time
            own = np.random.default_rng(seed).integers(0, keys, 20_000).tolist()
            await start.wait()
            for key in itertools.cycle(own):
                if time.perf_counter() >= deadline:
                    break
                row = await lookuper.lookup({"id": key})
                assert row is not None
                done += 1

        callers = [asyncio.ensure_future(caller(i)) for i in range(CALLERS)]
        await asyncio.sleep(0.1)  # every caller has drawn its keys
        started = time.perf_counter()
        deadline = started + seconds
        start.set()
        await asyncio.gather(*callers)
        return latencies, done / (time.perf_counter() - started)


def rocksdb_references(keys: int, single: int) -> tuple[list[float], float]:
    """(get + loopback round trip latencies in ms, single-key gets per second)."""
    from rocksdict import Options, Rdict, WriteBatch

    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(tmp, Options(raw_mode=True))
        batch = WriteBatch(raw_mode=True)
        for i in range(keys):
            batch.put(i.to_bytes(8, "big"), os.urandom(40))
        db.write(batch)
        rng = np.random.default_rng(7)
        probes = [int(k).to_bytes(8, "big") for k in rng.integers(0, keys, single)]

        async def round_trips() -> list[float]:
            async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                while data := await reader.read(65536):
                    writer.write(data)

            server = await asyncio.start_server(echo, "127.0.0.1", 0)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            latencies = []
            for key in probes:
                started = time.perf_counter()
                writer.write(key)
                value = db.get(key)
                await reader.readexactly(len(key))
                latencies.append((time.perf_counter() - started) * 1000)
                assert value is not None
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()  # the echo handler sees the end of the stream and returns
            return latencies

        latencies = asyncio.run(round_trips())
        started = time.perf_counter()
        for key in probes:
            db.get(key)
        rate = len(probes) / (time.perf_counter() - started)
        db.close()
    return latencies, rate


def main() -> None:
    p_ = parser(__doc__)
    p_.add_argument("--keys", type=int, default=100_000)
    args = p_.parse_args()
    keys = args.keys * (10 if args.large else 1)
    single = 5000 if args.large else 2000
    seconds = 20.0 if args.large else 5.0
    if args.smoke:
        keys, single, seconds, args.runs = 1_000, 100, 0.5, 1
    with cluster() as running:
        asyncio.run(load(running.bootstrap, keys))
        runs = [
            asyncio.run(strom_lookups(running.bootstrap, keys, single, seconds)) for _ in range(args.runs)
        ]
    ref_latencies, ref_rate = rocksdb_references(keys, single)
    p50 = statistics.median(p(latencies, 50) for latencies, _ in runs)
    p99 = statistics.median(p(latencies, 99) for latencies, _ in runs)
    rate = statistics.median(r for _, r in runs)
    report(
        [
            Row(
                "lookup p50, strom.client, one caller",
                p50,
                p(ref_latencies, 50),
                "ms",
                "rocksdict get + loopback RTT",
                higher_is_better=False,
            ),
            Row(
                "lookup p99, strom.client, one caller",
                p99,
                p(ref_latencies, 99),
                "ms",
                "rocksdict get + loopback RTT",
                higher_is_better=False,
                target="p99 < 1 ms",
            ),
            Row(
                f"lookups, {CALLERS} concurrent callers",
                rate,
                ref_rate,
                "keys/s",
                "rocksdict get, one thread",
                target=">= 100k keys/s",
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
