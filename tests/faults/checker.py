"""The history checker: what the final reads, the replicas' segment files and the lake must show, given
what the workload was told (Jepsen's model: an operation with an unknown outcome may or may not have
happened, at any time after it started).

- Appends: every acknowledged id is read exactly once by every reader, at the same (bucket, offset) by
  every reader; a worker's acknowledged ids lie in the order they were acknowledged within a bucket; no
  reader sees an id nobody wrote (or one whose append certainly failed).
- Replicas: every copy of a bucket holds the same batches over the offsets they have in common.
- Keys: each key's final value is its last acknowledged write, or one of its writes with an unknown
  outcome; the changelog replayed from the start gives the same state; every lookup during the run saw a
  value that was current at some moment within it.
- Lake: once tiering has caught up, it holds exactly what Fluss holds.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.record.change_type import ChangeType
from strom.record.log_batch import iter_batches

from .workload import ID_SPAN

MAX_EXAMPLES = 8
ABSENT = None  # the value of a key that does not exist (never written, or deleted)


@dataclass
class CheckResult:
    acknowledged: int = 0  # acknowledged appended records + acknowledged upserts/deletes
    lost: int = 0
    duplicated: int = 0
    divergent: int = 0
    reordered: int = 0
    phantom: int = 0
    readers_disagree: int = 0
    wrong_final_state: int = 0
    changelog_mismatch: int = 0
    stale_lookups: int = 0
    replica_batches_compared: int = 0  # so that a check that compared nothing shows it
    lake_mismatch: int = 0
    scenario_failures: int = 0  # what a scenario nemesis saw fail (alter_one_way)
    anomalies: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.anomalies) < 4 * MAX_EXAMPLES:
            self.anomalies.append(message)

    @property
    def valid(self) -> bool:
        return not any(
            (
                self.lost,
                self.duplicated,
                self.divergent,
                self.reordered,
                self.phantom,
                self.readers_disagree,
                self.wrong_final_state,
                self.changelog_mismatch,
                self.stale_lookups,
                self.lake_mismatch,
                self.scenario_failures,
            )
        )


# ---- appends ---------------------------------------------------------------------------------


def check_appends(
    history: list[dict[str, Any]], reads: Mapping[str, list[list[int]]], result: CheckResult
) -> None:
    acked: dict[int, float] = {}  # id -> when its append was acknowledged
    possible: set[int] = set()
    for op in history:
        if op["op"] != "append":
            continue
        if op["outcome"] == "ok":
            for i in op["args"]["ids"]:
                acked[i] = op["end"]
        if op["outcome"] in ("ok", "unknown"):
            possible.update(op["args"]["ids"])
    result.acknowledged += len(acked)
    where: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)  # id -> reader -> (bucket, offset)
    for reader, records in reads.items():
        counts = Counter(i for _, _, i in records)
        lost = [i for i in acked if counts[i] == 0]
        dups = [i for i, n in counts.items() if n > 1]
        phantoms = [i for i in counts if i not in possible]
        result.lost += len(lost)
        result.duplicated += sum(counts[i] - 1 for i in dups)
        result.phantom += len(phantoms)
        if lost:
            result.note(
                f"{reader}: {len(lost)} acknowledged ids not read, e.g. {sorted(lost)[:MAX_EXAMPLES]}"
            )
        if dups:
            result.note(f"{reader}: {len(dups)} ids read more than once, e.g. {sorted(dups)[:MAX_EXAMPLES]}")
        if phantoms:
            result.note(f"{reader}: {len(phantoms)} ids nobody wrote, e.g. {sorted(phantoms)[:MAX_EXAMPLES]}")
        per_bucket: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for bucket, offset, i in records:
            where[i][reader] = (bucket, offset)
            per_bucket[bucket].append((offset, i))
        # within a bucket, a worker's acknowledged ids (which it acknowledged in increasing order, one
        # operation at a time) must lie at increasing offsets
        for bucket, entries in per_bucket.items():
            last_by_worker: dict[int, tuple[float, int]] = {}
            for offset, i in sorted(entries):
                if i not in acked:
                    continue
                worker = i // ID_SPAN
                before = last_by_worker.get(worker)
                if before is not None and before[0] > acked[i]:
                    result.reordered += 1
                    result.note(
                        f"{reader}: bucket {bucket} holds id {i} at offset {offset} after id {before[1]}, "
                        "which was acknowledged later"
                    )
                last_by_worker[worker] = (acked[i], i)
    if len(reads) > 1:
        for i, places in where.items():
            if len(set(places.values())) > 1:
                result.readers_disagree += 1
                result.note(f"readers place id {i} differently: {places}")


# ---- replicas --------------------------------------------------------------------------------


def replica_batches(data_dir: Path) -> dict[str, list[tuple[int, int, int]]]:
    """`<db>/<table>-<id>/bucket-<n>` -> (base offset, last offset, CRC) of every stored batch, read from
    the segment files (`bucket-<n>/log/<base offset>.log`) directly, after a clean shutdown, so that
    nothing is being written. A PK bucket's RocksDB (`bucket-<n>/kv`) has .log files of its own: skipped."""
    found: dict[str, list[tuple[int, int, int]]] = {}
    for bucket_dir in sorted(data_dir.glob("*/*/bucket-*")):
        batches = []
        for segment in sorted((bucket_dir / "log").glob("*.log")):
            data = segment.read_bytes()
            batches += [(h.base_offset, h.last_offset, h.crc) for _, h in iter_batches(data)]
        found[str(bucket_dir.relative_to(data_dir))] = sorted(batches)
    return found


def check_replicas(
    replicas: Mapping[str, Mapping[str, list[tuple[int, int, int]]]], result: CheckResult
) -> None:
    """`replicas`: server -> bucket path -> batches. Copies of a bucket must agree where they overlap."""
    by_bucket: dict[str, dict[str, list[tuple[int, int, int]]]] = defaultdict(dict)
    for server, buckets in replicas.items():
        for bucket, batches in buckets.items():
            by_bucket[bucket][server] = batches
    for bucket, copies in by_bucket.items():
        servers = sorted(copies)
        for a_index, a in enumerate(servers):
            for b in servers[a_index + 1 :]:
                a_batches, b_batches = copies[a], copies[b]
                if not a_batches or not b_batches:
                    continue
                low = max(a_batches[0][0], b_batches[0][0])
                high = min(a_batches[-1][1], b_batches[-1][1])
                in_a = {x for x in a_batches if x[0] >= low and x[1] <= high}
                in_b = {x for x in b_batches if x[0] >= low and x[1] <= high}
                differ = in_a ^ in_b
                result.replica_batches_compared += len(in_a | in_b)
                if differ:
                    records = sum(last - base + 1 for base, last, _ in in_a - in_b)
                    result.divergent += max(records, 1)
                    result.note(
                        f"{bucket}: {a} and {b} differ over offsets {low}..{high}: "
                        f"{sorted(differ)[:MAX_EXAMPLES]}"
                    )


# ---- keys ------------------------------------------------------------------------------------


def key_writes(history: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    writes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for op in history:
        if op["op"] in ("upsert", "delete") and op["outcome"] in ("ok", "unknown"):
            writes[op["args"]["key"]].append(op)
    for ops in writes.values():
        ops.sort(key=lambda o: o["start"])
    return writes


def written_value(op: dict[str, Any]) -> int | None:
    return op["args"]["value"] if op["op"] == "upsert" else ABSENT


def allowed_final(ops: list[dict[str, Any]]) -> set[int | None]:
    """The last acknowledged write's value, or any write of unknown outcome (it may land at any time
    after it started); a key without an acknowledged write may also be absent."""
    acked = [o for o in ops if o["outcome"] == "ok"]
    allowed = {written_value(o) for o in ops if o["outcome"] == "unknown"}
    allowed.add(written_value(acked[-1]) if acked else ABSENT)
    return allowed


def check_keys(
    history: list[dict[str, Any]],
    lookups: Mapping[str, int | None],
    changelog: list[list[Any]],
    result: CheckResult,
) -> None:
    writes = key_writes(history)
    result.acknowledged += sum(1 for ops in writes.values() for o in ops if o["outcome"] == "ok")
    for key_text, value in lookups.items():
        key = int(key_text)
        allowed = allowed_final(writes.get(key, []))
        if value not in allowed:
            result.wrong_final_state += 1
            if result.wrong_final_state <= MAX_EXAMPLES:  # examples, not all: other kinds need room
                result.note(f"key {key}: final value {value}, expected one of {sorted(allowed, key=str)}")
    # the changelog, replayed in offset order per bucket, must rebuild the table the lookups see
    state: dict[int, int] = {}
    for _, _, kind, key, value in sorted(changelog, key=lambda c: (c[0], c[1])):
        if kind in (ChangeType.INSERT, ChangeType.UPDATE_AFTER):
            state[key] = value
        elif kind == ChangeType.DELETE:
            state.pop(key, None)
    for key_text, value in lookups.items():
        if state.get(int(key_text)) != value:
            result.changelog_mismatch += 1
            if result.changelog_mismatch <= MAX_EXAMPLES:
                result.note(
                    f"key {key_text}: lookup gives {value}, "
                    f"the changelog replays to {state.get(int(key_text))}"
                )
    check_lookups(history, writes, result)


def check_lookups(
    history: list[dict[str, Any]], writes: dict[int, list[dict[str, Any]]], result: CheckResult
) -> None:
    """A lookup over [start, end] must see the value of the last write acknowledged before it started,
    or of a write that had started before it ended and was not acknowledged before it started."""
    for op in history:
        if op["op"] != "lookup" or op["outcome"] != "ok":
            continue
        ops = writes.get(op["args"]["key"], [])
        done_before = [o for o in ops if o["outcome"] == "ok" and o["end"] < op["start"]]
        allowed = {written_value(done_before[-1]) if done_before else ABSENT}
        floor = done_before[-1]["start"] if done_before else float("-inf")
        for o in ops:
            if o["start"] < op["end"] and (o["outcome"] == "unknown" or o["start"] > floor):
                allowed.add(written_value(o))
        if op["value"] not in allowed:
            result.stale_lookups += 1
            if result.stale_lookups <= MAX_EXAMPLES:
                result.note(
                    f"lookup of {op['args']['key']} at {op['start']:.2f}..{op['end']:.2f} saw {op['value']}, "
                    f"allowed {sorted(allowed, key=str)}"
                )


# ---- lake ------------------------------------------------------------------------------------


def check_lake(
    fluss_ids: list[int],
    lake_ids: list[int],
    fluss_state: Mapping[int, int | None],
    lake_state: Mapping[int, int],
    result: CheckResult,
) -> None:
    if Counter(fluss_ids) != Counter(lake_ids):
        missing = sorted((Counter(fluss_ids) - Counter(lake_ids)).elements())
        extra = sorted((Counter(lake_ids) - Counter(fluss_ids)).elements())
        result.lake_mismatch += len(missing) + len(extra)
        result.note(
            f"lake log table: {len(missing)} records missing, e.g. {missing[:MAX_EXAMPLES]}; "
            f"{len(extra)} extra, e.g. {extra[:MAX_EXAMPLES]}"
        )
    live = {k: v for k, v in fluss_state.items() if v is not None}
    if live != dict(lake_state):
        differ = sorted(k for k in set(live) | set(lake_state) if live.get(k) != lake_state.get(k))
        result.lake_mismatch += len(differ)
        result.note(f"lake PK table differs from Fluss at {len(differ)} keys, e.g. {differ[:MAX_EXAMPLES]}")


# ---- availability ----------------------------------------------------------------------------


def longest_write_gap(history: Iterable[dict[str, Any]], start: float, end: float) -> float:
    """The longest time within [start, end] in which no write was acknowledged."""
    acks = sorted(
        o["end"] for o in history if o["op"] != "lookup" and o["outcome"] == "ok" and start <= o["end"] <= end
    )
    points = [start, *acks, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)
