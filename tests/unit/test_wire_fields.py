"""Views of length-delimited protobuf fields agree with what protobuf itself parses."""

from __future__ import annotations

import pytest

from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.wire_fields import length_delimited


def test_records_of_every_bucket_as_views_of_the_body() -> None:
    request = pb.ProduceLogRequest(acks=-1, table_id=1 << 40, timeout_ms=30_000)
    request.buckets_req.add(bucket_id=0, records=b"a" * 300)
    request.buckets_req.add(bucket_id=7, partition_id=-3, records=bytes(range(256)) * 1000)
    request.buckets_req.add(bucket_id=2, records=b"")
    body = memoryview(request.SerializeToString())
    buckets = list(length_delimited(body, 4))
    assert [bytes(r) for b in buckets for r in length_delimited(b, 3)] == [
        e.records for e in request.buckets_req
    ]
    assert all(r.obj is body.obj for b in buckets for r in length_delimited(b, 3))  # views, not copies


def test_a_repeated_singular_field_is_seen_each_time() -> None:
    """Protobuf keeps the last occurrence of a singular field; the caller takes the last view."""
    first = pb.PbProduceLogReqForBucket(bucket_id=1, records=b"old").SerializeToString()
    second = pb.PbProduceLogReqForBucket(bucket_id=1, records=b"new").SerializeToString()
    merged = pb.PbProduceLogReqForBucket.FromString(first + second)
    views = [bytes(v) for v in length_delimited(memoryview(first + second), 3)]
    assert views == [b"old", b"new"] and merged.records == views[-1]


def test_truncated_message_is_refused() -> None:
    body = pb.PbProduceLogReqForBucket(bucket_id=1, records=b"x" * 50).SerializeToString()
    with pytest.raises((ValueError, IndexError)):
        list(length_delimited(memoryview(body[:-10]), 3))
