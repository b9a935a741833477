"""FetchLog answers encoded around their record bytes parse exactly like the protobuf message with the
records set in it (by protobuf itself; pyfluss's prost parses the same wire format)."""

from __future__ import annotations

import os

from strom.rpc.encoded import EncodedResponse, field_header, varint
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.tablet.fetch_response import encode_fetch_response


def test_spliced_records_parse_like_a_serialized_message() -> None:
    plain = pb.FetchLogResponse()
    records: dict[tuple[int, int], bytes] = {}
    sizes = [0, 7, 4095, 4096, 70_000, 1 << 20]
    for t in range(3):
        table = plain.tables_resp.add(table_id=100 + t)
        for b, size in enumerate(sizes):
            bucket = table.buckets_resp.add(bucket_id=b, high_watermark=size, log_start_offset=1)
            if t == 1:
                bucket.partition_id = 9
            if b == 1 and t == 2:
                bucket.error_code = 6
                bucket.error_message = "not the leader"
                continue
            if size:
                records[(t, b)] = os.urandom(size)
    expected = pb.FetchLogResponse()
    expected.CopyFrom(plain)
    for (t, b), data in records.items():
        expected.tables_resp[t].buckets_resp[b].records = data

    encoded = encode_fetch_response(plain, records)
    wire = encoded.to_bytes()
    assert encoded.size == len(wire) == expected.ByteSize()
    parsed = pb.FetchLogResponse()
    parsed.ParseFromString(wire)
    assert parsed == expected
    # the large record buffers are passed on as they are, not copied
    assert any(chunk is records[(0, 5)] for chunk in encoded.chunks)


def test_an_empty_answer_and_the_varint_edges() -> None:
    assert encode_fetch_response(pb.FetchLogResponse(), {}).size == 0
    for value in (0, 1, 127, 128, 16_383, 16_384, (1 << 31) - 1):
        message = pb.PbFetchLogRespForBucket(bucket_id=0, records=b"x" * (value % 300))
        assert varint(value)[-1] < 0x80 and all(b >= 0x80 for b in varint(value)[:-1])
        header = field_header(8, len(message.records))
        assert message.SerializeToString().endswith(header + message.records)
    piece = EncodedResponse()
    piece.add(b"")
    assert piece.chunks == [] and piece.size == 0
