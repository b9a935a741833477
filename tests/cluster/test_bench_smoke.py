"""Every benchmark script still runs: each once at its smallest size (`--smoke`), as its own process,
as a person or `bench/run_all.py` would start it. It asserts that the run completes and, for the
benchmarks run_all tabulates, that it printed its result rows; it says nothing about the figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from faults.lazyfs import fuse_available

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run_all_benchmarks() -> list[str]:
    """run_all.py's list (bench/ is not a package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.BENCHMARKS)


BENCHMARKS = _run_all_benchmarks()

# scripts that print a report of their own rather than run_all's JSON rows
OWN_REPORT = ["failover", "fuzz", "kv_scale", "scale"]
# scripts that print rows but are not Strom figures (against a reference), so run_all leaves them out
ROWS_ONLY = ["lazyfs_overhead", "processes"]
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in ("common", "run_all"))


def test_every_script_is_covered() -> None:
    covered = sorted([*BENCHMARKS, *OWN_REPORT, *ROWS_ONLY])
    assert covered == SCRIPTS, "a new bench script needs a smoke run here"


SmokeRun = Future[subprocess.CompletedProcess[str]]


def _smoke_run(name: str) -> subprocess.CompletedProcess[str]:
    args = ["--smoke"] if name in OWN_REPORT else ["--smoke", "--json"]
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, SmokeRun]]:
    """The smoke runs of the scripts this pytest run selected, two at a time: most of a run is
    start-up and waiting, and one at a time they took three and a half minutes of the suite. Each
    test below checks its own script."""
    selected: list[str] = [
        str(item.callspec.params["name"])
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_benchmark_runs_at_its_smallest_size"
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(_smoke_run, name) for name in selected if _skip_reason(name) is None}


def _skip_reason(name: str) -> str | None:
    # as the fault tests that use the same file system
    return fuse_available() if name == "lazyfs_overhead" else None


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_runs_at_its_smallest_size(name: str, smoke_runs: dict[str, SmokeRun]) -> None:
    if (why := _skip_reason(name)) is not None:
        pytest.skip(why)
    result = smoke_runs[name].result()
    assert result.returncode == 0, (
        f"bench/{name}.py failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    if name not in OWN_REPORT:
        rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        assert rows, f"bench/{name}.py printed no result rows:\n{result.stdout[-2000:]}"
        # figures of a run this small may be 0 or inf (a read too quick to time): only their presence counts
        assert all(isinstance(row["strom"], float | int) and row["unit"] for row in rows), rows


def test_run_all_collects_the_rows_of_the_benchmarks_it_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / "run_all.py"), "--smoke", "--only", "write_latency"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "bench/write_latency.py: 2 row(s)" in result.stdout, result.stdout[-3000:]
