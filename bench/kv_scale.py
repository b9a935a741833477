"""Many primary-key buckets on one tablet server, as a user meets them: `strom local --no-tiering`
on a fresh data directory, the official pyfluss client creates a PK table of `--buckets` buckets and
writes 2 rows into every bucket.

Prints the CreateTable time, the time until the first write has reached every bucket (the upsert
writer's flush returns once every bucket acknowledged), the time until the leaders' KV tablets are all
open (the tablet server's `opened kv tablet` log lines), and the tablet server's resident memory before
and after, with the growth per bucket. Then the cluster stops (SIGINT, a clean shutdown) and starts
again on the same data directory: the time until its processes are up, then until a write to every
bucket is acknowledged (a sample of lookups then finds the rows; `--no-restart` skips it).
KV_SCALE_KEEP=1 keeps the data directory (the servers' logs).

    .venv/bin/python bench/kv_scale.py [--buckets 128] [--tablet-servers 1] [--config key=value ...]
        [--no-restart] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa

from strom.common.schema import Schema
from strom.common.table_descriptor import TableDescriptor, TableInfo
from strom.common.table_path import TablePath
from strom.server.launcher import free_port

SCHEMA = pa.schema([("id", pa.int32()), ("v", pa.string())])
ROWS_PER_BUCKET = 2


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def keys_per_bucket(buckets: int, per_bucket: int) -> list[int]:
    """`per_bucket` ids for every bucket, routed exactly as the clients route them."""
    from strom.client.upsert.key_routing import KeyRouting

    schema = Schema.from_arrow_schema(SCHEMA, primary_key=["id"])
    info = TableInfo(TablePath("fluss", "x"), 1, 1, TableDescriptor(schema, bucket_count=buckets), 0, 0)
    routing = KeyRouting(info)
    found: dict[int, list[int]] = {b: [] for b in range(buckets)}
    missing = buckets
    i = 0
    while missing:
        row = [i, None]
        bucket = routing.bucket_of(row, routing.encode_key(row))
        if len(found[bucket]) < per_bucket:
            found[bucket].append(i)
            if len(found[bucket]) == per_bucket:
                missing -= 1
        i += 1
    return [k for ids in found.values() for k in ids]


@contextlib.contextmanager
def local_cluster(
    tablet_servers: int, config: list[str], data_dir: Path | None = None
) -> Iterator[tuple[str, list[int], Path]]:
    """`strom local --no-tiering`: (bootstrap, tablet-server pids, data dir). On a fresh data directory,
    removed afterwards, unless `data_dir` is given (a restart on what an earlier run left)."""
    fresh = data_dir is None
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="strom-kv-scale-"))
    (data_dir / "cluster.json").unlink(missing_ok=True)
    port = free_port()
    args = [sys.executable, "-m", "strom.cli", "local", "--no-tiering", "--port", str(port)]
    args += ["--data-dir", str(data_dir), "--tablet-servers", str(tablet_servers)]
    for pair in config:
        args += ["--config", pair]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster_json = data_dir / "cluster.json"
        deadline = time.monotonic() + 120
        while not cluster_json.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"strom local did not start; see {data_dir / 'logs'}")
            time.sleep(0.2)
        cluster = json.loads(cluster_json.read_text())
        pids = [s["pid"] for s in cluster["servers"] if s["role"] == "tablet-server"]
        yield cluster["bootstrap"], pids, data_dir
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if fresh and not os.environ.get("KV_SCALE_KEEP"):
            shutil.rmtree(data_dir, ignore_errors=True)


def tablets_open_seconds(data_dir: Path, since: float) -> float | None:
    """Seconds from `since` (epoch) to the last `opened kv tablet` log line of the tablet servers."""
    last = None
    for path in (data_dir / "logs").glob("tablet-server-*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if "opened kv tablet" in line:
                last = line
    if last is None:
        return None
    from datetime import datetime

    stamp = datetime.strptime(last[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return stamp - since


async def measure(bootstrap: str, buckets: int, pids: list[int]) -> dict[str, Any]:
    figures: dict[str, Any] = {"rss_before_mb": sum(rss_mb(p) for p in pids)}
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        admin = connection.get_admin()
        path = fluss.TablePath("fluss", f"kv_scale_{buckets}")
        descriptor = fluss.TableDescriptor(fluss.Schema(SCHEMA, primary_keys=["id"]), bucket_count=buckets)
        ids = keys_per_bucket(buckets, ROWS_PER_BUCKET)
        figures["created_at"] = time.time()
        started = time.perf_counter()
        await admin.create_table(path, descriptor)
        figures["create_table_s"] = time.perf_counter() - started
        started = time.perf_counter()
        table = await connection.get_table(path)
        writer = table.new_upsert().create_writer()
        for i in ids:
            writer.upsert({"id": i, "v": f"row-{i}"})
        await writer.flush()
        figures["first_write_all_buckets_s"] = time.perf_counter() - started
        lookuper = table.new_lookup().create_lookuper()
        for i in ids[:: max(1, len(ids) // 64)]:  # a sample of every part of the key space
            row = await lookuper.lookup({"id": i})
            if row != {"id": i, "v": f"row-{i}"}:
                raise AssertionError(f"lookup of {i} returned {row}")
        figures["rss_after_mb"] = sum(rss_mb(p) for p in pids)
    finally:
        await connection.close()
    return figures


async def serving_again(bootstrap: str, buckets: int, ids: list[int]) -> float:
    """Seconds until a write to every bucket has been acknowledged (every KV tablet is open and
    leads again); then a sample of lookups must find the rows written before the restart."""
    started = time.monotonic()
    connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
    try:
        table = await connection.get_table(fluss.TablePath("fluss", f"kv_scale_{buckets}"))
        writer = table.new_upsert().create_writer()
        probes = ids[::ROWS_PER_BUCKET]  # one key of every bucket: its row is written again, unchanged
        for i in probes:
            writer.upsert({"id": i, "v": f"row-{i}"})
        await writer.flush()
        serving = time.monotonic() - started
        # pyfluss batches lookups for 100 ms (client.lookup.batch-timeout), so only a sample, in turn
        lookuper = table.new_lookup().create_lookuper()
        for i in ids[1 :: max(1, len(ids) // 64)]:
            row = await lookuper.lookup({"id": i})
            if row != {"id": i, "v": f"row-{i}"}:
                raise AssertionError(f"after the restart, lookup of {i} returned {row}")
        return serving
    finally:
        await connection.close()


def restart(args: argparse.Namespace, data_dir: Path) -> dict[str, float]:
    """Stop (above) and start the cluster again on the same data: seconds until it is serving again."""
    ids = keys_per_bucket(args.buckets, ROWS_PER_BUCKET)
    started = time.monotonic()
    with local_cluster(args.tablet_servers, args.config, data_dir) as (bootstrap, _, _):
        up = time.monotonic() - started
        serving = asyncio.run(serving_again(bootstrap, args.buckets, ids))
    return {"restart_processes_up_s": up, "restart_serving_after_up_s": serving}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    p.add_argument("--buckets", type=int, default=128)
    p.add_argument("--tablet-servers", type=int, default=1)
    p.add_argument("--config", action="append", default=[], help="key=value for every server")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument(
        "--no-restart", action="store_true", help="skip the restart (stop, start, every bucket looked up)"
    )
    p.add_argument(
        "--smoke", action="store_true", help="the smallest run: it shows the benchmark still works"
    )
    args = p.parse_args()
    if args.smoke:
        args.buckets = 4
        args.no_restart = True  # a second cluster start-up is most of the smoke run's time
    keep = Path(tempfile.mkdtemp(prefix="strom-kv-scale-"))
    try:
        with local_cluster(args.tablet_servers, args.config, keep) as (bootstrap, pids, data_dir):
            figures = asyncio.run(measure(bootstrap, args.buckets, pids))
            time.sleep(0.5)  # the last log lines reach the files
            figures["kv_tablets_open_s"] = tablets_open_seconds(data_dir, figures.pop("created_at"))
        if not args.no_restart:
            figures.update(restart(args, keep))
    finally:
        if not os.environ.get("KV_SCALE_KEEP"):
            shutil.rmtree(keep, ignore_errors=True)
        else:
            print(f"data directory kept: {keep}", file=sys.stderr)
    figures["buckets"] = args.buckets
    figures["rss_growth_per_bucket_mb"] = (figures["rss_after_mb"] - figures["rss_before_mb"]) / args.buckets
    if args.json:
        print(json.dumps(figures))
        return
    print(f"buckets                          {args.buckets} on {args.tablet_servers} tablet server(s)")
    print(f"CreateTable                      {figures['create_table_s']:.2f} s")
    print(f"first write reaching all buckets {figures['first_write_all_buckets_s']:.2f} s")
    opened = figures["kv_tablets_open_s"]
    print(f"all kv tablets open (from create) {'-' if opened is None else f'{opened:.2f} s'}")
    before, after = figures["rss_before_mb"], figures["rss_after_mb"]
    per_bucket = figures["rss_growth_per_bucket_mb"]
    print(f"tablet-server RSS                {before:.0f} MB -> {after:.0f} MB", end="")
    print(f" ({per_bucket:.2f} MB per bucket)")
    if "restart_serving_after_up_s" in figures:
        up, serving = figures["restart_processes_up_s"], figures["restart_serving_after_up_s"]
        print(f"restart: processes up (cluster.json) {up:.2f} s")
        print(
            f"restart: then a write acknowledged by every bucket {serving:.2f} s (total {up + serving:.2f} s)"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
