"""pyfluss and a rescaled table (docs/operations.md, "Rescaling buckets").

A pyfluss connection opened after a 2 -> 6 rescale routes by 6 buckets: it finds every key written
before the rescale and writes new keys to the buckets the servers accept. (One opened before keeps
retrying what it routed by 2: the servers refuse those requests retriably, and pyfluss does not read
the bucket count again, so a connection must be opened anew; see the docs.)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import fluss
import pyarrow as pa
from harness import Cluster, run_pyfluss

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.table_change import TableChange
from strom.common.bucketing import fluss_bucket
from strom.common.types import INT
from strom.record.key_encoder import CompactedKeyEncoder

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string())])
KEYS = CompactedKeyEncoder([INT()])


def _keys_in(bucket: int, start: int) -> list[int]:
    """The first two keys from `start` on that hash to `bucket` of 6."""
    return [k for k in range(start, start + 300) if fluss_bucket(KEYS.encode([k]), 6) == bucket][:2]


def test_pyfluss_connected_after_a_rescale_routes_by_the_new_count(shared_cluster: Cluster) -> None:
    name = f"rescale_pyfluss_{uuid.uuid4().hex[:8]}"
    path = TablePath("fluss", name)

    async def prepare() -> None:
        async with await Connection.create({"bootstrap.servers": shared_cluster.bootstrap}) as conn:
            schema = Schema.from_arrow_schema(SCHEMA, ["id"])
            await conn.get_admin().create_table(path, TableDescriptor(schema, bucket_count=2))
            table = await conn.get_table(path)
            async with table.new_upsert().create_writer() as writer:
                for i in range(300):
                    writer.upsert({"id": i, "name": f"old{i}"})
            await conn.get_admin().alter_table(path, [TableChange.set_option("bucket.num", "6")])

    asyncio.run(prepare())

    async def body(connection: Any) -> None:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        writer = table.new_upsert().create_writer()
        for i in range(300, 600):
            writer.upsert({"id": i, "name": f"new{i}"})
        await writer.flush()  # a key routed to a bucket it does not hash to would be refused
        # two keys written before and two after the rescale in each of the 6 buckets (a pyfluss
        # lookup costs ~0.1 s, whatever the table)
        keys = [k for start in (0, 300) for b in range(6) for k in _keys_in(b, start)]
        lookuper = table.new_lookup().create_lookuper()
        rows = await asyncio.gather(*(lookuper.lookup({"id": k}) for k in keys))
        assert [r and r["name"] for r in rows] == [f"old{k}" if k < 300 else f"new{k}" for k in keys]

    run_pyfluss(shared_cluster.bootstrap, body)
