"""What an online bucket rescale leaves on a table's descriptor, read by coordinator and tablet servers.

Two custom properties travel with the table (in GetTableInfo and in UpdateMetadata), so every tablet
server learns them with the bucket count they belong to, and any server that leads a bucket later
(after a failover) knows them too:

- `strom.rescale.sealed` (`true`) while the rescale moves data: the table's buckets refuse writes and
  lookups with a retriable error, so no write can land behind the move.
- `strom.rescale.from` (the bucket count before the last rescale) once the count changed: a write or
  lookup routed by an older count is refused with a retriable error (UNKNOWN_TABLE_OR_BUCKET) instead
  of landing in, or missing, the wrong bucket. A table never rescaled keeps Fluss's behaviour
  (a mis-routed key is a corrupt request).
"""

from __future__ import annotations

from strom.common.errors import UnknownTableOrBucketError
from strom.common.table_descriptor import TableDescriptor, TableInfo

SEALED_PROPERTY = "strom.rescale.sealed"
FROM_PROPERTY = "strom.rescale.from"
# only the coordinator's rescale sets these: a user-set seal would refuse every write forever
RESERVED_PREFIX = "strom.rescale."


def is_sealed(descriptor: TableDescriptor) -> bool:
    return descriptor.custom_properties.get(SEALED_PROPERTY) == "true"


def was_rescaled(descriptor: TableDescriptor) -> bool:
    return FROM_PROPERTY in descriptor.custom_properties


def refuse_if_sealed(info: TableInfo, what: str) -> None:
    """A sealed table's buckets take no client writes or lookups until the rescale is done."""
    if is_sealed(info.descriptor):
        raise UnknownTableOrBucketError(
            f"table '{info.table_path}' is being rescaled to {info.bucket_count} buckets: {what} is "
            "refused until the move ends; retry (and refresh the table's metadata)"
        )


def stale_routing(info: TableInfo, bucket: int, found: int) -> UnknownTableOrBucketError:
    """The error for a key sent to `bucket` that lives in `found` under the table's current count."""
    before = info.descriptor.custom_properties.get(FROM_PROPERTY)
    return UnknownTableOrBucketError(
        f"a key sent to bucket {bucket} of table '{info.table_path}' belongs to bucket {found}: the table "
        f"now has {info.bucket_count} buckets (it had {before}); "
        "refresh the table's metadata and route again"
    )
