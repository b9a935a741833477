"""The Fluss API keys, their versions and their protobuf message pairs.

The numbers and version ranges are Fluss's (`ApiKeys`); the official client refuses any API a server
does not advertise, so each server advertises exactly the keys it has handlers for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cache

from google.protobuf.message import Message


class ApiKey(enum.IntEnum):
    API_VERSIONS = 1000
    CREATE_DATABASE = 1001
    DROP_DATABASE = 1002
    LIST_DATABASES = 1003
    DATABASE_EXISTS = 1004
    CREATE_TABLE = 1005
    DROP_TABLE = 1006
    GET_TABLE_INFO = 1007
    LIST_TABLES = 1008
    LIST_PARTITION_INFOS = 1009
    TABLE_EXISTS = 1010
    GET_TABLE_SCHEMA = 1011
    GET_METADATA = 1012
    UPDATE_METADATA = 1013
    PRODUCE_LOG = 1014
    FETCH_LOG = 1015
    PUT_KV = 1016
    LOOKUP = 1017
    NOTIFY_LEADER_AND_ISR = 1018
    STOP_REPLICA = 1019
    ADJUST_ISR = 1020
    LIST_OFFSETS = 1021
    COMMIT_KV_SNAPSHOT = 1022
    GET_LATEST_KV_SNAPSHOTS = 1023
    GET_KV_SNAPSHOT_METADATA = 1024
    GET_FILESYSTEM_SECURITY_TOKEN = 1025
    INIT_WRITER = 1026
    COMMIT_REMOTE_LOG_MANIFEST = 1027
    NOTIFY_REMOTE_LOG_OFFSETS = 1028
    NOTIFY_KV_SNAPSHOT_OFFSET = 1029
    COMMIT_LAKE_TABLE_SNAPSHOT = 1030
    NOTIFY_LAKE_TABLE_OFFSET = 1031
    GET_LAKE_SNAPSHOT = 1032
    LIMIT_SCAN = 1033
    PREFIX_LOOKUP = 1034
    GET_DATABASE_INFO = 1035
    CREATE_PARTITION = 1036
    DROP_PARTITION = 1037
    AUTHENTICATE = 1038
    CREATE_ACLS = 1039
    LIST_ACLS = 1040
    DROP_ACLS = 1041
    LAKE_TIERING_HEARTBEAT = 1042
    CONTROLLED_SHUTDOWN = 1043
    ALTER_TABLE = 1044
    DESCRIBE_CLUSTER_CONFIGS = 1045
    ALTER_CLUSTER_CONFIGS = 1046
    ADD_SERVER_TAG = 1047
    REMOVE_SERVER_TAG = 1048
    REBALANCE = 1049
    LIST_REBALANCE_PROGRESS = 1050
    CANCEL_REBALANCE = 1051
    PREPARE_LAKE_TABLE_SNAPSHOT = 1052
    REGISTER_PRODUCER_OFFSETS = 1053
    GET_PRODUCER_OFFSETS = 1054
    DELETE_PRODUCER_OFFSETS = 1055
    ACQUIRE_KV_SNAPSHOT_LEASE = 1056
    RELEASE_KV_SNAPSHOT_LEASE = 1057
    DROP_KV_SNAPSHOT_LEASE = 1058
    GET_TABLE_STATS = 1059
    ALTER_DATABASE = 1060
    SCAN_KV = 1061
    GET_CLUSTER_HEALTH = 1062
    LIST_REMOTE_LOG_MANIFESTS = 1063
    LIST_KV_SNAPSHOTS = 1064
    # Strom-only: tablet-server membership, which Fluss keeps in ZooKeeper ephemeral nodes.
    # Numbered far from Fluss's range so they can never collide with a future Fluss key.
    REGISTER_TABLET_SERVER = 9001
    TABLET_SERVER_HEARTBEAT = 9002
    # Strom-only: KIP-101 truncation by leader epoch (Fluss followers truncate to their high watermark).
    OFFSET_FOR_LEADER_EPOCH = 9003
    # Strom-only: what `strom status` shows (Fluss keeps it in ZooKeeper or in memory).
    DESCRIBE_CLUSTER = 9004
    DESCRIBE_REPLICAS = 9005
    # Strom-only: a tablet server reports the replicas of a failed data directory.
    REPORT_OFFLINE_REPLICAS = 9006
    # Strom-only: auto-increment id ranges (Fluss's tablet servers use a ZooKeeper counter).
    ALLOCATE_AUTO_INCREMENT_IDS = 9010
    # Strom-only: the steps of an online bucket rescale (Fluss cannot change a table's bucket count).
    RESCALE_BUCKET = 9011


# Version ranges that differ from 0..0 (Fluss `ApiKeys`; the Rust client has the same ranges).
_VERSION_RANGES: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PUT_KV: (0, 2),
    ApiKey.LOOKUP: (0, 1),
    ApiKey.PREFIX_LOOKUP: (0, 1),
}

# Message names differ from the key name in a few places.
_MESSAGE_STEMS: dict[ApiKey, str] = {
    ApiKey.GET_METADATA: "Metadata",
    ApiKey.GET_FILESYSTEM_SECURITY_TOKEN: "GetFileSystemSecurityToken",
}

_INTERNAL_KEYS = {
    ApiKey.REGISTER_TABLET_SERVER,
    ApiKey.TABLET_SERVER_HEARTBEAT,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.DESCRIBE_REPLICAS,
    ApiKey.REPORT_OFFLINE_REPLICAS,
    ApiKey.ALLOCATE_AUTO_INCREMENT_IDS,
    ApiKey.RESCALE_BUCKET,
}


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: ApiKey
    min_version: int
    max_version: int
    request_type: type[Message]
    response_type: type[Message]


def _stem(key: ApiKey) -> str:
    return _MESSAGE_STEMS.get(key) or "".join(part.capitalize() for part in key.name.split("_"))


@cache
def api_spec(key: int) -> ApiSpec:
    """The spec of an API key; raises KeyError for keys Strom does not know."""
    api_key = ApiKey(key)
    from strom.rpc.gen import fluss_api_pb2, strom_internal_pb2

    module = strom_internal_pb2 if api_key in _INTERNAL_KEYS else fluss_api_pb2
    stem = _stem(api_key)
    low, high = _VERSION_RANGES.get(api_key, (0, 0))
    return ApiSpec(api_key, low, high, getattr(module, f"{stem}Request"), getattr(module, f"{stem}Response"))


class ServerType(enum.IntEnum):
    """`ApiVersionsResponse.server_type`: the client checks it against the role it expects."""

    COORDINATOR = 1
    TABLET_SERVER = 2
