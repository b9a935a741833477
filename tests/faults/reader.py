"""The final reads, run inside the client host once the cluster has healed and settled: every bucket of
the log table from the earliest offset by two independent readers (strom.client and pyfluss), every key
of the primary-key table by lookup, and the primary-key table's changelog from the earliest offset.
Writes one JSON object to --out:

    {"log": {reader: [[bucket, offset, id], ...]}, "lookups": {key: value or null},
     "changelog": [[bucket, offset, change type, key, value], ...], "errors": [...]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from .workload import BUCKETS, KEYS_PER_WORKER, LOG_TABLE, PK_TABLE, key_of

READ_TIMEOUT_S = 120


async def read_strom(bootstrap: str, workers: list[int]) -> dict[str, Any]:
    from strom.client import Connection
    from strom.client.scanner import EARLIEST_OFFSET

    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        log = await connection.get_table(f"fluss.{LOG_TABLE}")
        scanner = log.new_scan().create_log_scanner()
        for bucket in range(BUCKETS):
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        records = []
        async with scanner:
            async for batch in scanner.iter_batches(to_end=True):
                ids = batch.batch.column("id").to_pylist()
                records += [[batch.bucket.bucket, batch.base_offset + i, v] for i, v in enumerate(ids)]

        pk = await connection.get_table(f"fluss.{PK_TABLE}")
        keys = [key_of(w, i) for w in workers for i in range(KEYS_PER_WORKER)]
        found = await pk.new_lookup().create_lookuper().lookup_many([(k,) for k in keys])
        lookups = {str(k): (None if row is None else row["v"]) for k, row in zip(keys, found, strict=True)}

        scanner = pk.new_scan().create_log_scanner()
        for bucket in range(BUCKETS):
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        changelog = []
        async with scanner:
            async for batch in scanner.iter_batches(to_end=True):
                kinds = batch.change_type_array().to_pylist()
                ks = batch.batch.column("k").to_pylist()
                vs = batch.batch.column("v").to_pylist()
                changelog += [
                    [batch.bucket.bucket, batch.base_offset + i, kinds[i], ks[i], vs[i]]
                    for i in range(len(ks))
                ]
    return {"log": records, "lookups": lookups, "changelog": changelog}


async def read_pyfluss(bootstrap: str) -> list[list[int]]:
    import fluss

    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        path = fluss.TablePath("fluss", LOG_TABLE)
        ends = await connection.get_admin().list_offsets(
            path, list(range(BUCKETS)), fluss.OffsetSpec.latest()
        )
        table = await connection.get_table(path)
        scanner = await table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(BUCKETS)})
        next_offsets = dict.fromkeys(range(BUCKETS), 0)
        records: list[list[int]] = []
        while any(next_offsets[b] < ends[b] for b in range(BUCKETS)):
            polled = await scanner.poll(1000)
            for bucket in polled.buckets():
                for record in polled.records(bucket):
                    if record.offset < ends[bucket.bucket_id]:
                        row: Any = record.row
                        records.append([bucket.bucket_id, record.offset, row["id"]])
                    next_offsets[bucket.bucket_id] = max(next_offsets[bucket.bucket_id], record.offset + 1)
        return records
    finally:
        await connection.close()


async def main(args: argparse.Namespace) -> None:
    workers = [int(w) for w in args.workers.split(",")]
    out: dict[str, Any] = {"log": {}, "errors": []}
    try:
        ours = await asyncio.wait_for(read_strom(args.bootstrap, workers), READ_TIMEOUT_S)
        out["log"]["strom"] = ours.pop("log")
        out.update(ours)
    except Exception as e:
        out["errors"].append(f"strom.client read: {type(e).__name__}: {e}")
    try:
        out["log"]["pyfluss"] = await asyncio.wait_for(read_pyfluss(args.bootstrap), READ_TIMEOUT_S)
    except Exception as e:
        out["errors"].append(f"pyfluss read: {type(e).__name__}: {e}")
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--workers", required=True, help="comma-separated worker numbers")
    parser.add_argument("--out", required=True)
    asyncio.run(main(parser.parse_args()))
