"""Lake formats: the plug-in interface the tiering service uses, and its implementations.

storage = lake_storage_from_config(cluster_config)   # datalake.format + datalake.<format>.*
storage.catalog().create_table(table_info)
with storage.writer(table_info, bucket, partition) as writer: ...   # on executors
storage.committer(table_info).commit(results, bucket_offsets)        # on the driver
"""

from strom.lake.errors import LakeCommitConflictError, StaleLakeCommitError
from strom.lake.interface import (
    TABLE_DATALAKE_AUTO_MAINTENANCE,
    BucketKey,
    LakeCatalog,
    LakeCommitter,
    LakeSnapshotInfo,
    LakeStorage,
    LakeWriter,
    MaintenancePlan,
    WriteResult,
    maintenance_plan,
)
from strom.lake.offsets import FLUSS_LAKE_TIERING_COMMIT_USER, FLUSS_OFFSETS_PROPERTY, BucketOffset
from strom.lake.registry import (
    lake_storage_from_config,
    load_lake_storage,
    register_lake_storage,
    registered_formats,
)

__all__ = [
    "FLUSS_LAKE_TIERING_COMMIT_USER",
    "FLUSS_OFFSETS_PROPERTY",
    "TABLE_DATALAKE_AUTO_MAINTENANCE",
    "BucketKey",
    "BucketOffset",
    "LakeCatalog",
    "LakeCommitConflictError",
    "LakeCommitter",
    "LakeSnapshotInfo",
    "LakeStorage",
    "LakeWriter",
    "MaintenancePlan",
    "StaleLakeCommitError",
    "WriteResult",
    "lake_storage_from_config",
    "load_lake_storage",
    "maintenance_plan",
    "register_lake_storage",
    "registered_formats",
]
