"""One campaign: a cluster on its own network, workers writing and reading through it, a nemesis round
after round, then heal, settle, read everything back and check the history."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .bed import ROOT, FaultCluster, wait_until
from .checker import (
    CheckResult,
    check_appends,
    check_keys,
    check_lake,
    check_replicas,
    longest_write_gap,
    replica_batches,
)
from .nemesis import KINDS, heal_everything, hold, inject, schedule
from .workload import LOG_TABLE, PK_TABLE, TABLES

log = logging.getLogger(__name__)
NOT_ANOMALIES = ("anomalies", "acknowledged", "replica_batches_compared")


@dataclass
class Round:
    index: int
    kind: str
    description: str
    start: float
    healed: float = 0.0
    end: float = 0.0
    operations: int = 0
    acknowledged: int = 0
    unknown: int = 0
    failed: int = 0
    max_write_gap_s: float = 0.0


@dataclass
class Settings:
    seed: int = 1
    minutes: float | None = None  # run rounds until this much time has passed...
    rounds: int | None = None  # ...or exactly this many
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    hold_s: float = 6.0  # a fault lasts at least this long
    recover_s: float = 4.0  # writing goes on, healed, before the next round
    workers: tuple[str, ...] = ("pyfluss", "strom")
    tiering: bool = True
    lake_timeout_s: float = 120.0
    base_dir: Path | None = None
    keep: bool = False  # keep the data directory (logs, history) after a passing run


@dataclass
class Outcome:
    rounds: list[Round]
    check: CheckResult
    operations: int
    max_write_unavailability_s: float
    nemeses: list[str]
    base_dir: Path
    notes: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "rounds": len(self.rounds),
            "operations": self.operations,
            "acknowledged": self.check.acknowledged,
            "lost": self.check.lost,
            "duplicated": self.check.duplicated,
            "divergent": self.check.divergent,
            "max_write_unavailability_s": round(self.max_write_unavailability_s, 2),
            "nemeses": self.nemeses,
            "valid": self.check.valid,
            "anomalies": {k: v for k, v in asdict(self.check).items() if k not in NOT_ANOMALIES and v},
            "replica_batches_compared": self.check.replica_batches_compared,
            "base_dir": str(self.base_dir),
        }

    def table(self) -> str:
        lines = [
            f"{'round':>5}  {'nemesis':<16} {'ops':>6} {'acked':>6} {'unknown':>7} {'failed':>6} "
            f"{'gap s':>6}  what"
        ]
        for r in self.rounds:
            lines.append(
                f"{r.index:>5}  {r.kind:<16} {r.operations:>6} {r.acknowledged:>6} {r.unknown:>7} "
                f"{r.failed:>6} {r.max_write_gap_s:>6.2f}  {r.description}"
            )
        c = self.check
        lines += [
            "",
            f"operations {self.operations}   acknowledged writes {c.acknowledged}   lost {c.lost}   "
            f"duplicated {c.duplicated}   divergent {c.divergent}   longest write unavailability "
            f"{self.max_write_unavailability_s:.2f} s",
            f"reordered {c.reordered}   phantom {c.phantom}   readers disagree {c.readers_disagree}   "
            f"wrong final state {c.wrong_final_state}   changelog mismatch {c.changelog_mismatch}   "
            f"stale lookups {c.stale_lookups}   lake mismatch {c.lake_mismatch}   scenario failures "
            f"{c.scenario_failures}   replica batches compared "
            f"{c.replica_batches_compared}",
            "VALID" if c.valid else "INVALID",
            *c.anomalies,
            *self.notes,
        ]
        return "\n".join(lines)


def load_history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a worker killed mid-line leaves a torn last line
            entries.append(json.loads(line))
    return entries


def run_client(cluster: FaultCluster, args: list[str], log_path: Path, timeout: float) -> None:
    with open(log_path, "ab") as out:
        result = subprocess.run(
            cluster.client_command(*args), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout
        )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} exited with {result.returncode}; see {log_path}")


def read_lake(cluster: FaultCluster) -> tuple[list[int], dict[int, int]]:
    """The lake's log ids and PK state, read from the warehouse files and the SQLite catalog directly
    (the catalog as the tiering service opens it: the SQL catalog keys tables by catalog name)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from strom.lake.iceberg.catalog import load_iceberg_catalog

    properties = {
        k.removeprefix("datalake.iceberg."): v
        for k, v in cluster.lake_config.items()
        if k.startswith("datalake.iceberg.")
    }
    catalog = load_iceberg_catalog(properties)
    ids: list[int] = []
    state: dict[int, int] = {}
    with contextlib.suppress(NoSuchTableError, NoSuchNamespaceError):  # not tiered yet: empty
        log_table = catalog.load_table(f"fluss.{LOG_TABLE}")
        ids = log_table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    with contextlib.suppress(NoSuchTableError, NoSuchNamespaceError):
        rows = catalog.load_table(f"fluss.{PK_TABLE}").scan(selected_fields=("k", "v")).to_arrow().to_pylist()
        state = {r["k"]: r["v"] for r in rows}
    return ids, state


def run(settings: Settings) -> Outcome:
    base_dir = settings.base_dir or Path(tempfile.mkdtemp(prefix="strom-faults-"))
    base_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(settings.seed)
    cluster = FaultCluster(base_dir, tiering=settings.tiering)
    notes: list[str] = []
    workers: list[subprocess.Popen[bytes]] = []
    history_path = base_dir / "history.jsonl"
    stop_path = base_dir / "stop"
    rounds: list[Round] = []
    findings: list[str] = []
    try:
        cluster.start()
        if cluster.power_cut_disabled:
            notes.append(cluster.power_cut_disabled)
        for attempt in range(3):  # pyfluss 1.0 once died of SIGABRT here, silently: try again
            try:
                run_client(
                    cluster,
                    ["-m", "tests.faults.workload", "--setup", "--bootstrap", cluster.bootstrap],
                    cluster.logs / "setup.log",
                    120,
                )
                break
            except RuntimeError as e:
                if attempt == 2:
                    raise
                notes.append(f"creating the tables failed once: {e}")
        cluster.settle(TABLES, timeout=60)
        worker_ids = list(range(1, len(settings.workers) + 1))
        for worker, client in zip(worker_ids, settings.workers, strict=True):
            out = open(cluster.logs / f"worker-{worker}.log", "ab")  # noqa: SIM115 - the child keeps it
            workers.append(
                subprocess.Popen(
                    cluster.client_command(
                        "-m",
                        "tests.faults.workload",
                        "--bootstrap",
                        cluster.bootstrap,
                        "--client",
                        client,
                        "--worker",
                        str(worker),
                        "--seed",
                        str(settings.seed),
                        "--history",
                        str(history_path),
                        "--stop",
                        str(stop_path),
                    ),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    start_new_session=True,
                )
            )
            out.close()
        wait_until(
            lambda: sum(o["outcome"] == "ok" for o in load_history(history_path)) >= 10,
            60,
            "the workers' first acknowledged writes",
        )
        began = time.monotonic()
        deadline = began + settings.minutes * 60 if settings.minutes else None
        plan = schedule(rng, settings.kinds, settings.rounds or 10_000)
        for index, kind in enumerate(plan, start=1):
            if deadline is not None and time.monotonic() >= deadline:
                break
            started = time.monotonic()
            fault = inject(kind, cluster, rng, settings.hold_s)
            log.info("round %d: %s", index, fault.description)
            current = Round(index, kind, fault.description, started)
            rounds.append(current)
            hold(fault, started)
            fault.heal()
            findings += fault.findings
            current.description = fault.description  # a scenario adds what it saw at the heal
            restarted = heal_everything(cluster)
            if restarted:
                current.description += f" (restarted {restarted})"
            current.healed = time.monotonic()
            time.sleep(settings.recover_s)
            try:  # the next fault starts on a whole cluster, so each round's figures are its own
                wait_until(lambda: cluster.healthy(TABLES), 60, "the cluster whole again", interval=0.5)
            except TimeoutError as e:
                notes.append(f"round {index} ({fault.description}): {e}")
            current.end = time.monotonic()
            for name, worker_process in zip(settings.workers, workers, strict=True):
                if worker_process.poll() is not None:
                    raise RuntimeError(f"the {name} worker exited with {worker_process.returncode}")
        stop_path.touch()
        for worker_process in workers:
            try:
                worker_process.wait(30)
            except subprocess.TimeoutExpired:
                worker_process.kill()
                notes.append("a worker did not stop within 30 s of the stop file and was killed")
        heal_everything(cluster)
        settle_s = cluster.settle(TABLES, timeout=120)
        notes.append(f"the cluster settled {settle_s:.1f} s after the last round")

        history = load_history(history_path)
        reads_path = base_dir / "reads.json"
        run_client(
            cluster,
            [
                "-m",
                "tests.faults.reader",
                "--bootstrap",
                cluster.bootstrap,
                "--workers",
                ",".join(map(str, worker_ids)),
                "--out",
                str(reads_path),
            ],
            cluster.logs / "reader.log",
            300,
        )
        reads = json.loads(reads_path.read_text())
        notes += reads["errors"]
        check = CheckResult(scenario_failures=len(findings))
        for finding in findings:
            check.note(finding)
        check_appends(history, reads["log"], check)
        if "lookups" in reads:
            check_keys(history, reads["lookups"], reads["changelog"], check)
        else:
            check.wrong_final_state += 1
            check.note("the primary-key table could not be read back")
        if len(reads["log"]) < 2:
            check.readers_disagree += 1
            check.note(f"only {sorted(reads['log'])} read the log table back")

        if settings.tiering:
            fluss_ids = [i for _, _, i in reads["log"].get("strom", [])]
            fluss_state = {int(k): v for k, v in reads.get("lookups", {}).items()}
            started = time.monotonic()
            lake: tuple[list[int], dict[int, int]] = ([], {})
            while time.monotonic() - started < settings.lake_timeout_s:
                lake = read_lake(cluster)
                probe = CheckResult()
                check_lake(fluss_ids, lake[0], fluss_state, lake[1], probe)
                if probe.lake_mismatch == 0:
                    notes.append(
                        f"the lake caught up {time.monotonic() - started:.1f} s after the final reads"
                    )
                    break
                time.sleep(1)
            check_lake(fluss_ids, lake[0], fluss_state, lake[1], check)

        # every replica's segment files, read after a clean stop of its server
        replicas = {}
        for server_id in cluster.tablet_server_ids:
            name = f"tablet-server-{server_id}"
            cluster.servers[name].stop()
            replicas[name] = replica_batches(cluster.servers[name].data_dir)
        check_replicas(replicas, check)
    finally:
        stop_path.touch()
        for worker_process in workers:
            if worker_process.poll() is None:
                worker_process.kill()
                worker_process.wait()
        cluster.stop()

    history = load_history(history_path)
    for r in rounds:
        # an operation belongs to the round it started in: a write the fault held up may end later
        ops = [o for o in history if r.start <= o["start"] < (r.end or float("inf"))]
        r.operations = len(ops)
        r.acknowledged = sum(1 for o in ops if o["outcome"] == "ok" and o["op"] != "lookup")
        r.unknown = sum(1 for o in ops if o["outcome"] == "unknown")
        r.failed = sum(1 for o in ops if o["outcome"] == "fail")
        r.max_write_gap_s = longest_write_gap(history, r.start, r.end)
    return Outcome(
        rounds=rounds,
        check=check,
        operations=len(history),
        max_write_unavailability_s=max((r.max_write_gap_s for r in rounds), default=0.0),
        nemeses=sorted({r.kind for r in rounds if not r.description.startswith("skipped")}),
        base_dir=base_dir,
        notes=notes,
    )
