"""Failover time in the embedded (SQLite) mode: how long acks=all writes pause when the leader of their
bucket is SIGKILLed, for a log table and for a primary-key table holding 1M keys, printed next to the
session timeout that the old, heartbeat-only detection had to wait for.

Three tablet servers, replication factor 3; the official client writes small flushes continuously
(tests/failover_workload.py). Each kill is timed from the SIGKILL to the first write acknowledged
after it; the killed server is restarted and back in the ISR before the next kill. A primary-key
leader must open its KV tablet first (newest snapshot plus the changelog after it), which is why the
table gets its snapshot taken before the kills, as a production table would have.

    .venv/bin/python bench/failover.py [--kills 5] [--keys 1000000] [--session-timeout 10s] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from failover_workload import AckedWriter, bucket_leaders, create_table, wait_for
from harness import Cluster


async def load_keys(bootstrap: str, table: str, keys: int) -> float:
    from strom.client import Connection

    started = time.monotonic()
    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        writer = (await connection.get_table(f"fluss.{table}")).new_upsert().create_writer()
        step = 100_000
        for start in range(0, keys, step):
            ids = pa.array(range(start, min(start + step, keys)), pa.int64())
            writer.write_arrow(
                pa.table({"id": ids, "v": pa.array([f"k{i}" for i in range(start, start + len(ids))])})
            )
        await writer.flush()
    return time.monotonic() - started


async def snapshot_taken(bootstrap: str, table: str) -> bool:
    from strom.client import Connection

    async with await Connection.create({"bootstrap.servers": bootstrap}) as connection:
        snapshots = await connection.get_admin().get_latest_kv_snapshots(f"fluss.{table}")
        return snapshots.snapshot_id(0) is not None


def kill_leaders(cluster: Cluster, table: str, writer: AckedWriter, kills: int) -> list[float]:
    pauses = []
    for _ in range(kills):
        victim = bucket_leaders(cluster.coordinator.host, cluster.coordinator.port, table)[0][0]
        assert victim is not None
        killed = time.monotonic()
        cluster.kill_tablet_server(victim)
        pauses.append(writer.resumed_after(killed, timeout=180))
        cluster.start_tablet_server(victim)
        cluster.wait_for_tablet_servers()
        time.sleep(3)  # back in the ISR (log.replica.max-lag-time)
    return pauses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--session-timeout", default="10s")
    parser.add_argument(
        "--smoke", action="store_true", help="the smallest run: it shows the benchmark still works"
    )
    args = parser.parse_args()
    if args.smoke:
        args.kills, args.keys = 1, 1_000
    config = {
        "tablet-server.session.timeout": args.session_timeout,
        "tablet-server.heartbeat.interval": "1s",
        "log.replica.max-lag-time": "2s",
        "kv.snapshot.interval": "2s" if args.smoke else "15s",
    }
    with tempfile.TemporaryDirectory(prefix="strom-failover-") as base:
        cluster = Cluster(Path(base), tablet_servers=3, config=config).start()
        try:
            bootstrap = cluster.bootstrap
            asyncio.run(create_table(bootstrap, "bench_log"))
            asyncio.run(create_table(bootstrap, "bench_pk", primary_key=True))
            seconds = asyncio.run(load_keys(bootstrap, "bench_pk", args.keys))
            print(f"loaded {args.keys} keys in {seconds:.1f}s; waiting for the KV snapshot")
            wait_for(lambda: asyncio.run(snapshot_taken(bootstrap, "bench_pk")), timeout=120, what="snapshot")
            results = {}
            for table, primary_key in (("bench_log", False), ("bench_pk", True)):
                writer = AckedWriter(bootstrap, table, primary_key=primary_key).start()
                try:
                    results[table] = kill_leaders(cluster, table, writer, args.kills)
                finally:
                    writer.stop()
                if writer.errors:
                    print(f"{table}: writer errors {writer.errors[:3]}")
            print(
                f"\nsession timeout: {args.session_timeout} (what a dead leader cost before fast detection)"
            )
            for table, pauses in results.items():
                kind = f"primary-key table, {args.keys} keys" if table == "bench_pk" else "log table"
                median = statistics.median(pauses)
                print(
                    f"{kind:>34}: write pause after a leader SIGKILL  median {median:.2f}s  "
                    f"max {max(pauses):.2f}s  ({', '.join(f'{p:.2f}' for p in pauses)})"
                )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
