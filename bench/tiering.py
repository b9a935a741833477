"""A tiering round: the tiering service (splits run in its own process, `--tiering-runner local`)
copying a 4-bucket log table of 1M rows from Strom into Iceberg — read the buckets, write Parquet, commit
the snapshot, report to the coordinator — against pyiceberg appending the same Arrow table to a new
table of the same catalog in the same run.

    .venv/bin/python bench/tiering.py [--rows 1000000] [--large] [--json]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from common import Row, cluster, parser, report

from strom.client import Connection
from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor
from strom.spark.tiering.runner import LocalSplitRunner
from strom.spark.tiering.service import TieringService, TieringSettings

BUCKETS = 4


def make_table(rows: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            "user": pa.array([f"user-{i % 100_000:06d}" for i in range(rows)]),
            "amount": pa.array(ids.astype(np.float64) * 0.01),
            "quantity": pa.array((ids % 100).astype(np.int32)),
            "ts": pa.array(ids * 1000 + 1_700_000_000_000, pa.timestamp("ms")),
        }
    )


async def load(bootstrap: str, name: str, data: pa.Table) -> None:
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        descriptor = TableDescriptor(
            Schema.from_arrow_schema(data.schema),
            bucket_count=BUCKETS,
            properties={"table.datalake.enabled": "true", "table.datalake.freshness": "1s"},
        )
        await connection.get_admin().create_table(f"fluss.{name}", descriptor)
        writer = (await connection.get_table(f"fluss.{name}")).new_append().create_writer()
        writer.write_arrow(data)
        await writer.flush()


def tier_once(bootstrap: str, lake: dict[str, str], name: str, rows: int) -> float:
    """Seconds of the first round that tiers table `name` (rounds of other tables are not counted)."""
    settings = TieringSettings(
        bootstrap=bootstrap, lake_format="iceberg", lake_properties=lake, poll_interval=0.2
    )
    service = TieringService(settings, LocalSplitRunner())
    stop = asyncio.Event()
    timed_round: list[float] = []
    original = service._round

    async def timed(assignment):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        stats = await original(assignment)
        if assignment.path.table_name == name and stats.records:
            assert stats.records == rows, f"tiered {stats.records} of {rows} rows"
            timed_round.append(time.perf_counter() - started)
            stop.set()
        return stats

    service._round = timed  # type: ignore[method-assign]
    asyncio.run(service.run(stop))
    return timed_round[0]


def pyiceberg_reference(lake: dict[str, str], data: pa.Table, name: str) -> float:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("default", **lake)
    catalog.create_namespace_if_not_exists("reference")
    table = catalog.create_table(f"reference.{name}", schema=data.schema)
    started = time.perf_counter()
    table.append(data)
    return time.perf_counter() - started


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    if args.smoke:
        args.rows, args.runs = 20_000, 1
    rows = args.rows * (5 if args.large else 1)
    data = make_table(rows)
    with tempfile.TemporaryDirectory() as lake_dir:
        lake = {
            "type": "sql",
            "uri": f"sqlite:///{lake_dir}/catalog.db",
            "warehouse": f"file://{lake_dir}/warehouse",
        }
        config = {"datalake.format": "iceberg", **{f"datalake.iceberg.{k}": v for k, v in lake.items()}}
        rounds = []
        with cluster(config=config) as running:
            for run in range(args.runs):
                asyncio.run(load(running.bootstrap, f"tiered{run}", data))
                rounds.append(tier_once(running.bootstrap, lake, f"tiered{run}", rows))
        reference = statistics.median(pyiceberg_reference(lake, data, f"r{run}") for run in range(args.runs))
    round_s = statistics.median(rounds)
    report(
        [
            Row(
                f"tiering round, {rows // 1000}k rows, {BUCKETS} buckets, Iceberg",
                rows / round_s,
                rows / reference,
                "rows/s",
                "pyiceberg append",
                target=">= 0.5",
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
