"""Views of length-delimited protobuf fields agree with what protobuf itself parses."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError

from strom.rpc.api import ApiKey, api_spec
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.request_parse import parse_request
from strom.rpc.wire_fields import length_delimited, without_contents


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


def _produce_request() -> pb.ProduceLogRequest:
    request = pb.ProduceLogRequest(acks=-1, table_id=1 << 40, timeout_ms=30_000)
    request.buckets_req.add(bucket_id=0, records=b"a" * 300)
    request.buckets_req.add(bucket_id=7, partition_id=-3, records=bytes(range(256)) * 1000)
    request.buckets_req.add(bucket_id=2, records=b"")
    return request


def test_the_lean_parse_equals_protobufs_without_the_records() -> None:
    """ProduceLog is parsed without its records (the handler reads them as views): everything else,
    including the presence of the required records field, is what protobuf parses from the body."""
    request = _produce_request()
    body = request.SerializeToString()
    lean = parse_request(api_spec(ApiKey.PRODUCE_LOG), body)
    for entry in request.buckets_req:
        entry.records = b""
    assert lean == request
    assert len(without_contents(memoryview(body), (4, 3))) < 100  # the records were not copied


def test_the_lean_parse_keeps_repeated_and_unknown_fields() -> None:
    first = pb.PbProduceLogReqForBucket(bucket_id=1, records=b"old").SerializeToString()
    second = pb.PbProduceLogReqForBucket(bucket_id=1, records=b"new").SerializeToString()
    unknown = bytes([0x78, 0x05])  # field 15, varint 5
    inner = first + second + unknown
    body = pb.ProduceLogRequest(acks=1, table_id=3, timeout_ms=5).SerializeToString()
    body += bytes([0x22, len(inner)]) + inner  # field 4, length-delimited
    full = pb.ProduceLogRequest.FromString(body)
    lean = parse_request(api_spec(ApiKey.PRODUCE_LOG), body)
    full.buckets_req[0].records = b""
    assert lean == full


@pytest.mark.parametrize("cut", [1, 10, 200])
def test_a_malformed_body_gets_protobufs_error(cut: int) -> None:
    body = _produce_request().SerializeToString()[:-cut]
    with pytest.raises(DecodeError):
        pb.ProduceLogRequest.FromString(body)
    with pytest.raises(DecodeError):
        parse_request(api_spec(ApiKey.PRODUCE_LOG), body)


def test_a_missing_records_field_stays_missing() -> None:
    body = pb.ProduceLogRequest(acks=1, table_id=3, timeout_ms=5).SerializeToString()
    inner = pb.PbProduceLogReqForBucket(bucket_id=1).SerializePartialToString()
    body += bytes([0x22, len(inner)]) + inner
    lean = parse_request(api_spec(ApiKey.PRODUCE_LOG), body)
    assert lean == pb.ProduceLogRequest.FromString(body)
    assert not lean.buckets_req[0].HasField("records")
