"""Wire checks for the Fluss protobuf messages against bytes observed from pyfluss 1.0.0.

Expected bytes are written out literally (reference/fluss-protocol.md §1, §3) so that a renumbered
or retyped field fails here rather than against a real client.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal_pb

ROOT = Path(__file__).resolve().parents[2]

# -1 as an int32 varint: sign-extended to 64 bits, so ten bytes.
MINUS_ONE_VARINT = bytes.fromhex("ffffffffffffffffff01")


def field_numbers(descriptor: Descriptor) -> dict[str, int]:
    return {field.name: field.number for field in descriptor.fields}


# ----------------------------------------------------------------------------------------------
# Byte-exact bodies observed on the wire
# ----------------------------------------------------------------------------------------------


def test_api_versions_request_matches_observed_handshake() -> None:
    expected = b"\x0a\x0a" + b"fluss-rust" + b"\x12\x05" + b"1.0.0"
    msg = pb.ApiVersionsRequest(client_software_name="fluss-rust", client_software_version="1.0.0")
    assert msg.SerializeToString() == expected
    # The observed frame says 27 = 8 header bytes + this body.
    assert 8 + len(expected) == 27
    parsed = pb.ApiVersionsRequest.FromString(expected)
    assert (parsed.client_software_name, parsed.client_software_version) == ("fluss-rust", "1.0.0")


def test_create_database_request_matches_observed_body() -> None:
    expected = b"\x0a\x03db1\x10\x01"
    msg = pb.CreateDatabaseRequest(database_name="db1", ignore_if_exists=True)
    assert msg.SerializeToString() == expected
    parsed = pb.CreateDatabaseRequest.FromString(expected)
    assert parsed.ignore_if_exists is True
    assert not parsed.HasField("database_json")


def test_sasl_plain_authenticate_request_matches_observed_body() -> None:
    token = b"\x00alice\x00pw"
    expected = b"\x0a\x05PLAIN" + b"\x12\x09" + token
    assert pb.AuthenticateRequest(protocol="PLAIN", token=token).SerializeToString() == expected
    assert pb.AuthenticateRequest.FromString(expected).token == token


def test_empty_metadata_request_is_an_empty_body() -> None:
    assert pb.MetadataRequest().SerializeToString() == b""
    assert pb.ListDatabasesRequest().SerializeToString() == b""
    assert pb.GetFileSystemSecurityTokenRequest().SerializeToString() == b""


def test_produce_log_request_with_acks_all() -> None:
    records = b"\x01\x02\x03"
    msg = pb.ProduceLogRequest(acks=-1, table_id=5, timeout_ms=30000)
    msg.buckets_req.add(bucket_id=2, records=records)
    bucket = b"\x10\x02" + b"\x1a\x03" + records
    expected = (
        b"\x08"
        + MINUS_ONE_VARINT  # acks = -1
        + b"\x10\x05"  # table_id = 5
        + b"\x18\xb0\xea\x01"  # timeout_ms = 30000
        + b"\x22"
        + bytes([len(bucket)])
        + bucket
    )
    assert msg.SerializeToString() == expected
    parsed = pb.ProduceLogRequest.FromString(expected)
    assert parsed.acks == -1
    assert parsed.timeout_ms == 30000
    assert not parsed.buckets_req[0].HasField("partition_id")
    assert parsed.buckets_req[0].records == records


def test_fetch_from_earliest_offset_is_negative_two() -> None:
    body = pb.PbFetchLogReqForBucket(
        bucket_id=0, fetch_offset=-2, max_fetch_bytes=1 << 20
    ).SerializeToString()
    assert body == b"\x10\x00" + b"\x18" + bytes.fromhex("feffffffffffffffff01") + b"\x20\x80\x80\x40"
    assert pb.PbFetchLogReqForBucket.FromString(body).fetch_offset == -2


def test_error_response_layout() -> None:
    body = b"\x08\x07" + b"\x12\x02no"
    parsed = pb.ErrorResponse.FromString(body)
    assert (parsed.error_code, parsed.error_message) == (7, "no")
    assert pb.ErrorResponse(error_code=7, error_message="no").SerializeToString() == body


# ----------------------------------------------------------------------------------------------
# Packed repeated int32: the client sends packed, a parser must accept both forms
# ----------------------------------------------------------------------------------------------

PACKED_CASES = [
    # (message class, repeated field, bytes of the other required fields)
    (pb.PbFetchLogReqForTable, "projected_fields", b"\x08\x01\x10\x01"),
    (pb.PutKvRequest, "target_columns", b"\x08\x01\x10\x01\x18\x01"),
    (pb.ListOffsetsRequest, "bucket_id", b"\x08" + MINUS_ONE_VARINT + b"\x10\x01\x18\x01"),
    (pb.PbBucketMetadata, "replica_id", b"\x08\x00"),
]


@pytest.mark.parametrize(("message_cls", "field_name", "prefix"), PACKED_CASES)
def test_packed_and_unpacked_repeated_int32_both_parse(
    message_cls: type[Message], field_name: str, prefix: bytes
) -> None:
    number = message_cls.DESCRIPTOR.fields_by_name[field_name].number
    values = [0, 3, 200]
    payload = b"\x00\x03\xc8\x01"
    packed = prefix + bytes([(number << 3) | 2, len(payload)]) + payload
    unpacked = prefix + b"".join(bytes([(number << 3) | 0]) + v for v in (b"\x00", b"\x03", b"\xc8\x01"))
    assert list(getattr(message_cls.FromString(packed), field_name)) == values
    assert list(getattr(message_cls.FromString(unpacked), field_name)) == values
    # We write the packed form, like the Rust client and Java.
    assert message_cls.FromString(unpacked).SerializeToString() == packed


def test_packed_int64_partitions_id_in_metadata_request() -> None:
    msg = pb.MetadataRequest(partitions_id=[1, 300])
    assert msg.SerializeToString() == b"\x1a\x03\x01\xac\x02"
    assert list(pb.MetadataRequest.FromString(b"\x18\x01\x18\xac\x02").partitions_id) == [1, 300]


def test_packed_options_match_fluss() -> None:
    packed = {
        (message.name, field.name)
        for message in pb.DESCRIPTOR.message_types_by_name.values()
        for field in message.fields
        if field.is_packed
    }
    assert packed == {
        ("MetadataRequest", "partitions_id"),
        ("PbBucketMetadata", "replica_id"),
        ("PbFetchLogReqForTable", "projected_fields"),
        ("PutKvRequest", "target_columns"),
        ("ListOffsetsRequest", "bucket_id"),
        ("PbNotifyLeaderAndIsrReqForBucket", "replicas"),
        ("PbNotifyLeaderAndIsrReqForBucket", "isr"),
        ("PbNotifyLeaderAndIsrReqForBucket", "standby_replicas"),
        ("PbAdjustIsrReqForBucket", "new_isr"),
        ("PbAdjustIsrReqForBucket", "standby_replicas"),
        ("PbAdjustIsrRespForBucket", "isr"),
        ("PbAdjustIsrRespForBucket", "standby_replicas"),
        ("AddServerTagRequest", "server_ids"),
        ("RemoveServerTagRequest", "server_ids"),
        ("RebalanceRequest", "goals"),
        ("PbRebalancePlanForBucket", "original_replicas"),
        ("PbRebalancePlanForBucket", "new_replicas"),
        ("GetTableStatsRequest", "target_columns"),
    }


# ----------------------------------------------------------------------------------------------
# Field-number spot checks for what the client reads
# ----------------------------------------------------------------------------------------------


def test_table_metadata_numbers() -> None:
    assert field_numbers(pb.PbTableMetadata.DESCRIPTOR) == {
        "table_path": 1,
        "table_id": 2,
        "schema_id": 3,
        "table_json": 4,
        "bucket_metadata": 5,
        "created_time": 6,
        "modified_time": 7,
        "remote_data_dir": 8,
    }
    fields = pb.PbTableMetadata.DESCRIPTOR.fields_by_name
    assert fields["table_json"].type == FieldDescriptor.TYPE_BYTES
    assert len(pb.PbTableMetadata(bucket_metadata=[{"bucket_id": 0}, {"bucket_id": 1}]).bucket_metadata) == 2


def test_bucket_metadata_numbers() -> None:
    assert field_numbers(pb.PbBucketMetadata.DESCRIPTOR) == {
        "bucket_id": 1,
        "leader_id": 2,
        "replica_id": 3,
        "leader_epoch": 4,
    }
    # bucket 0 led by server 1 with replicas [1]: what a one-node server sends.
    body = pb.PbBucketMetadata(bucket_id=0, leader_id=1, replica_id=[1]).SerializeToString()
    assert body == b"\x08\x00\x10\x01\x1a\x01\x01"


def test_server_node_and_metadata_response_numbers() -> None:
    assert field_numbers(pb.PbServerNode.DESCRIPTOR) == {
        "node_id": 1,
        "host": 2,
        "port": 3,
        "listeners": 4,
        "rack": 5,
    }
    assert field_numbers(pb.MetadataResponse.DESCRIPTOR) == {
        "coordinator_server": 1,
        "tablet_servers": 2,
        "table_metadata": 3,
        "partition_metadata": 4,
    }
    assert field_numbers(pb.UpdateMetadataRequest.DESCRIPTOR)["coordinator_epoch"] == 5


def test_fetch_log_bucket_response_numbers() -> None:
    numbers = field_numbers(pb.PbFetchLogRespForBucket.DESCRIPTOR)
    assert numbers == {
        "partition_id": 1,
        "bucket_id": 2,
        "error_code": 3,
        "error_message": 4,
        "high_watermark": 5,
        "log_start_offset": 6,
        "remote_log_fetch_info": 7,
        "records": 8,
        "filtered_end_offset": 9,
    }
    body = pb.PbFetchLogRespForBucket(bucket_id=0, high_watermark=3, records=b"ab").SerializeToString()
    assert body == b"\x10\x00\x28\x03\x42\x02ab"


def test_remote_log_fetch_info_numbers() -> None:
    assert field_numbers(pb.PbRemoteLogFetchInfo.DESCRIPTOR) == {
        "remote_log_tablet_dir": 1,
        "partition_name": 2,
        "remote_log_segments": 3,
        "first_start_pos": 4,
    }
    assert field_numbers(pb.PbRemoteLogSegment.DESCRIPTOR) == {
        "remote_log_segment_id": 1,
        "remote_log_start_offset": 2,
        "remote_log_end_offset": 3,
        "segment_size_in_bytes": 4,
        "max_timestamp": 5,
    }


def test_get_database_info_response_numbers_start_at_three() -> None:
    assert field_numbers(pb.GetDatabaseInfoResponse.DESCRIPTOR) == {
        "database_json": 3,
        "created_time": 4,
        "modified_time": 5,
    }
    body = pb.GetDatabaseInfoResponse(
        database_json=b"{}", created_time=1, modified_time=2
    ).SerializeToString()
    assert body == b"\x1a\x02{}\x20\x01\x28\x02"


def test_limit_scan_request_numbers_start_at_two() -> None:
    assert field_numbers(pb.LimitScanRequest.DESCRIPTOR) == {
        "table_id": 2,
        "partition_id": 3,
        "bucket_id": 4,
        "limit": 5,
    }
    body = pb.LimitScanRequest(table_id=1, bucket_id=0, limit=10).SerializeToString()
    assert body == b"\x10\x01\x20\x00\x28\x0a"


def test_lookup_and_put_kv_bucket_numbers() -> None:
    assert field_numbers(pb.PbLookupRespForBucket.DESCRIPTOR)["values"] == 5
    assert field_numbers(pb.PbPrefixLookupRespForBucket.DESCRIPTOR)["value_lists"] == 5
    assert field_numbers(pb.PbPutKvRespForBucket.DESCRIPTOR) == {
        "partition_id": 1,
        "bucket_id": 2,
        "error_code": 3,
        "error_message": 4,
        "log_end_offset": 5,
        "pressure": 6,
    }
    # An absent PbValue.values means "key not found", so presence must be tracked.
    assert not pb.PbValue().HasField("values")
    assert pb.PbValue(values=b"").HasField("values")


def test_camel_case_field_names_are_kept() -> None:
    # Fluss spells these in camelCase; the names matter for JSON/text formats and for our handlers.
    assert "snapshotId" in pb.GetLakeSnapshotResponse.DESCRIPTOR.fields_by_name
    assert "startTimestamp" in pb.ListOffsetsRequest.DESCRIPTOR.fields_by_name
    assert "serverId" in pb.AdjustIsrRequest.DESCRIPTOR.fields_by_name
    assert "commitSuccess" in pb.CommitRemoteLogManifestResponse.DESCRIPTOR.fields_by_name
    assert "deleteRemote" in pb.PbStopReplicaReqForBucket.DESCRIPTOR.fields_by_name


def test_strom_internal_messages() -> None:
    assert field_numbers(internal_pb.RegisterTabletServerRequest.DESCRIPTOR) == {
        "server_id": 1,
        "host": 2,
        "port": 3,
        "rack": 4,
        "incarnation": 5,
        "listeners": 6,
        "unclean_shutdown": 7,
    }
    assert field_numbers(internal_pb.RegisterTabletServerResponse.DESCRIPTOR) == {
        "coordinator_epoch": 1,
        "session_id": 2,
        "session_timeout_ms": 3,
    }
    assert field_numbers(internal_pb.TabletServerHeartbeatRequest.DESCRIPTOR) == {
        "server_id": 1,
        "session_id": 2,
    }
    reply = internal_pb.TabletServerHeartbeatResponse(session_valid=True)
    assert reply.SerializeToString() == b"\x08\x01"
    assert field_numbers(internal_pb.PbOffsetForLeaderEpochReqForBucket.DESCRIPTOR) == {
        "table_id": 1,
        "partition_id": 2,
        "bucket_id": 3,
        "current_leader_epoch": 4,
        "leader_epoch": 5,
    }
    assert field_numbers(internal_pb.PbOffsetForLeaderEpochRespForBucket.DESCRIPTOR)["epoch_entries"] == 8
    assert internal_pb.DESCRIPTOR.package == "strom.internal"


# ----------------------------------------------------------------------------------------------
# The checked-in generated code must match the .proto sources
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proto_name", "module"), [("fluss_api.proto", pb), ("strom_internal.proto", internal_pb)]
)
def test_generated_code_is_up_to_date(proto_name: str, module: object) -> None:
    proto_dir = ROOT / "strom" / "rpc" / "proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--proto_path={proto_dir}",
                f"--descriptor_set_out={out}",
                str(proto_dir / proto_name),
            ],
            check=True,
        )
        compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    # python_out embeds descriptors without the derived json_name; drop it before comparing.
    for message in compiled.message_type:
        for field in message.field:
            field.ClearField("json_name")
    generated = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)  # type: ignore[attr-defined]
    assert generated == compiled, f"{proto_name} changed: run scripts/gen_proto.py"
