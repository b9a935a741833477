from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterTabletServerRequest(_message.Message):
    __slots__ = ("server_id", "host", "port", "rack", "incarnation", "listeners", "unclean_shutdown")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    UNCLEAN_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    host: str
    port: int
    rack: str
    incarnation: int
    listeners: str
    unclean_shutdown: bool
    def __init__(self, server_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., incarnation: _Optional[int] = ..., listeners: _Optional[str] = ..., unclean_shutdown: bool = ...) -> None: ...

class RegisterTabletServerResponse(_message.Message):
    __slots__ = ("coordinator_epoch", "session_id", "session_timeout_ms")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    session_id: int
    session_timeout_ms: int
    def __init__(self, coordinator_epoch: _Optional[int] = ..., session_id: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ...) -> None: ...

class TabletServerHeartbeatRequest(_message.Message):
    __slots__ = ("server_id", "session_id")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    session_id: int
    def __init__(self, server_id: _Optional[int] = ..., session_id: _Optional[int] = ...) -> None: ...

class TabletServerHeartbeatResponse(_message.Message):
    __slots__ = ("session_valid", "coordinator_epoch")
    SESSION_VALID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    session_valid: bool
    coordinator_epoch: int
    def __init__(self, session_valid: bool = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class OffsetForLeaderEpochRequest(_message.Message):
    __slots__ = ("follower_server_id", "buckets")
    FOLLOWER_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    follower_server_id: int
    buckets: _containers.RepeatedCompositeFieldContainer[PbOffsetForLeaderEpochReqForBucket]
    def __init__(self, follower_server_id: _Optional[int] = ..., buckets: _Optional[_Iterable[_Union[PbOffsetForLeaderEpochReqForBucket, _Mapping]]] = ...) -> None: ...

class PbOffsetForLeaderEpochReqForBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "current_leader_epoch", "leader_epoch")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    current_leader_epoch: int
    leader_epoch: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class OffsetForLeaderEpochResponse(_message.Message):
    __slots__ = ("buckets",)
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[PbOffsetForLeaderEpochRespForBucket]
    def __init__(self, buckets: _Optional[_Iterable[_Union[PbOffsetForLeaderEpochRespForBucket, _Mapping]]] = ...) -> None: ...

class PbOffsetForLeaderEpochRespForBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "error_code", "error_message", "leader_epoch", "end_offset", "epoch_entries")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    leader_epoch: int
    end_offset: int
    epoch_entries: _containers.RepeatedCompositeFieldContainer[PbLeaderEpochEntry]
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_epoch: _Optional[int] = ..., end_offset: _Optional[int] = ..., epoch_entries: _Optional[_Iterable[_Union[PbLeaderEpochEntry, _Mapping]]] = ...) -> None: ...

class PbLeaderEpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("coordinator_epoch", "tablet_servers", "tables", "buckets", "lakes", "tiering", "server_tags", "tiering_jobs")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TABLET_SERVERS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    LAKES_FIELD_NUMBER: _ClassVar[int]
    TIERING_FIELD_NUMBER: _ClassVar[int]
    SERVER_TAGS_FIELD_NUMBER: _ClassVar[int]
    TIERING_JOBS_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    tablet_servers: _containers.RepeatedCompositeFieldContainer[StatusServer]
    tables: _containers.RepeatedCompositeFieldContainer[StatusTable]
    buckets: _containers.RepeatedCompositeFieldContainer[StatusBucket]
    lakes: _containers.RepeatedCompositeFieldContainer[StatusLake]
    tiering: _containers.RepeatedCompositeFieldContainer[StatusTiering]
    server_tags: _containers.RepeatedCompositeFieldContainer[StatusServerTag]
    tiering_jobs: _containers.RepeatedCompositeFieldContainer[StatusTieringJob]
    def __init__(self, coordinator_epoch: _Optional[int] = ..., tablet_servers: _Optional[_Iterable[_Union[StatusServer, _Mapping]]] = ..., tables: _Optional[_Iterable[_Union[StatusTable, _Mapping]]] = ..., buckets: _Optional[_Iterable[_Union[StatusBucket, _Mapping]]] = ..., lakes: _Optional[_Iterable[_Union[StatusLake, _Mapping]]] = ..., tiering: _Optional[_Iterable[_Union[StatusTiering, _Mapping]]] = ..., server_tags: _Optional[_Iterable[_Union[StatusServerTag, _Mapping]]] = ..., tiering_jobs: _Optional[_Iterable[_Union[StatusTieringJob, _Mapping]]] = ...) -> None: ...

class StatusServer(_message.Message):
    __slots__ = ("server_id", "host", "port", "rack", "remembered")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    REMEMBERED_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    host: str
    port: int
    rack: str
    remembered: bool
    def __init__(self, server_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., remembered: bool = ...) -> None: ...

class StatusServerTag(_message.Message):
    __slots__ = ("server_id", "tag")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    tag: int
    def __init__(self, server_id: _Optional[int] = ..., tag: _Optional[int] = ...) -> None: ...

class StatusTable(_message.Message):
    __slots__ = ("table_id", "database", "name", "primary_key", "lake_enabled", "bucket_count", "rescale")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    LAKE_ENABLED_FIELD_NUMBER: _ClassVar[int]
    BUCKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESCALE_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    database: str
    name: str
    primary_key: bool
    lake_enabled: bool
    bucket_count: int
    rescale: str
    def __init__(self, table_id: _Optional[int] = ..., database: _Optional[str] = ..., name: _Optional[str] = ..., primary_key: bool = ..., lake_enabled: bool = ..., bucket_count: _Optional[int] = ..., rescale: _Optional[str] = ...) -> None: ...

class StatusBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "partition_name", "bucket_id", "replicas", "leader", "leader_epoch", "isr", "bucket_epoch", "kv_snapshot_id", "elr")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    BUCKET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    KV_SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    ELR_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    partition_name: str
    bucket_id: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    bucket_epoch: int
    kv_snapshot_id: int
    elr: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., partition_name: _Optional[str] = ..., bucket_id: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., bucket_epoch: _Optional[int] = ..., kv_snapshot_id: _Optional[int] = ..., elr: _Optional[_Iterable[int]] = ...) -> None: ...

class StatusLake(_message.Message):
    __slots__ = ("table_id", "snapshot_id", "committed_time", "offsets")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_TIME_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    snapshot_id: int
    committed_time: int
    offsets: _containers.RepeatedCompositeFieldContainer[StatusOffset]
    def __init__(self, table_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ..., committed_time: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[StatusOffset, _Mapping]]] = ...) -> None: ...

class StatusOffset(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "offset", "lake_ahead_log_end")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAKE_AHEAD_LOG_END_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    offset: int
    lake_ahead_log_end: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., offset: _Optional[int] = ..., lake_ahead_log_end: _Optional[int] = ...) -> None: ...

class StatusTiering(_message.Message):
    __slots__ = ("table_id", "state", "tiering_epoch", "heartbeat_age_ms", "job", "last_heartbeat_ms")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIERING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    state: str
    tiering_epoch: int
    heartbeat_age_ms: int
    job: StatusTieringJob
    last_heartbeat_ms: int
    def __init__(self, table_id: _Optional[int] = ..., state: _Optional[str] = ..., tiering_epoch: _Optional[int] = ..., heartbeat_age_ms: _Optional[int] = ..., job: _Optional[_Union[StatusTieringJob, _Mapping]] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class StatusTieringJob(_message.Message):
    __slots__ = ("name", "application_id", "address", "principal", "last_seen_age_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    application_id: str
    address: str
    principal: str
    last_seen_age_ms: int
    def __init__(self, name: _Optional[str] = ..., application_id: _Optional[str] = ..., address: _Optional[str] = ..., principal: _Optional[str] = ..., last_seen_age_ms: _Optional[int] = ...) -> None: ...

class DescribeReplicasRequest(_message.Message):
    __slots__ = ("on_disk",)
    ON_DISK_FIELD_NUMBER: _ClassVar[int]
    on_disk: _containers.RepeatedCompositeFieldContainer[PbBucketOnDisk]
    def __init__(self, on_disk: _Optional[_Iterable[_Union[PbBucketOnDisk, _Mapping]]] = ...) -> None: ...

class PbBucketOnDisk(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ...) -> None: ...

class DescribeReplicasResponse(_message.Message):
    __slots__ = ("server_id", "replicas", "data_dirs")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    DATA_DIRS_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[StatusReplica]
    data_dirs: _containers.RepeatedCompositeFieldContainer[StatusDataDir]
    def __init__(self, server_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[StatusReplica, _Mapping]]] = ..., data_dirs: _Optional[_Iterable[_Union[StatusDataDir, _Mapping]]] = ...) -> None: ...

class StatusDataDir(_message.Message):
    __slots__ = ("path", "replicas", "usage_ratio", "write_locked", "offline_reason", "free_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    USAGE_RATIO_FIELD_NUMBER: _ClassVar[int]
    WRITE_LOCKED_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REASON_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    replicas: int
    usage_ratio: float
    write_locked: bool
    offline_reason: str
    free_bytes: int
    def __init__(self, path: _Optional[str] = ..., replicas: _Optional[int] = ..., usage_ratio: _Optional[float] = ..., write_locked: bool = ..., offline_reason: _Optional[str] = ..., free_bytes: _Optional[int] = ...) -> None: ...

class StatusReplica(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "leader", "log_start_offset", "log_end_offset", "high_watermark", "followers", "lake_log_end_offset", "held_local_segments", "held_local_bytes", "held_remote_segments", "held_remote_bytes", "latest_leader_epoch")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    LAKE_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HELD_LOCAL_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    HELD_LOCAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    HELD_REMOTE_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    HELD_REMOTE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LATEST_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    leader: bool
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    followers: _containers.RepeatedCompositeFieldContainer[StatusFollower]
    lake_log_end_offset: int
    held_local_segments: int
    held_local_bytes: int
    held_remote_segments: int
    held_remote_bytes: int
    latest_leader_epoch: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., leader: bool = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., followers: _Optional[_Iterable[_Union[StatusFollower, _Mapping]]] = ..., lake_log_end_offset: _Optional[int] = ..., held_local_segments: _Optional[int] = ..., held_local_bytes: _Optional[int] = ..., held_remote_segments: _Optional[int] = ..., held_remote_bytes: _Optional[int] = ..., latest_leader_epoch: _Optional[int] = ...) -> None: ...

class StatusFollower(_message.Message):
    __slots__ = ("server_id", "log_end_offset")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    log_end_offset: int
    def __init__(self, server_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class AllocateAutoIncrementIdsRequest(_message.Message):
    __slots__ = ("table_id", "column_id", "count")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    COLUMN_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    column_id: int
    count: int
    def __init__(self, table_id: _Optional[int] = ..., column_id: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class AllocateAutoIncrementIdsResponse(_message.Message):
    __slots__ = ("start",)
    START_FIELD_NUMBER: _ClassVar[int]
    start: int
    def __init__(self, start: _Optional[int] = ...) -> None: ...

class ReportOfflineReplicasRequest(_message.Message):
    __slots__ = ("server_id", "replicas", "reason")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    replicas: _containers.RepeatedCompositeFieldContainer[PbOfflineReplica]
    reason: str
    def __init__(self, server_id: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[PbOfflineReplica, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class PbOfflineReplica(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ...) -> None: ...

class ReportOfflineReplicasResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RescaleBucketRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "bucket_count", "action", "records")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    bucket_count: int
    action: int
    records: bytes
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., bucket_count: _Optional[int] = ..., action: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class RescaleBucketResponse(_message.Message):
    __slots__ = ("log_end_offset", "records", "record_count")
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    log_end_offset: int
    records: bytes
    record_count: int
    def __init__(self, log_end_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., record_count: _Optional[int] = ...) -> None: ...
