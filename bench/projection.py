"""Column pruning: pyfluss reading 1 of 20 columns of a log table against reading all 20, in the same run
on the same data. Reports the read rate (rows/s) of both and the bytes the tablet server sent for each
(its `fluss_tabletserver_table_bytesOut_total` metric); Fluss reports 8-20x fewer bytes and up to 10x
throughput for such scans.

Filter pushdown on batch statistics (Fluss 1.0): the same rows written by pyfluss into a table with
`table.statistics.columns` (V1 batches carrying min/max/null counts) and one without; a selective
filter (one batch in ten matches) read with Strom's client from each. The server skips V1 batches on
their statistics alone and has to decode V0 batches to decide; the rows: time of the filtered read on
V1 against V0, and bytes sent by the filtered read against an unfiltered one.

    .venv/bin/python bench/projection.py [--rows 1000000] [--large] [--json]
"""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.request

import fluss
import pyarrow as pa
from common import Row, cluster, parser, report, wide_batch
from prometheus_client.parser import text_string_to_metric_families

COLUMNS = 20
BUCKETS = 2


def bytes_out(metrics_address: str) -> float:
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "fluss_tabletserver_table_bytesOut":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


async def write(
    bootstrap: str,
    batch: pa.RecordBatch,
    count: int,
    name: str = "wide",
    properties: dict[str, str] | None = None,
) -> None:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    path = fluss.TablePath("fluss", name)
    descriptor = fluss.TableDescriptor(
        fluss.Schema(batch.schema), bucket_count=BUCKETS, properties=properties or {}
    )
    await connection.get_admin().create_table(path, descriptor)
    writer = (await connection.get_table(path)).new_append().create_writer()
    for i in range(count):
        # ids rise batch after batch, so a range filter matches few batches
        writer.write_arrow_batch(
            batch.set_column(0, "id", pa.array(batch.column(0).to_numpy() + i * batch.num_rows))
        )
    await writer.flush()
    await connection.close()


async def filtered_read(bootstrap: str, name: str, min_id: int | None) -> tuple[float, int]:
    """Strom's client reading every bucket to its end, with `id >= min_id` pushed down (None: no filter)."""
    from strom.client import Connection, TablePath
    from strom.client.scanner import EARLIEST_OFFSET, col

    async with await Connection.create({"bootstrap.servers": bootstrap}) as conn:
        table = await conn.get_table(TablePath("fluss", name))
        scan = table.new_scan()
        if min_id is not None:
            scan = scan.filter(col("id") >= min_id)
        scanner = scan.create_log_scanner()
        for bucket in range(BUCKETS):
            scanner.subscribe(bucket, EARLIEST_OFFSET)
        started = time.perf_counter()
        async with scanner:
            rows = sum([b.batch.num_rows async for b in scanner.iter_batches(to_end=True)])
        return time.perf_counter() - started, rows


async def read(bootstrap: str, columns: list[str] | None) -> tuple[float, int]:
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    table = await connection.get_table(fluss.TablePath("fluss", "wide"))
    scan = table.new_scan()
    if columns is not None:
        scan = scan.project_by_name(columns)
    scanner = await scan.create_record_batch_log_scanner()
    scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(BUCKETS)})
    started = time.perf_counter()
    result = await scanner.to_arrow()
    seconds = time.perf_counter() - started
    await connection.close()
    return seconds, result.num_rows


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    if args.smoke:
        args.rows, args.runs = 20_000, 1
    rows = args.rows * (5 if args.large else 1)
    batch = wide_batch(20_000, COLUMNS)
    with cluster(metrics=True) as running:
        metrics = running.tablet_servers[0].metrics_address
        assert metrics is not None
        asyncio.run(write(running.bootstrap, batch, rows // batch.num_rows))
        total = rows // batch.num_rows * batch.num_rows
        results: dict[str, list[tuple[float, float]]] = {"all": [], "one": []}
        for _ in range(args.runs):
            for name, columns in (("all", None), ("one", ["c5"])):
                before = bytes_out(metrics)
                seconds, got = asyncio.run(read(running.bootstrap, columns))
                assert got == total, f"read {got} rows of {total}"
                results[name].append((seconds, bytes_out(metrics) - before))
        # filter pushdown: the same rows with and without batch statistics
        count = rows // batch.num_rows
        for name, properties in (("stats", {"table.statistics.columns": "id"}), ("plain", {})):
            asyncio.run(write(running.bootstrap, batch, count, name, properties))
        min_id = total - max(total // 10, 1)  # the last tenth of the ids
        filtered: dict[str, list[tuple[float, float]]] = {"stats": [], "plain": [], "unfiltered": []}
        for _ in range(args.runs):
            for name, table, bound in (
                ("stats", "stats", min_id),
                ("plain", "plain", min_id),
                ("unfiltered", "stats", None),
            ):
                before = bytes_out(metrics)
                seconds, got = asyncio.run(filtered_read(running.bootstrap, table, bound))
                assert got >= (total - min_id if bound is not None else total), f"read {got} rows"
                filtered[name].append((seconds, bytes_out(metrics) - before))
    all_s = statistics.median(s for s, _ in results["all"])
    one_s = statistics.median(s for s, _ in results["one"])
    all_bytes = statistics.median(b for _, b in results["all"])
    one_bytes = statistics.median(b for _, b in results["one"])
    report(
        [
            Row(
                f"read 1 of {COLUMNS} columns, pyfluss",
                total / one_s,
                total / all_s,
                "rows/s",
                f"all {COLUMNS} columns",
                target="up to 10x (Fluss)",
            ),
            Row(
                f"bytes sent for 1 of {COLUMNS} columns",
                one_bytes / 1e6,
                all_bytes / 1e6,
                "MB",
                f"all {COLUMNS} columns",
                higher_is_better=False,
                target="8-20x fewer (Fluss)",
            ),
            Row(
                "selective filter on V1 batch statistics",
                statistics.median(s for s, _ in filtered["stats"]) * 1000,
                statistics.median(s for s, _ in filtered["plain"]) * 1000,
                "ms",
                "same filter, V0 batches decoded",
                higher_is_better=False,
            ),
            Row(
                "bytes sent for a 1-in-10 filter",
                statistics.median(b for _, b in filtered["stats"]) / 1e6,
                statistics.median(b for _, b in filtered["unfiltered"]) / 1e6,
                "MB",
                "no filter",
                higher_is_better=False,
            ),
        ],
        args.json,
    )


if __name__ == "__main__":
    main()
