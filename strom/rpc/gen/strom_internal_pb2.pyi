from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterTabletServerRequest(_message.Message):
    __slots__ = ("server_id", "host", "port", "rack", "incarnation", "listeners")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    host: str
    port: int
    rack: str
    incarnation: int
    listeners: str
    def __init__(self, server_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., incarnation: _Optional[int] = ..., listeners: _Optional[str] = ...) -> None: ...

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
