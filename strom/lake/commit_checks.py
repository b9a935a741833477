"""The format-independent rules of a tiering commit: results against offsets, round ids, staleness.

Every lake committer runs these before it touches its table:

* each write result must be of the format's type, for the committer's table, and have an end
  offset given for its bucket that is not below what it wrote (`checked_round`);
* a round is named by a digest of its files and offsets (`commit_id`), stored in the snapshot as
  ``strom-commit-id`` so that a retried commit finds the snapshot that already holds it;
* offsets must move forward relative to the latest tiering snapshot (`check_offsets_ahead`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake.errors import StaleLakeCommitError
from strom.lake.interface import BucketKey, LakeSnapshotInfo, WriteResult

__all__ = [
    "COMMIT_ATTEMPTS",
    "COMMIT_ID_PROPERTY",
    "check_offsets_ahead",
    "checked_results",
    "checked_round",
    "commit_id",
]

# Identifies a round's results in the snapshot that holds them (retries are recognised by it).
COMMIT_ID_PROPERTY = "strom-commit-id"
# How often a committer looks again after another commit got in first.
COMMIT_ATTEMPTS = 3

R = TypeVar("R", bound=WriteResult)


def _checked_result(result: WriteResult, result_type: type[R], format_name: str, info: TableInfo) -> R:
    if not isinstance(result, result_type):
        raise TypeError(f"not {format_name} write result: {type(result).__name__}")
    if result.table_bucket.table_id != info.table_id:
        raise ValueError(f"write result of {result.table_bucket} is not for table id {info.table_id}")
    return result


def checked_results(
    results: Sequence[WriteResult], result_type: type[R], format_name: str, info: TableInfo
) -> list[R]:
    """`results` as the format's type; `format_name` reads in "not <format_name> write result"."""
    return [_checked_result(r, result_type, format_name, info) for r in results]


def checked_round(
    results: Sequence[WriteResult],
    bucket_offsets: Mapping[BucketKey, int],
    result_type: type[R],
    format_name: str,
    info: TableInfo,
) -> tuple[list[R], dict[BucketKey, int]]:
    """The round's results (checked as by `checked_results`) and its end offsets as ints.

    Every result's bucket needs an end offset at or past what it wrote: otherwise the lake would
    hold records past the recorded offset and the next round would tier them again.
    """
    typed = checked_results(results, result_type, format_name, info)
    offsets = {(p, int(b)): int(o) for (p, b), o in bucket_offsets.items()}
    for result in typed:
        if result.bucket_key not in offsets:
            raise ValueError(f"no end offset given for bucket {result.table_bucket} of a write result")
        if result.end_offset is not None and result.end_offset > offsets[result.bucket_key]:
            raise ValueError(
                f"bucket {result.table_bucket} wrote records up to offset {result.end_offset} but its "
                f"end offset is given as {offsets[result.bucket_key]}"
            )
    return typed, offsets


def commit_id(file_names: Iterable[str], offsets: Mapping[BucketKey, int]) -> str:
    """A digest of the round's files and offsets: the same round always gets the same id."""
    names = sorted(file_names)
    keyed = sorted(((-1 if p is None else p), b, o) for (p, b), o in offsets.items())
    return hashlib.sha256(json.dumps([names, keyed]).encode()).hexdigest()[:32]


def check_offsets_ahead(
    table_path: TablePath,
    previous: LakeSnapshotInfo | None,
    offsets: Mapping[BucketKey, int],
    results: Sequence[WriteResult],
) -> None:
    """Refuse a round that would repeat records of the latest tiering snapshot `previous`.

    No result may start below its bucket's tiered offset, no bucket may go back, and at least one
    must advance (StaleLakeCommitError otherwise).
    """
    committed = previous.bucket_offsets if previous is not None else {}
    where = f"lake snapshot {previous.snapshot_id if previous else None}"
    overlapping = {
        r.bucket_key: (r.start_offset, committed[r.bucket_key])
        for r in results
        if r.start_offset is not None
        and r.bucket_key in committed
        and r.start_offset < committed[r.bucket_key]
    }
    if overlapping:
        # A job that started from older offsets re-read records the lake already holds.
        raise StaleLakeCommitError(
            f"Refusing to commit {table_path}: results start below the lake's tiered offsets (first "
            f"offset written, committed): {overlapping}; those records are already in {where}."
        )
    behind = {k: (o, committed[k]) for k, o in offsets.items() if k in committed and o < committed[k]}
    if behind:
        raise StaleLakeCommitError(
            f"Refusing to commit {table_path}: buckets {sorted(behind, key=str)} would go back from the "
            f"lake's tiered offsets (given, committed): {behind}. The {where} already holds these records."
        )
    if not any(k not in committed or o > committed[k] for k, o in offsets.items()):
        raise StaleLakeCommitError(
            f"Refusing to commit {table_path}: the offsets {dict(offsets)} are not ahead of {where}, "
            "which already holds them."
        )
