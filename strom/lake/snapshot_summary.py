"""The properties of a tiering snapshot: what a committer writes and how they read back.

A tiering snapshot's summary carries the caller's properties, ``commit-user=__fluss_lake_tiering``,
``fluss-offsets`` (every bucket tiered so far, the round's offsets merged over the previous
snapshot's, with qualified partition names) and the round's ``strom-commit-id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from strom.common.partition import parse_partition_name, partition_qualified_name
from strom.common.table_descriptor import TableInfo
from strom.lake.commit_checks import COMMIT_ID_PROPERTY
from strom.lake.interface import BucketKey, LakeSnapshotInfo, WriteResult
from strom.lake.offsets import (
    COMMIT_USER_PROPERTY,
    FLUSS_LAKE_TIERING_COMMIT_USER,
    FLUSS_OFFSETS_PROPERTY,
    BucketOffset,
    decode_bucket_offsets,
    encode_bucket_offsets,
)

__all__ = ["qualified_partition_names", "tiering_snapshot_info", "tiering_summary"]


def qualified_partition_names(
    info: TableInfo, results: Sequence[WriteResult], given: Mapping[int, str] | None
) -> dict[int, str]:
    """Partition id -> qualified name ("dt=2025/region=eu") of the given and the results' partitions."""
    keys = info.partition_keys
    fluss_names = dict(given or {})
    for r in results:
        if r.table_bucket.partition_id is not None and r.partition_name is not None:
            fluss_names.setdefault(r.table_bucket.partition_id, r.partition_name)
    names: dict[int, str] = {}
    for pid, name in fluss_names.items():
        spec = parse_partition_name(keys, name)
        names[pid] = partition_qualified_name(keys, [spec[k] for k in keys])
    return names


def tiering_summary(
    previous: LakeSnapshotInfo | None,
    offsets: Mapping[BucketKey, int],
    names: Mapping[int, str],
    properties: Mapping[str, str] | None,
    round_id: str,
) -> dict[str, str]:
    """The summary of the snapshot that commits a round on top of tiering snapshot `previous`."""
    merged = dict(previous.bucket_offsets) if previous is not None else {}
    merged.update(offsets)
    known_names = {**(previous.partition_names if previous is not None else {}), **names}
    entries = [
        BucketOffset(p, b, o, None if p is None else known_names.get(p)) for (p, b), o in merged.items()
    ]
    summary = {str(k): str(v) for k, v in (properties or {}).items()}
    summary[COMMIT_USER_PROPERTY] = FLUSS_LAKE_TIERING_COMMIT_USER
    summary[FLUSS_OFFSETS_PROPERTY] = encode_bucket_offsets(entries)
    summary[COMMIT_ID_PROPERTY] = round_id
    return summary


def tiering_snapshot_info(
    snapshot_id: int, properties: dict[str, str], timestamp_ms: int
) -> LakeSnapshotInfo:
    """A tiering snapshot's offsets and partition names, read from its properties."""
    offsets = decode_bucket_offsets(properties[FLUSS_OFFSETS_PROPERTY])
    return LakeSnapshotInfo(
        snapshot_id=snapshot_id,
        bucket_offsets={(o.partition_id, o.bucket): o.offset for o in offsets},
        partition_names={
            o.partition_id: o.partition_name
            for o in offsets
            if o.partition_id is not None and o.partition_name is not None
        },
        properties=properties,
        timestamp_ms=timestamp_ms,
    )
