"""The tiering service against a real cluster: lake-enabled log and PK tables end up in Iceberg exactly as
Fluss has them, read back with pyiceberg and DuckDB, also when the service is SIGKILLed mid-round again
and again; and `strom local` runs it on Spark."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import fluss
import pyarrow as pa
import pytest
from harness import Cluster
from lake_helpers import read_duckdb
from pyiceberg.catalog import load_catalog

from strom.server.launcher import free_port

LOG_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PK_SCHEMA = pa.schema([("id", pa.int32()), ("balance", pa.float64())])


def lake_config(base: Path) -> dict[str, str]:
    return {
        "datalake.format": "iceberg",
        "datalake.iceberg.type": "sql",
        "datalake.iceberg.uri": f"sqlite:///{base}/iceberg_catalog.db",
        "datalake.iceberg.warehouse": f"file://{base}/warehouse",
    }


def iceberg_properties(config: dict[str, str]) -> dict[str, str]:
    return {
        k.removeprefix("datalake.iceberg."): v for k, v in config.items() if k.startswith("datalake.iceberg.")
    }


def start_tiering(
    cluster: Cluster, config: dict[str, str], log: Path, job_name: str = "strom-tiering"
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "strom",
        "tiering",
        "--bootstrap",
        cluster.bootstrap,
        "--runner",
        "local",
        "--poll-interval",
        "0.3",
        "--job-name",
        job_name,
    ]
    for key, value in config.items():
        args += ["--config", f"{key}={value}"]
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


async def create_tables(connection: Any) -> None:
    admin = connection.get_admin()
    lake = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
    await admin.create_table(
        fluss.TablePath("fluss", "events"),
        fluss.TableDescriptor(fluss.Schema(LOG_SCHEMA), bucket_count=3, properties=lake),
    )
    await admin.create_table(
        fluss.TablePath("fluss", "accounts"),
        fluss.TableDescriptor(fluss.Schema(PK_SCHEMA, primary_keys=["id"]), bucket_count=2, properties=lake),
    )


class Workload:
    """Writes to both tables and remembers what Fluss must hold."""

    def __init__(self, events_per_write: int = 500) -> None:
        self.events_per_write = events_per_write
        self.next_id = 0
        self.balances: dict[int, float] = {}
        self.round = 0

    async def write(self, connection: Any) -> None:
        self.round += 1
        events = await connection.get_table(fluss.TablePath("fluss", "events"))
        writer = events.new_append().create_writer()
        ids = list(range(self.next_id, self.next_id + self.events_per_write))
        writer.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"e{i}" for i in ids]}))
        await writer.flush()
        self.next_id += self.events_per_write
        accounts = await connection.get_table(fluss.TablePath("fluss", "accounts"))
        upserts = accounts.new_upsert().create_writer()
        for key in range(self.round * 7 % 40, 60, 3):
            balance = float(self.round * 100 + key)
            upserts.upsert({"id": key, "balance": balance})
            self.balances[key] = balance
        for key in list(self.balances)[:: 5 + self.round]:
            upserts.delete({"id": key})
            del self.balances[key]
        await upserts.flush()


def session(cluster: Cluster, body: Any) -> Any:
    async def main() -> Any:
        connection = await fluss.FlussConnection.create(
            fluss.Config({"bootstrap.servers": cluster.bootstrap})
        )
        try:
            return await asyncio.wait_for(body(connection), 60)
        finally:
            await connection.close()

    return asyncio.run(main())


def lake_rows(
    config: dict[str, str], duck: duckdb.DuckDBPyConnection, name: str, columns: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    catalog = load_catalog(**iceberg_properties(config))
    table = catalog.load_table(f"fluss.{name}")
    by_pyiceberg = table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist()
    by_duckdb = read_duckdb(duck, table.metadata_location, columns) if table.current_snapshot() else []
    return by_pyiceberg, by_duckdb, table


def lake_matches(config: dict[str, str], duck: duckdb.DuckDBPyConnection, workload: Workload) -> bool:
    for reader in (0, 1):
        events = lake_rows(config, duck, "events", ["id", "name"])[reader]
        if sorted(r["id"] for r in events) != list(range(workload.next_id)):
            return False
        accounts = lake_rows(config, duck, "accounts", ["id", "balance"])[reader]
        if {r["id"]: r["balance"] for r in accounts} != workload.balances or len(accounts) != len(
            workload.balances
        ):
            return False
    return True


def wait_until_lake_matches(
    config: dict[str, str], duck: duckdb.DuckDBPyConnection, workload: Workload, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not lake_matches(config, duck, workload):
        assert time.monotonic() < deadline, "the lake never caught up with Fluss"
        time.sleep(0.5)


# long (make test-long): 21 s; test_tiering_into_paimon kills the service the same way in make test
@pytest.mark.long
def test_killed_tiering_service_ends_with_the_lake_equal_to_fluss(
    cluster_factory: Any, tmp_path: Path, duck: duckdb.DuckDBPyConnection
) -> None:
    config = lake_config(tmp_path)
    # KV snapshots every second: PK buckets enter the lake from a snapshot, then their changelog
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={**config, "lake.tiering.job-timeout": "3s", "kv.snapshot.interval": "1s"}
    )
    session(cluster, create_tables)
    workload = Workload()
    log = tmp_path / "tiering.log"
    kill_loop(cluster, config, log, workload, (0.0, 0.25, 0.6, 1.2))
    session(cluster, workload.write)
    service = start_tiering(cluster, config, log)
    try:
        wait_until_lake_matches(config, duck, workload)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)

    # every lake snapshot records where it is in Fluss, and the coordinator reports the same offsets
    _, _, events = lake_rows(config, duck, "events", ["id"])
    summary = events.current_snapshot().summary
    assert summary["commit-user"] == "__fluss_lake_tiering"
    lake_offsets = {b["bucket"]: b["offset"] for b in json.loads(summary["fluss-offsets"])}

    async def coordinator_view(connection: Any) -> dict[int, int]:
        snapshot = await connection.get_admin().get_latest_lake_snapshot(fluss.TablePath("fluss", "events"))
        return {b.bucket_id: o for b, o in snapshot.table_buckets_offset.items()}

    assert session(cluster, coordinator_view) == lake_offsets
    assert sum(lake_offsets.values()) == workload.next_id


def test_strom_local_tiers_into_iceberg_with_spark(tmp_path: Path, duck: duckdb.DuckDBPyConnection) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "strom", "local", "--data-dir", str(data_dir), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        output = []
        for line in process.stdout:
            output.append(line)
            if "cluster ready" in line:
                break
        else:
            logs = "".join(p.read_text()[-2000:] for p in sorted((data_dir / "logs").glob("*.log")))
            raise AssertionError("strom local did not start:\n" + "".join(output) + logs)
        cluster_json = json.loads((data_dir / "cluster.json").read_text())
        assert "tiering" in {s["role"] for s in cluster_json["servers"]}
        lake = cluster_json["datalake"]
        assert lake["format"] == "iceberg"
        config = {f"datalake.iceberg.{k}": v for k, v in lake["properties"].items()}

        class Local:
            bootstrap = cluster_json["bootstrap"]

        workload = Workload()
        session(Local, create_tables)  # type: ignore[arg-type]
        session(Local, workload.write)  # type: ignore[arg-type]
        # Spark needs its start-up, then one freshness interval and one round
        wait_until_lake_matches(config, duck, workload, timeout=120)
        catalog = load_catalog(**lake["properties"])  # exactly what load_catalog takes
        assert catalog.load_table("fluss.accounts").current_snapshot() is not None
        log = (data_dir / "logs" / "tiering-0.log").read_text()
        assert "tiered fluss.events" in log

        # a tiering service that dies is started again by strom local (that a restarted service
        # catches up is shown in test_tiering_coordinator_faults.py, without a second Spark start here)
        (tiering,) = [s for s in cluster_json["servers"] if s["role"] == "tiering"]
        os.kill(tiering["pid"], signal.SIGKILL)
        cluster_file = data_dir / "cluster.json"
        deadline = time.monotonic() + 30
        while tiering["pid"] in {s["pid"] for s in json.loads(cluster_file.read_text())["servers"]}:
            assert time.monotonic() < deadline, "strom local did not restart the tiering service"
            time.sleep(0.2)
        for line in process.stdout:  # printed right after cluster.json names the new process
            output.append(line)
            if "tiering service restarted" in line:
                break
        assert "restarting the tiering service in 1s" in "".join(output)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def kill_loop(cluster: Cluster, config: dict[str, str], log: Path, workload: Workload, delays: Any) -> None:
    """Per delay: start the service, let it tier a round, give it new data, SIGKILL it after the delay
    (somewhere in its next round)."""
    log.touch()
    for kill_delay in delays:
        session(cluster, workload.write)
        service = start_tiering(cluster, config, log)
        try:
            rounds = log.read_text().count("tiered fluss.")
            deadline = time.monotonic() + 30
            while log.read_text().count("tiered fluss.") == rounds:
                assert time.monotonic() < deadline, "the tiering service made no progress"
                time.sleep(0.1)
            session(cluster, workload.write)
            time.sleep(kill_delay)
        finally:
            service.send_signal(signal.SIGKILL)
            service.wait()


def test_tiering_into_paimon(cluster_factory: Any, tmp_path: Path) -> None:
    """The same service and the same tables with the Paimon format, SIGKILLed in a short loop, read
    back with pypaimon."""
    from pypaimon import CatalogFactory

    config = {
        "datalake.format": "paimon",
        "datalake.paimon.metastore": "filesystem",
        "datalake.paimon.warehouse": str(tmp_path / "paimon"),
    }
    # KV snapshots every second: PK buckets enter the lake from a snapshot, then their changelog
    cluster: Cluster = cluster_factory(
        tablet_servers=1, config={**config, "lake.tiering.job-timeout": "3s", "kv.snapshot.interval": "1s"}
    )
    session(cluster, create_tables)
    workload = Workload()
    log = tmp_path / "tiering.log"
    kill_loop(cluster, config, log, workload, (0.0, 0.4))
    session(cluster, workload.write)
    service = start_tiering(cluster, config, log)

    def read(name: str, columns: list[str]) -> list[dict[str, Any]]:
        catalog = CatalogFactory.create({"metastore": "filesystem", "warehouse": str(tmp_path / "paimon")})
        builder = catalog.get_table(f"fluss.{name}").new_read_builder().with_projection(columns)
        result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        return [] if result is None else result.to_pylist()

    try:
        deadline = time.monotonic() + 60
        while True:
            events = sorted(r["id"] for r in read("events", ["id"]))
            accounts = {r["id"]: r["balance"] for r in read("accounts", ["id", "balance"])}
            if events == list(range(workload.next_id)) and accounts == workload.balances:
                break
            assert time.monotonic() < deadline, "the Paimon lake never caught up with Fluss"
            time.sleep(0.5)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)


def lake_reads(lake_format: str, properties: dict[str, str]) -> tuple[list[int], dict[int, float] | None]:
    """fluss.events' ids and fluss.accounts' balances (None for Lance: no PK tables) as the format's
    own reader sees them."""
    warehouse = properties.get("warehouse", "")
    if lake_format == "lance":
        import lance

        events = lance.dataset(f"{warehouse}/fluss/events.lance").to_table(columns=["id"])
        return sorted(events["id"].to_pylist()), None
    if lake_format == "delta":
        from deltalake import DeltaTable

        events = DeltaTable(f"{warehouse}/fluss/events").to_pyarrow_table(columns=["id"])
        accounts = DeltaTable(f"{warehouse}/fluss/accounts").to_pyarrow_table(columns=["id", "balance"])
        return sorted(events["id"].to_pylist()), {r["id"]: r["balance"] for r in accounts.to_pylist()}
    from pypaimon import CatalogFactory

    catalog = CatalogFactory.create(properties)
    read: list[Any] = []
    for name in ("events", "accounts"):
        builder = catalog.get_table(f"fluss.{name}").new_read_builder()
        result = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        read.append([] if result is None else result.to_pylist())
    return sorted(r["id"] for r in read[0]), {r["id"]: r["balance"] for r in read[1]}


@pytest.mark.long  # a Spark start per format; the Iceberg sibling above runs in the suite
@pytest.mark.parametrize("lake_format", ["paimon", "lance", "delta"])
def test_strom_local_tiers_into_each_lake_format_with_spark(tmp_path: Path, lake_format: str) -> None:
    """`strom local --lake-format <format>`, end to end: pyfluss writes, the Spark tiering service
    tiers, and the format's own reader, found from cluster.json alone, equals Fluss."""
    data_dir = tmp_path / "data"
    command = [
        sys.executable,
        "-m",
        "strom",
        "local",
        "--data-dir",
        str(data_dir),
        "--port",
        str(free_port()),
        "--lake-format",
        lake_format,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "cluster ready" in line:
                break
        cluster_json = json.loads((data_dir / "cluster.json").read_text())
        lake = cluster_json["datalake"]
        assert lake["format"] == lake_format

        class Local:
            bootstrap = cluster_json["bootstrap"]

        async def create(connection: Any) -> None:
            if lake_format != "lance":
                await create_tables(connection)
                return
            with pytest.raises(Exception, match="primary-key"):
                await create_tables(connection)  # the log table is created, the PK table refused

        session(Local, create)  # type: ignore[arg-type]
        workload = Workload()
        session(Local, workload.write if lake_format != "lance" else write_events(workload))  # type: ignore[arg-type]
        deadline = time.monotonic() + 180  # Spark's start-up, then a round
        while True:
            try:
                events, accounts = lake_reads(lake_format, lake["properties"])
            except Exception:  # the lake table or its first version does not exist yet
                events, accounts = [], {}
            if events == list(range(workload.next_id)) and accounts in (None, workload.balances):
                break
            assert time.monotonic() < deadline, f"the {lake_format} lake never caught up with Fluss"
            time.sleep(1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def write_events(workload: Workload) -> Any:
    """`Workload.write` for the log table alone (Lance has no PK tables)."""

    async def write(connection: Any) -> None:
        events = await connection.get_table(fluss.TablePath("fluss", "events"))
        writer = events.new_append().create_writer()
        ids = list(range(workload.next_id, workload.next_id + workload.events_per_write))
        writer.write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"e{i}" for i in ids]}))
        await writer.flush()
        workload.next_id += workload.events_per_write

    return write
