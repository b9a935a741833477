"""A live tablet server that misses a coordinator push (packet loss, not a crash) gets it again.

Server 1 is reached through a LossyProxy. While the proxy loses everything, AlterTable adds a column:
the UpdateMetadata to server 1 times out, and server 1 stays registered (its heartbeats go direct).
Before the coordinator resent failed pushes, server 1 refused batches of the new schema until it
restarted; now the coordinator sends it the table's current metadata again once the loss ends.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow as pa
from harness import Cluster
from lossy_proxy import LossyProxy

from strom.client import Connection, Schema, TableChange, TableDescriptor, TablePath
from strom.client.scanner import EARLIEST_OFFSET

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PATH = TablePath("fluss", "altered_behind_loss")


def test_a_server_that_lost_an_update_metadata_gets_it_again(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", tablet_servers=2)
    proxy = LossyProxy(cluster.tablet_servers[1].port).start()
    server = cluster.tablet_servers[1]
    server.config = {**server.config, "advertised.listeners": f"FLUSS://127.0.0.1:{proxy.port}"}
    try:
        cluster.start()
        asyncio.run(scenario(cluster, proxy))
        log = cluster.coordinator.log_path.read_text()  # type: ignore[union-attr]
        assert "UPDATE_METADATA to tablet server 1 failed" in log
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
        proxy.stop()


async def scenario(cluster: Cluster, proxy: LossyProxy) -> None:
    properties = {"bootstrap.servers": cluster.bootstrap, "client.request-timeout": "30s"}
    async with await Connection.create(properties) as conn:
        admin = conn.get_admin()
        one_replica = {"table.replication.factor": "1"}  # a bucket led by each server
        await admin.create_table(
            PATH, TableDescriptor(Schema.from_arrow_schema(SCHEMA), bucket_count=2, properties=one_replica)
        )
        writer = (await conn.get_table(PATH)).new_append().create_writer()
        writer.append({"id": 0, "name": "before"})
        await writer.flush()

        proxy.drop()
        started = time.monotonic()
        await admin.alter_table(PATH, [TableChange.add_column("note", "STRING")])
        assert time.monotonic() - started > 5  # it waited for the lost UpdateMetadata to time out
        proxy.heal()
        assert proxy.lost_bytes > 0

        await wait_for_log(cluster, "tablet server 1 acknowledged the metadata it had missed")
        table = await conn.get_table(PATH)
        assert table.schema_id == 2
        writer = table.new_append().create_writer()
        for i in range(1, 21):  # to both buckets
            writer.append({"id": i, "name": "after", "note": f"n{i}"})
        await asyncio.wait_for(writer.flush(), 20)
        scanner = table.new_scan().create_log_scanner()
        for bucket in range(2):
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        async with scanner:
            rows = pa.Table.from_batches(
                [b.batch async for b in scanner.iter_batches(to_end=True)], schema=scanner.arrow_schema
            )
        assert sorted(rows.column("id").to_pylist()) == list(range(21))
        notes = rows.column("note").to_pylist()
        assert sorted(n for n in notes if n) == sorted(f"n{i}" for i in range(1, 21))


async def wait_for_log(cluster: Cluster, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in cluster.coordinator.log_path.read_text():  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"the coordinator never logged {text!r}"
        await asyncio.sleep(0.1)
