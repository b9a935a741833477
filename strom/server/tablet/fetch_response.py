"""The FetchLog answer as an `EncodedResponse`: the buckets' record bytes go to the socket as they
were read, without a copy into the protobuf message (see strom/rpc/encoded.py)."""

from __future__ import annotations

from collections.abc import Mapping

from strom.rpc.encoded import EncodedResponse, field_header
from strom.rpc.gen import fluss_api_pb2 as pb

_TABLES = pb.FetchLogResponse.DESCRIPTOR.fields_by_name["tables_resp"].number
_BUCKETS = pb.PbFetchLogRespForTable.DESCRIPTOR.fields_by_name["buckets_resp"].number
_RECORDS = pb.PbFetchLogRespForBucket.DESCRIPTOR.fields_by_name["records"].number


def encode_fetch_response(
    response: pb.FetchLogResponse, records: Mapping[tuple[int, int], bytes]
) -> EncodedResponse:
    """`response` (whose buckets carry no records) with `records[(table index, bucket index)]` spliced
    into the buckets as their `records` field."""
    out = EncodedResponse()
    for t, table in enumerate(response.tables_resp):
        encoded_table = EncodedResponse()
        encoded_table.add(pb.PbFetchLogRespForTable(table_id=table.table_id).SerializeToString())
        for b, bucket in enumerate(table.buckets_resp):
            encoded_bucket = EncodedResponse()
            encoded_bucket.add(bucket.SerializeToString())
            data = records.get((t, b))
            if data:
                encoded_bucket.add(field_header(_RECORDS, len(data)))
                encoded_bucket.add(data)
            encoded_table.embed(_BUCKETS, encoded_bucket)
        out.embed(_TABLES, encoded_table)
    return out
