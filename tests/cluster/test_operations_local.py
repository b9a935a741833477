"""Operating `strom local` as a user would: every process's Prometheus endpoint (address from
cluster.json) parses and counts what pyfluss wrote, the tiering service reports lake lag per table,
and `strom status --json` shows every server, bucket, leader, ISR and the lake's offsets."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
from harness import run_pyfluss
from prometheus_client.parser import text_string_to_metric_families

from strom.server.launcher import free_port

LAKE_TABLE, PLAIN_TABLE = "events", "plain"


def scrape(address: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)], parsed as Prometheus text (a malformed exposition raises)."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return samples


def per_table(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, table: str) -> float:
    return sum(v for labels, v in samples.get(name, []) if labels.get("table") == table)


def log_bytes(data_dir: Path, table: str) -> int:
    return sum(p.stat().st_size for p in data_dir.glob(f"tablet-server-*/shop/{table}-*/bucket-*/log/*.log"))


def write(bootstrap: str, start: int, count: int) -> None:
    async def body(conn: Any) -> None:
        admin = conn.get_admin()
        await admin.create_database("shop", ignore_if_exists=True)
        for name, lake in ((LAKE_TABLE, True), (PLAIN_TABLE, False)):
            path = fluss.TablePath("shop", name)
            properties = {"table.replication.factor": "1"}
            if lake:
                properties |= {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
            schema = fluss.Schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
            descriptor = fluss.TableDescriptor(schema, bucket_count=2, properties=properties)
            await admin.create_table(path, descriptor, ignore_if_exists=True)
            table = await conn.get_table(path)
            writer = table.new_append().create_writer()
            ids = list(range(start, start + count))
            writer.write_arrow(pa.table({"id": ids, "v": [f"value-{i}" for i in ids]}))
            await writer.flush()

    run_pyfluss(bootstrap, body)


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_metrics_and_status_of_a_local_cluster(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "strom", "local", "--data-dir", str(data_dir), "--port", str(port),
         "--tablet-servers", "2", "--tiering-runner", "local"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        output = []
        for line in process.stdout:
            output.append(line)
            if "cluster ready" in line:
                break
        else:
            raise AssertionError("strom local did not start:\n" + "".join(output))
        bootstrap = f"127.0.0.1:{port}"
        servers = json.loads((data_dir / "cluster.json").read_text())["servers"]
        assert {s["role"] for s in servers} == {"coordinator", "tablet-server", "tiering"}
        assert all(s["metrics"] for s in servers), servers
        tablets = [s["metrics"] for s in servers if s["role"] == "tablet-server"]
        tiering = next(s["metrics"] for s in servers if s["role"] == "tiering")
        coordinator = next(s["metrics"] for s in servers if s["role"] == "coordinator")

        def bytes_in(table: str) -> float:
            return sum(per_table(scrape(a), "fluss_tabletserver_table_bytesIn_total", table) for a in tablets)

        write(bootstrap, 0, 2000)
        first = {t: bytes_in(t) for t in (LAKE_TABLE, PLAIN_TABLE)}
        for table in first:
            assert first[table] >= log_bytes(data_dir, table) > 0
        grown = log_bytes(data_dir, PLAIN_TABLE)
        write(bootstrap, 2000, 3000)
        grown = log_bytes(data_dir, PLAIN_TABLE) - grown
        assert bytes_in(PLAIN_TABLE) - first[PLAIN_TABLE] >= grown > 0
        records = sum(
            per_table(scrape(a), "fluss_tabletserver_table_messagesIn_total", PLAIN_TABLE) for a in tablets
        )
        assert records == 5000

        # leaders, replicas and log sizes are state gauges, refreshed every two seconds
        def gauges() -> tuple[float, float] | None:
            samples = [scrape(a) for a in tablets]
            leaders = sum(v for s in samples for _, v in s["fluss_tabletserver_leaderCount"])
            size = sum(per_table(s, "fluss_tabletserver_table_logSize", PLAIN_TABLE) for s in samples)
            return (leaders, size) if leaders == 4 and size == log_bytes(data_dir, PLAIN_TABLE) else None

        wait_until(gauges, 20, "leader counts and log sizes")
        requests = scrape(coordinator)["fluss_coordinator_request_requests_total"]
        assert any(labels["api"] == "CREATE_TABLE" and v >= 2 for labels, v in requests)

        # the tiering service reports lag per lake table, and records tiered once it caught up
        def tiered() -> bool:
            samples = scrape(tiering)
            lag_reported = any(
                labels.get("table") == LAKE_TABLE for labels, _ in samples["fluss_tiering_table_tierLag"]
            )
            return (
                lag_reported
                and per_table(samples, "fluss_tiering_table_recordCount_total", LAKE_TABLE) >= 5000
            )

        wait_until(tiered, 90, "the tiering service to tier the lake table")
        lag = per_table(scrape(tiering), "fluss_tiering_table_pendingRecords", LAKE_TABLE)
        assert lag == 0

        state = json.loads(
            subprocess.run(
                [sys.executable, "-m", "strom", "status", "--bootstrap", bootstrap, "--json"],
                capture_output=True, text=True, check=True, timeout=60,
            ).stdout
        )  # fmt: skip
        roles = [(s["role"], s["id"], s["alive"]) for s in state["servers"]]
        assert roles == [("coordinator", 0, True), ("tablet-server", 0, True), ("tablet-server", 1, True)]
        for server in state["servers"][1:]:  # each tablet server's data directory, as its disk check saw it
            (disk,) = server["data_dirs"]
            assert disk["path"].startswith(str(tmp_path)) and disk["replicas"] == server["replicas"]
            assert 0 < disk["usage_ratio"] < 1 and disk["free_bytes"] > 0
            assert not disk["write_locked"] and disk["offline"] is None
        tables = {t["name"]: t for t in state["tables"]}
        assert set(tables) == {LAKE_TABLE, PLAIN_TABLE}
        for table in tables.values():
            assert [b["bucket"] for b in table["buckets"]] == [0, 1]
            for b in table["buckets"]:
                assert b["leader"] in (0, 1) and b["isr"] == [b["leader"]] and b["replicas"] == [b["leader"]]
            assert sum(b["high_watermark"] for b in table["buckets"]) == 5000
        lake = tables[LAKE_TABLE]["lake"]
        assert sum(o["offset"] for o in lake["offsets"]) == 5000 and lake["lag_records"] == 0
        assert tables[PLAIN_TABLE]["lake"] is None
        assert [t["table"] for t in state["tiering"]] == [f"shop.{LAKE_TABLE}"]

        human = subprocess.run(
            [sys.executable, "-m", "strom", "status", "--bootstrap", bootstrap],
            capture_output=True, text=True, check=True, timeout=60, env={"COLUMNS": "200", "PATH": ""},
        ).stdout  # fmt: skip
        assert "shop.events" in human and "Lake" in human and "Data directories" in human
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
