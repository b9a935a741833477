"""The `fluss` data source on a Spark standalone cluster (a master and 2 worker JVMs): each test runs a
driver process of its own (tests/lake/spark_cluster_job.py, the way a user runs a job) whose executors
live on the workers with a Python that cannot import `strom` (the session ships it as a zip).

Batch reads and writes land where they should (read back with pyfluss and pyarrow); a streaming read of
a log table and of a primary-key table's changelog, written to concurrently with pyfluss, keeps every
row exactly once in Spark's file sink across a worker SIGKILLed mid-micro-batch and a driver SIGKILLed
and restarted from its checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import Cluster, run_pyfluss
from test_spark_cluster import worker_running

from strom.server.launcher import free_port
from strom.spark.standalone import StandaloneCluster, spark_home

JOB = Path(__file__).with_name("spark_cluster_job.py")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.int64())])


def create_table(bootstrap: str, name: str, buckets: int, primary_keys: list[str] | None = None) -> None:
    async def body(connection: Any) -> None:
        schema = fluss.Schema(SCHEMA, primary_keys=primary_keys) if primary_keys else fluss.Schema(SCHEMA)
        await connection.get_admin().create_table(
            fluss.TablePath("fluss", name), fluss.TableDescriptor(schema, bucket_count=buckets)
        )

    run_pyfluss(bootstrap, body)


def rows(ids: range, value: Any = None) -> pa.Table:
    values = [i * 10 for i in ids] if value is None else [value(i) for i in ids]
    return pa.table({"id": list(ids), "name": [f"v{i}" for i in ids], "value": values}, schema=SCHEMA)


def start_job(
    settings: dict[str, Any], spark: StandaloneCluster, python: Path, log: Path, submit: bool = False
) -> tuple[subprocess.Popen[bytes], int]:
    """The job as its own driver process (run by `spark-submit` if `submit`, else by Python), and the
    port of its web UI (its REST API)."""
    settings = {"ui_port": free_port(), "work_dir": str(log.parent / "spark-local"), **settings}
    if submit:
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", spark.master_url]
        command += [
            "--conf",
            f"spark.pyspark.python={python}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
        ]
    else:
        settings.update(master=spark.master_url, executor_python=str(python))
        command = [sys.executable]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*command, str(JOB), json.dumps(settings)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the driver's JVM dies with it when the group is killed
        )
    return process, settings["ui_port"]


def get_json(url: str) -> Any:
    # a driver busy starting a micro-batch on a loaded machine can take seconds to answer
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def app_api(ui_port: int, path: str) -> Any:
    """The job's REST API (its only application)."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    return get_json(f"{base}/{get_json(base)[0]['id']}/{path}")


def long_running_task(ui_port: int, seconds: float) -> str | None:
    """The executor of a task that has been running for `seconds` already (a big micro-batch's: the
    small ones take a fraction of that), if any."""
    now = datetime.now(UTC)
    for stage in app_api(ui_port, "stages?status=active"):
        for task in app_api(
            ui_port, f"stages/{stage['stageId']}/{stage['attemptId']}/taskList?status=RUNNING"
        ):
            launched = datetime.strptime(task["launchTime"].replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
            if (now - launched).total_seconds() >= seconds:
                return str(task["executorId"])
    return None


def retried_tasks(ui_port: int) -> list[tuple[str, str]]:
    """(failure, executor that ran it again) for each task attempt the job lost and then ran again
    successfully on another executor."""
    retried = []
    for stage in app_api(ui_port, "stages"):
        if not stage["numFailedTasks"]:
            continue
        tasks = app_api(ui_port, f"stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
        for failed in (t for t in tasks if t["status"] == "FAILED"):
            again = [
                t["executorId"]
                for t in tasks
                if t["index"] == failed["index"]
                and t["status"] == "SUCCESS"
                and t["executorId"] != failed["executorId"]
            ]
            retried += [(failed.get("errorMessage", ""), executor) for executor in again]
    return retried


def read_log(bootstrap: str, name: str, buckets: int) -> pa.Table:
    async def body(connection: Any) -> pa.Table:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
        return await scanner.to_arrow()

    return run_pyfluss(bootstrap, body)


def read_changelog(bootstrap: str, name: str, buckets: int, expected: int) -> list[tuple[str, int, int]]:
    """A primary-key table's changelog (change type, id, value) in (bucket, offset) order, read with
    pyfluss's record scanner until `expected` records came (or a minute passed)."""

    async def body(connection: Any) -> list[tuple[str, int, int]]:
        table = await connection.get_table(fluss.TablePath("fluss", name))
        scanner = await table.new_scan().create_log_scanner()
        scanner.subscribe_buckets({b: fluss.EARLIEST_OFFSET for b in range(buckets)})
        seen: list[tuple[int, int, str, int, int]] = []
        deadline = time.monotonic() + 60
        while len(seen) < expected and time.monotonic() < deadline:
            records = await scanner.poll(500)
            for bucket in records.buckets():
                for r in records.records(bucket):
                    row = dict(r.row)
                    seen.append(
                        (bucket.bucket_id, r.offset, r.change_type.short_string(), row["id"], row["value"])
                    )
        return [(kind, i, value) for _, _, kind, i, value in sorted(seen)]

    return run_pyfluss(bootstrap, body)


def app_dirs(spark: StandaloneCluster, app_name: str) -> list[Path]:
    """The executor directories the workers made for the (completed or active) app `app_name`."""
    state = spark.state()
    ids = [a["id"] for a in state["activeapps"] + state["completedapps"] if a["name"] == app_name]
    return [
        d
        for worker in spark.workers
        for app in ids
        for d in (spark.work_dir / f"worker-{worker.index}" / app).glob("*")
    ]


# long (make test-long): 47 s; the local-mode connector tests of tests/spark/ and
# test_strom_local_with_a_standalone_spark_cluster keep the connector and the standalone cluster in make test
@pytest.mark.long
def test_batch_reads_and_writes_on_the_standalone_cluster(
    spark_standalone: StandaloneCluster, python_without_strom: Path, shared_cluster: Cluster, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap
    names = {
        k: f"cluster_{k}_{tmp_path.name[-12:]}".replace("-", "_") for k in ("source", "log_sink", "pk_sink")
    }
    create_table(bootstrap, names["source"], buckets=3)
    create_table(bootstrap, names["log_sink"], buckets=2)
    create_table(bootstrap, names["pk_sink"], buckets=2, primary_keys=["id"])
    source = rows(range(20_000))

    async def write(connection: Any) -> None:
        writer = (
            (await connection.get_table(fluss.TablePath("fluss", names["source"])))
            .new_append()
            .create_writer()
        )
        writer.write_arrow(source)
        await writer.flush()

    run_pyfluss(bootstrap, write)
    count = 2_000
    job, _ = start_job(
        {
            "mode": "batch",
            "bootstrap": bootstrap,
            "out": str(tmp_path / "out"),
            "executors": str(tmp_path / "executors.json"),
            "rows": count,
            **names,
        },
        spark_standalone,
        python_without_strom,
        tmp_path / "job.log",
        submit=True,  # as users run jobs: spark-submit's --master and --conf reach strom.spark.session()
    )
    assert job.wait(240) == 0, (tmp_path / "job.log").read_text()[-5000:]

    # the executors ran the Python without strom, and imported it from the zip the driver shipped
    for python, module in json.loads((tmp_path / "executors.json").read_text()):
        assert Path(python) == python_without_strom and "/strom.zip/" in module, (python, module)
    # the read: every source row, once, in the parquet the executors wrote
    read = pq.read_table(tmp_path / "out").select(SCHEMA.names).sort_by("id")
    assert read.equals(source.sort_by("id"))
    # the appends, read back with pyfluss
    appended = read_log(bootstrap, names["log_sink"], buckets=2).select(SCHEMA.names).sort_by("id")
    assert appended.equals(rows(range(count)))
    # the upserts: every id inserted, then the even ids updated (-U old, +U new), nothing more
    changelog = read_changelog(bootstrap, names["pk_sink"], buckets=2, expected=2 * count)
    kinds = [kind for kind, _, _ in changelog]
    assert (kinds.count("+I"), kinds.count("-U"), kinds.count("+U")) == (count, count // 2, count // 2)
    state = {i: v for kind, i, v in changelog if kind in ("+I", "+U")}
    assert state == {i: i * 10 + (1000 if i % 2 == 0 else 0) for i in range(count)}
    # the tasks ran in executors on both workers
    assert len({d.parent.parent for d in app_dirs(spark_standalone, "strom-connector-batch")}) == 2


class ConcurrentWriter(threading.Thread):
    """Writes with pyfluss while the stream runs, and remembers what was acknowledged: appends of new
    ids to the log table (`burst` rows once when set, to make one micro-batch big), upserts of a few
    keys to the primary-key table (and the changelog they make: +I, then -U/+U with the old value)."""

    def __init__(self, bootstrap: str, log_table: str, pk_table: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.log_table, self.pk_table = bootstrap, log_table, pk_table
        self.appended = 0  # ids 0 .. appended-1 are in the log table
        self.changes: list[tuple[str, int, int]] = []
        self.rounds = 0
        self.burst = 0
        self.stopping = threading.Event()
        self.paused = threading.Event()  # set while the test waits for the stream to catch up
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run_pyfluss(self.bootstrap, self.write, timeout=1200)
        except BaseException as e:
            self.error = e

    async def write(self, connection: Any) -> None:
        log = (
            (await connection.get_table(fluss.TablePath("fluss", self.log_table)))
            .new_append()
            .create_writer()
        )
        pk = (
            (await connection.get_table(fluss.TablePath("fluss", self.pk_table))).new_upsert().create_writer()
        )
        values: dict[int, int] = {}
        while not self.stopping.is_set():
            if self.paused.is_set():
                await asyncio.sleep(0.1)
                continue
            count, self.burst = self.burst or 200, 0
            log.write_arrow(rows(range(self.appended, self.appended + count)))
            await log.flush()
            self.appended += count
            self.rounds += 1
            upserts = {key: self.rounds * 1000 + key for key in range(self.rounds % 5, 40, 5)}
            for key, value in upserts.items():
                pk.upsert({"id": key, "name": f"k{key}", "value": value})
            await pk.flush()
            for key, value in upserts.items():
                old = values.get(key)
                self.changes += (
                    [("+I", key, value)] if old is None else [("-U", key, old), ("+U", key, value)]
                )
                values[key] = value
            await asyncio.sleep(0.2)  # a steady trickle the paced stream keeps up with


def read_sink(path: Path) -> pa.Table:
    """What Spark's file sink committed: the files its `_spark_metadata` log lists (a killed task
    attempt's files are in the directory too, but never listed)."""
    files: set[str] = set()
    log = path / "_spark_metadata"
    entries = sorted(log.glob("[0-9]*"), key=lambda p: int(p.name.split(".")[0])) if log.exists() else []
    for entry in entries:
        for line in entry.read_text().splitlines()[1:]:  # the first line is the format version
            record = json.loads(line)
            (files.add if record["action"] == "add" else files.discard)(
                record["path"].removeprefix("file://")
            )
    tables = [pq.read_table(f) for f in sorted(files)]
    return pa.concat_tables(tables) if tables else pa.table({})


def wait_until(condition: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.3)


def kill_mid_batch(ui_port: int, writer: ConcurrentWriter, kill: Any) -> None:
    """Make the next micro-batch big, wait until an executor has been running one of its tasks for a few
    seconds (it has many more to go), then `kill`(the id of that executor)."""
    rounds = writer.rounds
    writer.burst = 300_000
    wait_until(
        lambda: writer.rounds > rounds + 1 or writer.error is not None, 120, "the burst was not written"
    )
    deadline = time.monotonic() + 120
    while (executor := long_running_task(ui_port, 3)) is None:
        assert time.monotonic() < deadline, "no micro-batch task ran long"
        time.sleep(0.2)
    kill(executor)


# long (make test-long): 146 s; tests/spark/test_spark_exactly_once.py kills a task and the driver in
# local mode within make test
@pytest.mark.long
@pytest.mark.timeout(900)
def test_streaming_read_keeps_every_row_once_across_a_killed_worker_and_a_killed_driver(
    spark_standalone: StandaloneCluster, python_without_strom: Path, shared_cluster: Cluster, tmp_path: Path
) -> None:
    bootstrap = shared_cluster.bootstrap
    suffix = tmp_path.name[-12:].replace("-", "_")
    log_table, pk_table = f"stream_log_{suffix}", f"stream_pk_{suffix}"
    create_table(bootstrap, log_table, buckets=2)
    create_table(bootstrap, pk_table, buckets=2, primary_keys=["id"])
    sink = tmp_path / "sink"
    settings = {
        "mode": "stream",
        "bootstrap": bootstrap,
        "log_table": log_table,
        "pk_table": pk_table,
        "sink": str(sink),
        "checkpoints": str(tmp_path / "checkpoints"),  # every worker sees it (one machine here)
        "stop": str(tmp_path / "stop"),
        "seconds_per_row": 0.00005,  # 5 s per 100,000 rows: a burst's tasks run for several seconds
    }
    job_log = tmp_path / "job.log"
    job, ui_port = start_job(settings, spark_standalone, python_without_strom, job_log)
    writer = ConcurrentWriter(bootstrap, log_table, pk_table)
    writer.start()
    try:
        wait_until(lambda: read_sink(sink / "log").num_rows > 0, 180, f"no micro-batch: {job_log}")

        # SIGKILL a worker (and its executors) while a task of a micro-batch runs there; Spark runs the
        # task again on the other worker. A kill that came just after the task ended is tried again.
        kills = 0
        while not (retried := retried_tasks(ui_port)):
            assert kills < 4, "never caught an executor running a micro-batch task"

            # which worker runs which executor, found before the burst: the kill itself must be quick
            running = app_api(ui_port, "executors")
            hosts = {
                e["id"]: worker_running(spark_standalone, "strom-connector-stream", e["id"])
                for e in running
                if e["id"] != "driver"
            }

            def kill_worker(executor: str, hosts: dict[str, int] = hosts) -> None:
                spark_standalone.kill_worker(hosts[executor])

            kill_mid_batch(ui_port, writer, kill_worker)
            kills += 1
            spark_standalone.add_worker(cores=2)  # the cluster gets a replacement
            spark_standalone.wait_for_workers(2)
            writer.paused.set()
            wait_until(
                lambda: read_sink(sink / "log").num_rows >= writer.appended, 300, "the stream fell behind"
            )
            writer.paused.clear()
        assert all("ExecutorLostFailure" in failure for failure, _ in retried), retried

        # SIGKILL the driver mid-micro-batch; a new one continues from the checkpoint
        kill_mid_batch(ui_port, writer, lambda executor: os.killpg(job.pid, signal.SIGKILL))
        job.wait()
        job, ui_port = start_job(settings, spark_standalone, python_without_strom, job_log)

        time.sleep(2)
        writer.stopping.set()
        writer.join(60)
        assert writer.error is None
        wait_until(
            lambda: read_sink(sink / "log").num_rows >= writer.appended, 240, f"stream stuck: {job_log}"
        )
        wait_until(lambda: read_sink(sink / "pk").num_rows >= len(writer.changes), 120, "changelog stuck")
        time.sleep(2)  # a duplicate would show up in a later micro-batch
        (tmp_path / "stop").touch()
        assert job.wait(120) == 0, job_log.read_text()[-5000:]
    finally:
        writer.stopping.set()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        while len(spark_standalone.workers) < 2:
            spark_standalone.add_worker(cores=2)
        spark_standalone.wait_for_workers(2)

    # every row written, once
    log = read_sink(sink / "log").select(SCHEMA.names).sort_by("id")
    assert log.num_rows == writer.appended
    assert log.equals(rows(range(writer.appended)))
    changelog = read_sink(sink / "pk")
    got = sorted(zip(*(changelog[c].to_pylist() for c in ("_change_type", "id", "value")), strict=True))
    assert got == sorted(writer.changes)
