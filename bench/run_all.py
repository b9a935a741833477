"""Runs every performance benchmark and prints one table: Strom's figure, the reference measured in the
same run, their ratio (higher is better) and the target (docs/performance.md). Each benchmark runs as
its own process with `--json`; `--large` and `--runs` are passed on.

    .venv/bin/python bench/run_all.py [--large] [--runs 3] [--only log_throughput,lookup] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = [
    "log_throughput",
    "projection",
    "write_latency",
    "flush_cost",
    "pk_upsert",
    "lookup",
    "tiering",
    "lake_compaction",
    "historical_lookup",
    "spark_read",
    "spark_sql",
    "loop_stalls",
    "kafka",
]


def run(name: str, extra: list[str]) -> tuple[list[dict[str, object]], str | None, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name(f"{name}.py")), "--json", *extra],
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    error = None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["failed"])[-1]
    return rows, error, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--smoke", action="store_true", help="each at its smallest size: that they still run")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else BENCHMARKS
    extra = [
        "--runs",
        str(args.runs),
        *(["--large"] if args.large else []),
        *(["--smoke"] if args.smoke else []),
    ]

    from rich.console import Console
    from rich.table import Table

    table = Table(title="Strom performance (ratio: Strom relative to the reference; higher is better)")
    for column in ("path", "Strom", "reference", "ratio", "target"):
        table.add_column(column, justify="right" if column in ("Strom", "ratio") else "left")
    console = Console()
    failures = []
    for name in names:
        with console.status(f"running bench/{name}.py"):
            rows, error, seconds = run(name, extra)
        console.log(
            f"bench/{name}.py: {len(rows)} row(s) in {seconds:.0f}s" + (f" FAILED: {error}" if error else "")
        )
        if error:
            failures.append(name)
        for row in rows:
            table.add_row(
                str(row["path"]),
                f"{row['strom']:,.2f} {row['unit']}",
                f"{row['reference']:,.2f} {row['unit']} ({row['reference_name']})",
                f"{row['ratio']:.3f}",
                str(row["target"]),
            )
    console.print(table)
    if failures:
        sys.exit(f"failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
