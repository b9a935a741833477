"""The history checker on hand-made histories: it finds each kind of anomaly it claims to find, and
accepts what Jepsen's model allows (an operation of unknown outcome may or may not have happened)."""

from __future__ import annotations

from typing import Any

from faults.checker import (
    CheckResult,
    check_appends,
    check_keys,
    check_lake,
    check_replicas,
    longest_write_gap,
)
from faults.workload import ID_SPAN
from strom.record.change_type import ChangeType

W = ID_SPAN  # worker 1's first id


def op(kind: str, start: float, end: float, outcome: str = "ok", result: Any = None, **args: Any) -> Any:
    """One history entry; `result` is what a lookup returned, `args` what the operation was given."""
    entry = {"worker": 1, "op": kind, "args": args, "start": start, "end": end, "outcome": outcome}
    return {**entry, "value": result}


def appends() -> list[dict[str, Any]]:
    return [
        op("append", 0, 1, ids=[W, W + 1]),
        op("append", 2, 3, "unknown", ids=[W + 2]),
        op("append", 4, 5, ids=[W + 3]),
        op("append", 6, 7, "fail", ids=[W + 4]),
    ]


def test_appends_read_once_in_order_pass_with_or_without_the_unknown_one() -> None:
    for reads in (
        [[0, 0, W], [0, 1, W + 1], [0, 2, W + 3]],
        [[0, 0, W], [0, 1, W + 1], [0, 2, W + 2], [1, 0, W + 3]],
    ):
        result = CheckResult()
        check_appends(appends(), {"a": reads, "b": list(reads)}, result)
        assert result.valid, result.anomalies
        assert result.acknowledged == 3


def test_lost_duplicated_phantom_reordered_and_disagreeing_reads_are_found() -> None:
    result = CheckResult()
    a = [[0, 0, W], [0, 1, W + 3], [0, 2, W + 1], [0, 3, W + 1], [0, 4, W + 4]]
    b = [[0, 0, W], [0, 1, W + 1], [0, 2, W + 3]]
    check_appends(appends(), {"a": a, "b": b}, result)
    assert result.duplicated == 1  # W + 1 twice in a
    assert result.phantom == 1  # W + 4: its append certainly failed
    assert result.reordered >= 1  # W + 3 (acknowledged later) before W + 1 in a
    assert result.readers_disagree >= 1
    result = CheckResult()
    check_appends(appends(), {"a": [[0, 0, W], [0, 1, W + 1]]}, result)
    assert result.lost == 1 and not result.valid


def test_divergent_replicas_are_counted_over_their_common_offsets() -> None:
    same = {"fluss/events-0/bucket-0": [(0, 4, 111), (5, 9, 222)]}
    longer = {"fluss/events-0/bucket-0": [(0, 4, 111), (5, 9, 222), (10, 12, 333)]}
    result = CheckResult()
    check_replicas({"t0": same, "t1": longer}, result)
    assert result.valid and result.replica_batches_compared == 2
    other = {"fluss/events-0/bucket-0": [(0, 4, 111), (5, 9, 999)]}
    check_replicas({"t0": same, "t2": other}, result)
    assert result.divergent == 5


def key_history() -> list[dict[str, Any]]:
    return [
        op("upsert", 0, 1, key=7, value=70),
        op("lookup", 1.5, 1.6, result=70, key=7),
        op("upsert", 2, 3, "unknown", key=7, value=71),
        op("delete", 4, 5, key=8),
        op("upsert", 6, 7, key=9, value=90),
        op("delete", 8, 9, key=9),
    ]


def changelog(state: dict[int, int]) -> list[list[Any]]:
    return [[0, i, int(ChangeType.INSERT), k, v] for i, (k, v) in enumerate(state.items())]


def test_final_state_is_the_last_acknowledged_write_or_an_unknown_one() -> None:
    for final in ({7: 70}, {7: 71}):
        result = CheckResult()
        lookups = {"7": final[7], "8": None, "9": None}
        check_keys(key_history(), lookups, changelog(final), result)
        assert result.valid, result.anomalies
    result = CheckResult()
    check_keys(key_history(), {"7": 70, "8": None, "9": 90}, changelog({7: 70, 9: 90}), result)
    assert result.wrong_final_state == 1  # 9 was deleted after 90 was acknowledged
    result = CheckResult()
    check_keys(key_history(), {"7": 70, "8": None, "9": None}, changelog({7: 71}), result)
    assert result.changelog_mismatch == 1


def test_a_lookup_that_missed_an_acknowledged_write_is_stale() -> None:
    history = [*key_history(), op("lookup", 10, 11, result=None, key=7)]
    result = CheckResult()
    check_keys(history, {"7": 70, "8": None, "9": None}, changelog({7: 70}), result)
    assert result.stale_lookups == 1


def test_lake_must_equal_fluss() -> None:
    result = CheckResult()
    check_lake([1, 2, 3], [3, 2, 1], {7: 70, 8: None}, {7: 70}, result)
    assert result.valid
    check_lake([1, 2, 3], [1, 2], {7: 70}, {7: 71}, result)
    assert result.lake_mismatch == 2


def test_longest_write_gap() -> None:
    history = [op("upsert", 0, 1, key=1, value=1), op("lookup", 1, 4, key=1), op("append", 3, 5, ids=[1])]
    assert longest_write_gap(history, 0, 6) == 4  # from the ack at 1 to the ack at 5; lookups do not count


def test_a_scenario_failure_makes_the_history_invalid() -> None:
    assert not CheckResult(scenario_failures=1).valid
