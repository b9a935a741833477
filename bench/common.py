"""What every benchmark shares: a throw-away cluster of real server processes, a result row that names
Strom's figure, the reference measured in the same run and their ratio, and `--json` output for
`bench/run_all.py`.

A benchmark script prints its rows as a table for people; with `--json` it prints one JSON object per
row instead (one per line), which run_all collects.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from harness import Cluster


@dataclass(frozen=True)
class Row:
    """One line of the performance table."""

    path: str  # what is measured, e.g. "append, pyfluss -> Strom"
    strom: float
    reference: float
    unit: str  # e.g. "MB/s", "rows/s", "ms"
    reference_name: str
    # strom/reference for throughputs, reference/strom for latencies (so higher is better either way)
    higher_is_better: bool = True
    target: str = ""

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.strom / self.reference if self.reference else 0.0
        return self.reference / self.strom if self.strom else 0.0

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "ratio": self.ratio}


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    p.add_argument("--large", action="store_true", help="a bigger run (minutes instead of about one)")
    p.add_argument("--runs", type=int, default=3, help="runs of each measurement; the median is reported")
    p.add_argument("--json", action="store_true", help="print rows as JSON lines (for bench/run_all.py)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest run, one of each measurement: it shows the benchmark still works (the test "
        "suite runs it), its figures mean nothing",
    )
    return p


def wide_batch(rows: int, columns: int = 20) -> pa.RecordBatch:
    """An Arrow batch of `columns` columns: an int64 id, then int64, float64, int32 and string
    columns in turn."""
    ids = np.arange(rows, dtype=np.int64)
    arrays: dict[str, pa.Array] = {"id": pa.array(ids)}
    for i in range(1, columns):
        kind = i % 4
        if kind == 0:
            arrays[f"c{i}"] = pa.array(ids * i)
        elif kind == 1:
            arrays[f"c{i}"] = pa.array(ids.astype(np.float64) / (i + 1))
        elif kind == 2:
            arrays[f"c{i}"] = pa.array((ids % 1000).astype(np.int32))
        else:
            arrays[f"c{i}"] = pa.array([f"value-{j % 5000:05d}-{i}" for j in range(rows)])
    return pa.record_batch(arrays)


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


@contextlib.contextmanager
def cluster(
    tablet_servers: int = 1,
    config: dict[str, str] | None = None,
    metrics: bool = False,
    zookeeper: str | None = None,
) -> Iterator[Cluster]:
    """Real server processes in a temporary directory; with `metrics`, each serves Prometheus metrics
    (its `metrics_address`); with `zookeeper` (host:port), the metadata lives there."""
    from strom.server.local_cluster import serve_metrics

    with tempfile.TemporaryDirectory() as tmp:
        running = Cluster(
            Path(tmp) / "cluster", tablet_servers=tablet_servers, config=config, zookeeper=zookeeper
        )
        if metrics:
            serve_metrics([*running.coordinators, *running.tablet_servers.values()], "127.0.0.1")
        running.start()
        try:
            yield running
        finally:
            running.stop()


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds a process (this one by default) has used so far. Unlike wall time,
    it hardly moves when others' work takes the cores of a shared machine."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(rows: list[Row], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row.to_json()))
        return
    for row in rows:
        print(
            f"{row.path:<44} strom {row.strom:>12,.2f} {row.unit:<7} "
            f"{row.reference_name} {row.reference:>12,.2f} {row.unit:<7} ratio {row.ratio:6.3f}"
            + (f"  (target {row.target})" if row.target else "")
        )
