"""The supervision policy: restarts with backoff, a non-zero exit on a fatal failure, no lost errors."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from strom.common import supervision
from strom.common.supervision import Backoff, Event, Policy, TaskSet


@pytest.fixture
def events() -> Iterator[list[tuple[Event, str]]]:
    seen: list[tuple[Event, str]] = []
    remove = supervision.add_listener(lambda event, name: seen.append((event, name)))
    yield seen
    remove()


def test_a_failing_loop_restarts_with_growing_delays(events: list[tuple[Event, str]]) -> None:
    starts: list[float] = []

    async def flaky() -> None:
        starts.append(asyncio.get_running_loop().time())
        if len(starts) < 4:
            raise RuntimeError(f"failure {len(starts)}")

    async def main() -> None:
        task = supervision.supervise(flaky, name="flaky", backoff=Backoff(initial=0.02, factor=2.0))
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert len(starts) == 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 0.02, 0.04, 0.08: each wait at least its delay, and growing
    for gap, delay in zip(gaps, [0.02, 0.04, 0.08], strict=True):
        assert gap >= delay * 0.9
    assert gaps[2] > gaps[0]
    assert events.count((Event.FAILED, "flaky")) == 3
    assert events.count((Event.RESTARTED, "flaky")) == 3


def test_backoff_is_capped() -> None:
    delays = Backoff(initial=1, maximum=5, factor=3).delays()
    assert [next(delays) for _ in range(4)] == [1, 3, 5, 5]


def test_a_fatal_failure_calls_the_fatal_handler(events: list[tuple[Event, str]]) -> None:
    fatal: list[str] = []
    supervision.set_fatal_handler(fatal.append)
    runs = 0

    async def main_loop() -> None:
        nonlocal runs
        runs += 1
        raise ConnectionError("cannot go on")

    async def main() -> None:
        await asyncio.wait_for(supervision.supervise(main_loop, name="main loop", policy=Policy.FATAL), 5)

    try:
        asyncio.run(main())
    finally:
        supervision.set_fatal_handler(None)
    assert fatal == ["main loop"]
    assert runs == 1  # not restarted
    assert (Event.FATAL, "main loop") in events


def test_a_fatal_failure_exits_the_process_non_zero() -> None:
    script = textwrap.dedent(
        """
        import asyncio
        from strom.common import supervision

        async def main_loop():
            raise RuntimeError("the coordinator is gone for good")

        async def main():
            supervision.supervise(main_loop, name="tiering", policy=supervision.Policy.FATAL)
            await asyncio.sleep(30)
            print("still running")

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == supervision.FATAL_EXIT_CODE
    assert "still running" not in done.stdout
    assert "tiering cannot go on" in done.stderr
    assert "the coordinator is gone for good" in done.stderr


def test_cancelling_a_supervised_loop_stops_it(events: list[tuple[Event, str]]) -> None:
    async def forever() -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        task = supervision.supervise(forever, name="forever")
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert events == []


def test_a_spawned_task_is_held_and_its_error_observed(
    events: list[tuple[Event, str]], caplog: pytest.LogCaptureFixture
) -> None:
    async def later(gate: asyncio.Event) -> None:
        await gate.wait()
        raise ValueError("lost unless observed")

    async def main() -> None:
        gate = asyncio.Event()
        supervision.spawn(later(gate), name="notify")  # no reference kept by the caller
        gc.collect()
        await asyncio.sleep(0)
        gate.set()
        for _ in range(10):
            await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR, logger="strom.supervision"):
        asyncio.run(main())
    assert events == [(Event.FAILED, "notify")]
    assert "lost unless observed" in caplog.text


def test_a_task_set_cancels_its_tasks_on_close(events: list[tuple[Event, str]]) -> None:
    async def main() -> int:
        tasks = TaskSet("owner")
        for i in range(3):
            tasks.spawn(asyncio.sleep(60), name=f"sleeper {i}")
        assert len(tasks) == 3
        await tasks.close()
        return len(tasks)

    assert asyncio.run(main()) == 0
    assert events == []  # cancellation is not a failure


def test_a_server_counts_failures_and_restarts_in_its_metrics() -> None:
    from strom.metrics import Metrics
    from strom.metrics.supervision import register_supervision_metrics

    metrics = Metrics("tabletserver")
    stop_counting = register_supervision_metrics(metrics)
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise OSError("disk hiccup")

    async def main() -> None:
        await asyncio.wait_for(supervision.supervise(flaky, name="log-maintenance", backoff=Backoff(0.01)), 5)

    try:
        asyncio.run(main())
    finally:
        stop_counting()
    sample = metrics.registry.get_sample_value
    labels = {"task": "log-maintenance"}
    assert sample("fluss_tabletserver_supervision_taskFailures_total", labels) == 2
    assert sample("fluss_tabletserver_supervision_taskRestarts_total", labels) == 2
    assert sample("fluss_tabletserver_supervision_fatalFailures_total", labels) is None
