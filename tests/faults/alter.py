"""The client side of the `alter_one_way` scenario, run inside the client host, one phase per call:

    create  a log table (3 buckets, RF 3) with rows of schema 1
    alter   AddColumn while the coordinators' packets to one tablet server are dropped
    write   after the heal, rows of the new schema into every bucket, through a writer of the new table

Prints one JSON line: {"ok": true, ...} or {"ok": false, "error": ...}. Exit code 0 either way; the
campaign judges.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import pyarrow as pa

BUCKETS = 3
# An application retries a refused write; the server learns the schema within a few seconds (once its own
# connection to the coordinator, broken by the cut, is replaced), never before the fix.
WRITE_DEADLINE_S = 30.0
ATTEMPT_TIMEOUT_S = 5.0


async def phase(name: str, bootstrap: str, table: str) -> dict[str, Any]:
    from strom.client import Connection, Schema, TableChange, TableDescriptor, TablePath

    path = TablePath("fluss", table)
    settings = {"bootstrap.servers": bootstrap, "client.writer.acks": "all"}
    async with await Connection.create(settings) as connection:
        admin = connection.get_admin()
        if name == "create":
            schema = Schema.from_arrow_schema(pa.schema([("id", pa.int64()), ("name", pa.string())]))
            properties = {"table.replication.factor": "3"}
            # hashed on id: every write reaches every bucket, the one the victim leads among them
            descriptor = TableDescriptor(
                schema, bucket_count=BUCKETS, bucket_keys=["id"], properties=properties
            )
            await admin.create_table(path, descriptor)
            writer = (await connection.get_table(path)).new_append().create_writer()
            for i in range(30):
                writer.append({"id": i, "name": f"n{i}"})
            await writer.flush()
            return {"ok": True}
        if name == "alter":
            await admin.alter_table(path, [TableChange.add_column("extra", "STRING")])
            return {"ok": True, "schema_id": (await connection.get_table(path)).schema_id}
        if name == "write":
            started = time.monotonic()
            table_v2 = await connection.get_table(path)
            errors: list[str] = []
            while True:
                writer = table_v2.new_append().create_writer()  # a fresh writer per attempt, as an app would
                for i in range(100, 160):
                    writer.append({"id": i, "name": f"n{i}", "extra": f"e{i}"})
                try:
                    await asyncio.wait_for(writer.flush(), ATTEMPT_TIMEOUT_S)
                    break
                except Exception as e:
                    errors.append(f"{type(e).__name__}: {e}"[:200])
                    if time.monotonic() - started > WRITE_DEADLINE_S:
                        return {
                            "ok": False,
                            "error": f"{len(errors)} attempts in {WRITE_DEADLINE_S:.0f} s, "
                            f"first {errors[0]}, last {errors[-1]}",
                        }
                    await asyncio.sleep(1)
            seconds = round(time.monotonic() - started, 2)
            return {
                "ok": True,
                "schema_id": table_v2.schema_id,
                "seconds": seconds,
                "attempts": len(errors) + 1,
            }
    raise ValueError(f"unknown phase {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("phase", choices=["create", "alter", "write"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    try:
        result = asyncio.run(asyncio.wait_for(phase(args.phase, args.bootstrap, args.table), 90))
    except Exception as e:
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
