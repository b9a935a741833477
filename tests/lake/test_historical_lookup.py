"""Lookups of expired partitions answered from the lake (Fluss's FIP-28, apache/fluss#3630), end to end:
a Paimon-tiered, auto-partitioned primary-key table with `table.datalake.historical-partition.enabled`
is written, tiered by the real tiering service, and the old partition is dropped from Fluss. A
strom.client lookup of a key of that partition then finds the lake's row (through the table's
`__historical__` partition); a key the lake does not hold, and a missing partition that is not in the
past, find nothing. pyfluss, whose lookuper does not send historical lookups (as with Fluss), finds
nothing there."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster
from lake_helpers import upsert
from paimon_helpers import PaimonTiering, paimon_bucket_of, paimon_info, paimon_storage
from test_tiering_service import session, start_tiering

from strom.client import Connection, Schema, TableDescriptor, TablePath
from strom.client.lookup.historical import is_past_auto_partition
from strom.common import types as T
from strom.common.errors import InvalidTableError, PartitionNotExistError, PartitionSpecInvalidError
from strom.common.partition import HISTORICAL_PARTITION_VALUE
from strom.lake.paimon.storage import PaimonLakeStorage
from strom.record.compacted_row import CompactedRowEncoder
from strom.server.tablet.historical_lookup import HistoricalLookup
from strom.server.tablet.kv.recovery import table_key_encoder

OLD = "20200101"  # a past DAY partition
PROPERTIES = {
    "table.auto-partition.enabled": "true",
    "table.auto-partition.time-unit": "DAY",
    "table.auto-partition.num-precreate": "1",
    "table.auto-partition.num-retention": "-1",  # the test drops the old partition itself, once tiered
    "table.datalake.enabled": "true",
    "table.datalake.format": "paimon",
    "table.datalake.freshness": "1s",
    "table.datalake.historical-partition.enabled": "true",
}
ROWS = [{"dt": OLD, "id": i, "v": f"old-{i}"} for i in range(20)]


def test_lookup_of_an_expired_partition_is_answered_from_the_lake(
    cluster_factory: Any, tmp_path: Path
) -> None:
    config = {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(tmp_path / "warehouse"),
    }
    cluster: Cluster = cluster_factory(tablet_servers=1, config=config)
    path = TablePath("fluss", "orders")
    lake = PaimonLakeStorage({"metastore": "filesystem", "warehouse": str(tmp_path / "warehouse")})

    def lake_count() -> int:
        try:
            table = lake.catalog().load_table(path)
        except Exception:
            return 0
        builder = table.new_read_builder().with_projection(["dt", "id"])
        result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        return 0 if result is None else sum(1 for d in result.column("dt").to_pylist() if d == OLD)

    async def write() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            admin = conn.get_admin()
            schema = Schema.from_arrow_schema(
                pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.string())]),
                primary_key=["dt", "id"],
            )
            await admin.create_table(
                path, TableDescriptor(schema, partition_keys=["dt"], bucket_count=2, properties=PROPERTIES)
            )
            names = {p.partition_name for p in await admin.list_partition_infos(path)}
            assert HISTORICAL_PARTITION_VALUE in names
            await admin.create_partition(path, {"dt": OLD})
            writer = (await conn.get_table(path)).new_upsert().create_writer()
            for row in ROWS:
                await writer.upsert(row)
            await writer.delete({"dt": OLD, "id": 19, "v": None})  # the lake's copy has no id 19
            await writer.flush()

    asyncio.run(asyncio.wait_for(write(), 60))
    tiering = start_tiering(cluster, config, tmp_path / "tiering.log")
    try:
        deadline = time.monotonic() + 90
        while lake_count() < len(ROWS) - 1:
            assert time.monotonic() < deadline, "the lake never received the old partition"
            time.sleep(0.5)
    finally:
        tiering.terminate()
        tiering.wait(10)

    async def expire_and_look_up() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            await conn.get_admin().drop_partition(path, {"dt": OLD})
            lookuper = (await conn.get_table(path)).new_lookup().create_lookuper()
            assert await lookuper.lookup({"dt": OLD, "id": 3}) == {"dt": OLD, "id": 3, "v": "old-3"}
            many = await lookuper.lookup_many([{"dt": OLD, "id": i} for i in (0, 7, 19, 99)])
            old = [{"dt": OLD, "id": i, "v": f"old-{i}"} for i in (0, 7)]
            assert many == [*old, None, None]
            # a missing partition in the future may still be created: not asked from the lake
            assert await lookuper.lookup({"dt": "29990101", "id": 3}) is None

    asyncio.run(asyncio.wait_for(expire_and_look_up(), 60))

    async def pyfluss_lookup(connection: Any) -> Any:
        table = await connection.get_table(fluss.TablePath("fluss", "orders"))
        return await table.new_lookup().create_lookuper().lookup({"dt": OLD, "id": 3})

    # pyfluss sends no historical lookups (nor does it against Fluss): the key is not found
    assert session(cluster, pyfluss_lookup) is None

    # Writes to an expired partition are refused, as Fluss 1.0 refuses them (its CreatePartition
    # checks the partition time against retention): the write would create the partition again,
    # and retention drop it with the new records. A table that keeps one day: OLD is out of date.
    kept = TablePath("fluss", "recent")

    async def write_expired() -> None:
        async with await Connection.create({"bootstrap.servers": cluster.bootstrap}) as conn:
            schema = Schema.from_arrow_schema(
                pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.string())]),
                primary_key=["dt", "id"],
            )
            retained = {**PROPERTIES, "table.auto-partition.num-retention": "1"}
            await conn.get_admin().create_table(
                kept, TableDescriptor(schema, partition_keys=["dt"], bucket_count=1, properties=retained)
            )
            writer = (await conn.get_table(kept)).new_upsert().create_writer()
            with pytest.raises(PartitionSpecInvalidError, match=f"'{OLD}' .* is out-of-date"):
                await writer.upsert({"dt": OLD, "id": 1, "v": "late"})
                await writer.flush()
            with pytest.raises(PartitionSpecInvalidError, match="does not match the expected format"):
                await conn.get_admin().create_partition(kept, {"dt": "2020-01-01"})

    asyncio.run(asyncio.wait_for(write_expired(), 60))

    async def pyfluss_create_expired(connection: Any) -> str:
        try:
            await connection.get_admin().create_partition(fluss.TablePath("fluss", "recent"), {"dt": OLD})
        except Exception as e:  # pyfluss's FlussError
            return str(e)
        return "created"

    assert "out-of-date" in session(cluster, pyfluss_create_expired)


def _info(**extra: str) -> Any:
    return paimon_info(
        "orders",
        [("dt", T.STRING()), ("id", T.INT()), ("v", T.STRING())],
        primary_key=["dt", "id"],
        partition_keys=["dt"],
        properties={**PROPERTIES, **extra},
    )


def test_only_past_auto_partitions_go_to_the_lake() -> None:
    now = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
    info = _info()
    assert is_past_auto_partition(info, "20260314", now)
    assert not is_past_auto_partition(info, "20260315", now)  # current: may still be created
    assert not is_past_auto_partition(info, "20260316", now)
    assert not is_past_auto_partition(info, "2026-03-14", now)  # no partition time of this table
    assert not is_past_auto_partition(info, HISTORICAL_PARTITION_VALUE, now)
    off = _info(**{"table.datalake.historical-partition.enabled": "false"})
    assert not is_past_auto_partition(off, "20260314", now)


def test_server_refuses_historical_lookups_outside_the_historical_partition() -> None:
    lookup = HistoricalLookup({})
    with pytest.raises(PartitionNotExistError, match="__historical__"):
        asyncio.run(lookup.lookup(_info(), "20260314", 0, "20200101", [b"k"]))
    off = _info(**{"table.datalake.historical-partition.enabled": "false"})
    with pytest.raises(InvalidTableError, match=r"historical-partition\.enabled"):
        asyncio.run(lookup.lookup(off, HISTORICAL_PARTITION_VALUE, 0, "20200101", [b"k"]))


def test_lake_rows_are_cached_per_bucket_until_a_new_lake_snapshot(tmp_path: Path) -> None:
    """The tablet server reads an expired partition's lake bucket once per lake snapshot: later lookups
    in it are answered from memory, a new tiering round is seen at once, and a bucket larger than
    server.historical-partition.lookup-cache.max-rows is not kept (and still answered)."""
    storage = paimon_storage(tmp_path)
    info = _info()
    storage.catalog().create_table(info)
    tiering = PaimonTiering(storage, info)
    rows = [{"dt": OLD, "id": i, "v": f"a{i}"} for i in range(60)]
    tiering.append([upsert(**row) for row in rows])
    tiering.round()
    bucket = paimon_bucket_of(info, rows[0])
    same_bucket = [r for r in rows if paimon_bucket_of(info, r) == bucket]
    key = table_key_encoder(info).encode_key
    value = CompactedRowEncoder(info.schema.row_type).encode
    config = {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(tmp_path / "warehouse"),
    }

    def look_up(lookup: HistoricalLookup, wanted: list[dict[str, Any]]) -> list[bytes | None]:
        keys = [key([r["dt"], r["id"], r["v"]]) for r in wanted]
        return asyncio.run(lookup.lookup(info, HISTORICAL_PARTITION_VALUE, bucket, OLD, keys))

    def encoded(row: dict[str, Any]) -> bytes:
        return b"\x01\x00" + value([row["dt"], row["id"], row["v"]])  # schema id 1, little-endian

    lookup = HistoricalLookup(config)
    assert lookup.cache is not None
    first, second = same_bucket[0], same_bucket[1]
    assert look_up(lookup, [first]) == [encoded(first)]
    assert look_up(lookup, [second, {"dt": OLD, "id": 999, "v": None}]) == [encoded(second), None]
    assert (lookup.cache.misses, lookup.cache.hits, lookup.cache.cached_rows) == (1, 1, len(same_bucket))
    # a new round changes the key: the next lookup sees the new snapshot, not the cached rows
    changed = {**first, "v": "b"}
    tiering.append([upsert(**changed)])
    tiering.round()
    assert look_up(lookup, [first]) == [encoded(changed)]
    assert (lookup.cache.misses, lookup.cache.hits) == (2, 1)

    small = HistoricalLookup({**config, "server.historical-partition.lookup-cache.max-rows": "5"})
    assert look_up(small, [second]) == look_up(small, [second]) == [encoded(second)]
    assert small.cache is not None and small.cache.cached_rows == 0 and small.cache.misses == 2
    assert (
        HistoricalLookup({**config, "server.historical-partition.lookup-cache.max-rows": "0"}).cache is None
    )
