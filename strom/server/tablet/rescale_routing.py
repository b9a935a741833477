"""After a rescale, a log-table batch routed by the old bucket count is refused retriably.

The log-table counterpart of the primary-key check in `kv/key_check.py`: the rows' bucket keys must
hash to the bucket the batch was sent to under the table's current count. It decodes the Arrow
records, so it runs only for tables that were rescaled and have a bucket key; every other table keeps
the bytes-in, bytes-out path untouched.
"""

from __future__ import annotations

import numpy as np

from strom.common.rescale import stale_routing, was_rescaled
from strom.record.arrow_batch import decode_arrow_batch
from strom.record.columnar_keys import ColumnarBucketer
from strom.record.log_batch import iter_batches
from strom.server.tablet.replica_manager import Replica


def check_log_routing(replica: Replica, records: bytes | memoryview) -> None:
    """After a rescale, a log-table batch routed by the old count is refused (retriably): its rows'
    bucket keys must hash to this bucket. Tables never rescaled, or without a bucket key, skip this."""
    info = replica.table_info
    if not was_rescaled(info.descriptor) or not info.bucket_keys or replica.bucket.bucket < 0:
        return
    bucketer = replica.rescale_routing
    if bucketer is None or bucketer[0] is not info:
        schema = info.schema
        arrow_schema = schema.to_arrow_schema()
        bucketer = (
            info,
            ColumnarBucketer(
                schema.row_type,
                arrow_schema,
                schema.column_indexes(info.bucket_keys),
                # the table may have turned lake-enabled since: hash as its clients do
                None if info.datalake_format is None else str(info.datalake_format),
                info.bucket_count,
            ),
            arrow_schema,
        )
        replica.rescale_routing = bucketer
    _, columnar, arrow_schema = bucketer
    for pos, header in iter_batches(records):
        schema = arrow_schema
        if header.schema_id != info.schema_id:  # a writer still on an older schema (added columns)
            older = replica.schema_history.get(header.schema_id)
            if older is None:
                continue  # refused by the batch check as an unknown schema
            schema = older.to_arrow_schema()
        rows, _ = decode_arrow_batch(records, pos, header, schema)
        if rows.num_rows == 0:
            continue
        buckets = columnar.buckets(rows)
        wrong = np.flatnonzero(buckets != replica.bucket.bucket)
        if len(wrong):
            raise stale_routing(info, replica.bucket.bucket, int(buckets[wrong[0]]))
