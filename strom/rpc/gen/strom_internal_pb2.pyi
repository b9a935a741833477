from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterTabletServerRequest(_message.Message):
    __slots__ = ("server_id", "host", "port", "rack", "listeners")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    server_id: int
    host: str
    port: int
    rack: str
    listeners: str
    def __init__(self, server_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., listeners: _Optional[str] = ...) -> None: ...

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
