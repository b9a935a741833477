"""Writing and reading test tables with the official pyfluss client, the reference the Spark data
source is compared with."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import fluss
import pyarrow as pa
from harness import run_pyfluss

run = run_pyfluss


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def create_table(
    bootstrap: str,
    name: str,
    schema: pa.Schema,
    buckets: int = 3,
    partition_keys: list[str] | None = None,
    partitions: list[dict[str, str]] | None = None,
    primary_keys: list[str] | None = None,
) -> None:
    path = fluss.TablePath("fluss", name)

    async def body(connection: Any) -> None:
        admin = connection.get_admin()
        fluss_schema = (
            fluss.Schema(schema, primary_keys=primary_keys) if primary_keys else fluss.Schema(schema)
        )
        kwargs: dict[str, Any] = {"bucket_count": buckets}
        if partition_keys:
            kwargs["partition_keys"] = partition_keys
        await admin.create_table(path, fluss.TableDescriptor(fluss_schema, **kwargs))
        for spec in partitions or []:
            await admin.create_partition(path, spec)

    run(bootstrap, body)


def add_partition(bootstrap: str, name: str, spec: dict[str, str]) -> None:
    async def body(connection: Any) -> None:
        await connection.get_admin().create_partition(fluss.TablePath("fluss", name), spec)

    run(bootstrap, body)


def append(bootstrap: str, name: str, data: pa.Table) -> None:
    async def body(connection: Any) -> None:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        writer = table.new_append().create_writer()
        writer.write_arrow(data)
        await writer.flush()

    run(bootstrap, body)


def read_log(bootstrap: str, name: str, buckets: int, partitioned: bool = False) -> pa.Table:
    """Everything in a log table, read with pyfluss's batch scanner."""

    async def body(connection: Any) -> pa.Table:
        path = fluss.TablePath("fluss", name)
        admin = connection.get_admin()
        table = await connection.get_table(path)
        scanner = await table.new_scan().create_record_batch_log_scanner()
        if partitioned:
            partitions = await admin.list_partition_infos(path)
            scanner.subscribe_partition_buckets(
                {(p.partition_id, b): fluss.EARLIEST_OFFSET for p in partitions for b in range(buckets)}
            )
        else:
            scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
        return await scanner.to_arrow()

    return run(bootstrap, body)


def apply_changes(
    bootstrap: str, name: str, upserts: list[dict[str, Any]], deletes: list[dict[str, Any]]
) -> None:
    """Upsert rows, then delete keys, through pyfluss's upsert writer."""

    async def body(connection: Any) -> None:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        writer = table.new_upsert().create_writer()
        for row in upserts:
            writer.upsert(row)
        for key in deletes:
            writer.delete(key)
        await writer.flush()

    run(bootstrap, body)


def lookup_all(bootstrap: str, name: str, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows pyfluss's lookuper finds for these keys (missing keys left out)."""

    async def body(connection: Any) -> list[dict[str, Any]]:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        lookuper = table.new_lookup().create_lookuper()
        # concurrently: the lookuper batches keys that wait together
        found = await asyncio.gather(*(lookuper.lookup(key) for key in keys))
        return [row for row in found if row is not None]

    return run(bootstrap, body)
