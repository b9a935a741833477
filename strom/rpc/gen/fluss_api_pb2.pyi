from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class PbTablePath(_message.Message):
    __slots__ = ("database_name", "table_name")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    table_name: str
    def __init__(self, database_name: _Optional[str] = ..., table_name: _Optional[str] = ...) -> None: ...

class PbPhysicalTablePath(_message.Message):
    __slots__ = ("database_name", "table_name", "partition_name")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    table_name: str
    partition_name: str
    def __init__(self, database_name: _Optional[str] = ..., table_name: _Optional[str] = ..., partition_name: _Optional[str] = ...) -> None: ...

class PbTableBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ...) -> None: ...

class PbKeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class PbPartitionSpec(_message.Message):
    __slots__ = ("partition_key_values",)
    PARTITION_KEY_VALUES_FIELD_NUMBER: _ClassVar[int]
    partition_key_values: _containers.RepeatedCompositeFieldContainer[PbKeyValue]
    def __init__(self, partition_key_values: _Optional[_Iterable[_Union[PbKeyValue, _Mapping]]] = ...) -> None: ...

class PbServerNode(_message.Message):
    __slots__ = ("node_id", "host", "port", "listeners", "rack")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    host: str
    port: int
    listeners: str
    rack: str
    def __init__(self, node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., listeners: _Optional[str] = ..., rack: _Optional[str] = ...) -> None: ...

class ApiVersionsRequest(_message.Message):
    __slots__ = ("client_software_name", "client_software_version")
    CLIENT_SOFTWARE_NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_software_name: str
    client_software_version: str
    def __init__(self, client_software_name: _Optional[str] = ..., client_software_version: _Optional[str] = ...) -> None: ...

class ApiVersionsResponse(_message.Message):
    __slots__ = ("api_versions", "server_type")
    API_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TYPE_FIELD_NUMBER: _ClassVar[int]
    api_versions: _containers.RepeatedCompositeFieldContainer[PbApiVersion]
    server_type: int
    def __init__(self, api_versions: _Optional[_Iterable[_Union[PbApiVersion, _Mapping]]] = ..., server_type: _Optional[int] = ...) -> None: ...

class PbApiVersion(_message.Message):
    __slots__ = ("api_key", "min_version", "max_version")
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_VERSION_FIELD_NUMBER: _ClassVar[int]
    api_key: int
    min_version: int
    max_version: int
    def __init__(self, api_key: _Optional[int] = ..., min_version: _Optional[int] = ..., max_version: _Optional[int] = ...) -> None: ...

class AuthenticateRequest(_message.Message):
    __slots__ = ("protocol", "token")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    token: bytes
    def __init__(self, protocol: _Optional[str] = ..., token: _Optional[bytes] = ...) -> None: ...

class AuthenticateResponse(_message.Message):
    __slots__ = ("challenge",)
    CHALLENGE_FIELD_NUMBER: _ClassVar[int]
    challenge: bytes
    def __init__(self, challenge: _Optional[bytes] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: _containers.RepeatedCompositeFieldContainer[PbAclInfo]
    def __init__(self, acl: _Optional[_Iterable[_Union[PbAclInfo, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("aclRes",)
    ACLRES_FIELD_NUMBER: _ClassVar[int]
    aclRes: _containers.RepeatedCompositeFieldContainer[PbCreateAclRespInfo]
    def __init__(self, aclRes: _Optional[_Iterable[_Union[PbCreateAclRespInfo, _Mapping]]] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ("acl_filter",)
    ACL_FILTER_FIELD_NUMBER: _ClassVar[int]
    acl_filter: PbAclFilter
    def __init__(self, acl_filter: _Optional[_Union[PbAclFilter, _Mapping]] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: _containers.RepeatedCompositeFieldContainer[PbAclInfo]
    def __init__(self, acl: _Optional[_Iterable[_Union[PbAclInfo, _Mapping]]] = ...) -> None: ...

class DropAclsRequest(_message.Message):
    __slots__ = ("acl_filter",)
    ACL_FILTER_FIELD_NUMBER: _ClassVar[int]
    acl_filter: _containers.RepeatedCompositeFieldContainer[PbAclFilter]
    def __init__(self, acl_filter: _Optional[_Iterable[_Union[PbAclFilter, _Mapping]]] = ...) -> None: ...

class DropAclsResponse(_message.Message):
    __slots__ = ("filter_results",)
    FILTER_RESULTS_FIELD_NUMBER: _ClassVar[int]
    filter_results: _containers.RepeatedCompositeFieldContainer[PbDropAclsFilterResult]
    def __init__(self, filter_results: _Optional[_Iterable[_Union[PbDropAclsFilterResult, _Mapping]]] = ...) -> None: ...

class PbCreateAclRespInfo(_message.Message):
    __slots__ = ("acl", "error_code", "error_message")
    ACL_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    acl: PbAclInfo
    error_code: int
    error_message: str
    def __init__(self, acl: _Optional[_Union[PbAclInfo, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class PbAclInfo(_message.Message):
    __slots__ = ("resource_name", "resource_type", "principal_name", "principal_type", "host", "operation_type", "permission_type")
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_TYPE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_name: str
    resource_type: int
    principal_name: str
    principal_type: str
    host: str
    operation_type: int
    permission_type: int
    def __init__(self, resource_name: _Optional[str] = ..., resource_type: _Optional[int] = ..., principal_name: _Optional[str] = ..., principal_type: _Optional[str] = ..., host: _Optional[str] = ..., operation_type: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class PbAclFilter(_message.Message):
    __slots__ = ("resource_name", "resource_type", "principal_name", "principal_type", "host", "operation_type", "permission_type")
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_TYPE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_name: str
    resource_type: int
    principal_name: str
    principal_type: str
    host: str
    operation_type: int
    permission_type: int
    def __init__(self, resource_name: _Optional[str] = ..., resource_type: _Optional[int] = ..., principal_name: _Optional[str] = ..., principal_type: _Optional[str] = ..., host: _Optional[str] = ..., operation_type: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class AddServerTagRequest(_message.Message):
    __slots__ = ("server_ids", "server_tag")
    SERVER_IDS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TAG_FIELD_NUMBER: _ClassVar[int]
    server_ids: _containers.RepeatedScalarFieldContainer[int]
    server_tag: int
    def __init__(self, server_ids: _Optional[_Iterable[int]] = ..., server_tag: _Optional[int] = ...) -> None: ...

class AddServerTagResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveServerTagRequest(_message.Message):
    __slots__ = ("server_ids", "server_tag")
    SERVER_IDS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TAG_FIELD_NUMBER: _ClassVar[int]
    server_ids: _containers.RepeatedScalarFieldContainer[int]
    server_tag: int
    def __init__(self, server_ids: _Optional[_Iterable[int]] = ..., server_tag: _Optional[int] = ...) -> None: ...

class RemoveServerTagResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RebalanceRequest(_message.Message):
    __slots__ = ("goals",)
    GOALS_FIELD_NUMBER: _ClassVar[int]
    goals: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, goals: _Optional[_Iterable[int]] = ...) -> None: ...

class RebalanceResponse(_message.Message):
    __slots__ = ("rebalance_id",)
    REBALANCE_ID_FIELD_NUMBER: _ClassVar[int]
    rebalance_id: str
    def __init__(self, rebalance_id: _Optional[str] = ...) -> None: ...

class ListRebalanceProgressRequest(_message.Message):
    __slots__ = ("rebalance_id",)
    REBALANCE_ID_FIELD_NUMBER: _ClassVar[int]
    rebalance_id: str
    def __init__(self, rebalance_id: _Optional[str] = ...) -> None: ...

class ListRebalanceProgressResponse(_message.Message):
    __slots__ = ("rebalance_id", "rebalance_status", "table_progress")
    REBALANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    TABLE_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    rebalance_id: str
    rebalance_status: int
    table_progress: _containers.RepeatedCompositeFieldContainer[PbRebalanceProgressForTable]
    def __init__(self, rebalance_id: _Optional[str] = ..., rebalance_status: _Optional[int] = ..., table_progress: _Optional[_Iterable[_Union[PbRebalanceProgressForTable, _Mapping]]] = ...) -> None: ...

class CancelRebalanceRequest(_message.Message):
    __slots__ = ("rebalance_id",)
    REBALANCE_ID_FIELD_NUMBER: _ClassVar[int]
    rebalance_id: str
    def __init__(self, rebalance_id: _Optional[str] = ...) -> None: ...

class CancelRebalanceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbRebalanceProgressForTable(_message.Message):
    __slots__ = ("table_id", "buckets_progress")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_progress: _containers.RepeatedCompositeFieldContainer[PbRebalanceProgressForBucket]
    def __init__(self, table_id: _Optional[int] = ..., buckets_progress: _Optional[_Iterable[_Union[PbRebalanceProgressForBucket, _Mapping]]] = ...) -> None: ...

class PbRebalanceProgressForBucket(_message.Message):
    __slots__ = ("rebalance_plan", "rebalance_status")
    REBALANCE_PLAN_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    rebalance_plan: PbRebalancePlanForBucket
    rebalance_status: int
    def __init__(self, rebalance_plan: _Optional[_Union[PbRebalancePlanForBucket, _Mapping]] = ..., rebalance_status: _Optional[int] = ...) -> None: ...

class PbRebalancePlanForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "original_leader", "new_leader", "original_replicas", "new_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_LEADER_FIELD_NUMBER: _ClassVar[int]
    NEW_LEADER_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    NEW_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    original_leader: int
    new_leader: int
    original_replicas: _containers.RepeatedScalarFieldContainer[int]
    new_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., original_leader: _Optional[int] = ..., new_leader: _Optional[int] = ..., original_replicas: _Optional[_Iterable[int]] = ..., new_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class PbDropAclsFilterResult(_message.Message):
    __slots__ = ("matching_acls", "error_code", "error_message")
    MATCHING_ACLS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    matching_acls: _containers.RepeatedCompositeFieldContainer[PbDropAclsMatchingAcl]
    error_code: int
    error_message: str
    def __init__(self, matching_acls: _Optional[_Iterable[_Union[PbDropAclsMatchingAcl, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class PbDropAclsMatchingAcl(_message.Message):
    __slots__ = ("acl", "error_code", "error_message")
    ACL_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    acl: PbAclInfo
    error_code: int
    error_message: str
    def __init__(self, acl: _Optional[_Union[PbAclInfo, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreateDatabaseRequest(_message.Message):
    __slots__ = ("database_name", "ignore_if_exists", "database_json")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    DATABASE_JSON_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    ignore_if_exists: bool
    database_json: bytes
    def __init__(self, database_name: _Optional[str] = ..., ignore_if_exists: bool = ..., database_json: _Optional[bytes] = ...) -> None: ...

class CreateDatabaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropDatabaseRequest(_message.Message):
    __slots__ = ("database_name", "ignore_if_not_exists", "cascade")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CASCADE_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    ignore_if_not_exists: bool
    cascade: bool
    def __init__(self, database_name: _Optional[str] = ..., ignore_if_not_exists: bool = ..., cascade: bool = ...) -> None: ...

class DropDatabaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDatabasesRequest(_message.Message):
    __slots__ = ("include_summary",)
    INCLUDE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    include_summary: bool
    def __init__(self, include_summary: bool = ...) -> None: ...

class ListDatabasesResponse(_message.Message):
    __slots__ = ("database_name", "database_summary")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    DATABASE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    database_name: _containers.RepeatedScalarFieldContainer[str]
    database_summary: _containers.RepeatedCompositeFieldContainer[PbDatabaseSummary]
    def __init__(self, database_name: _Optional[_Iterable[str]] = ..., database_summary: _Optional[_Iterable[_Union[PbDatabaseSummary, _Mapping]]] = ...) -> None: ...

class PbDatabaseSummary(_message.Message):
    __slots__ = ("database_name", "created_time", "table_count")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    TABLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    created_time: int
    table_count: int
    def __init__(self, database_name: _Optional[str] = ..., created_time: _Optional[int] = ..., table_count: _Optional[int] = ...) -> None: ...

class DatabaseExistsRequest(_message.Message):
    __slots__ = ("database_name",)
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    def __init__(self, database_name: _Optional[str] = ...) -> None: ...

class DatabaseExistsResponse(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: bool = ...) -> None: ...

class GetDatabaseInfoRequest(_message.Message):
    __slots__ = ("database_name",)
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    def __init__(self, database_name: _Optional[str] = ...) -> None: ...

class GetDatabaseInfoResponse(_message.Message):
    __slots__ = ("database_json", "created_time", "modified_time")
    DATABASE_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_TIME_FIELD_NUMBER: _ClassVar[int]
    database_json: bytes
    created_time: int
    modified_time: int
    def __init__(self, database_json: _Optional[bytes] = ..., created_time: _Optional[int] = ..., modified_time: _Optional[int] = ...) -> None: ...

class AlterDatabaseRequest(_message.Message):
    __slots__ = ("database_name", "ignore_if_not_exists", "config_changes", "comment")
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_CHANGES_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    ignore_if_not_exists: bool
    config_changes: _containers.RepeatedCompositeFieldContainer[PbAlterConfig]
    comment: str
    def __init__(self, database_name: _Optional[str] = ..., ignore_if_not_exists: bool = ..., config_changes: _Optional[_Iterable[_Union[PbAlterConfig, _Mapping]]] = ..., comment: _Optional[str] = ...) -> None: ...

class AlterDatabaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbAlterConfig(_message.Message):
    __slots__ = ("config_key", "config_value", "op_type")
    CONFIG_KEY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VALUE_FIELD_NUMBER: _ClassVar[int]
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    config_key: str
    config_value: str
    op_type: int
    def __init__(self, config_key: _Optional[str] = ..., config_value: _Optional[str] = ..., op_type: _Optional[int] = ...) -> None: ...

class CreateTableRequest(_message.Message):
    __slots__ = ("table_path", "table_json", "ignore_if_exists")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    table_json: bytes
    ignore_if_exists: bool
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., table_json: _Optional[bytes] = ..., ignore_if_exists: bool = ...) -> None: ...

class CreateTableResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropTableRequest(_message.Message):
    __slots__ = ("table_path", "ignore_if_not_exists")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    ignore_if_not_exists: bool
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., ignore_if_not_exists: bool = ...) -> None: ...

class DropTableResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTableInfoRequest(_message.Message):
    __slots__ = ("table_path",)
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ...) -> None: ...

class GetTableInfoResponse(_message.Message):
    __slots__ = ("table_id", "schema_id", "table_json", "created_time", "modified_time", "remote_data_dir")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_TIME_FIELD_NUMBER: _ClassVar[int]
    REMOTE_DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    schema_id: int
    table_json: bytes
    created_time: int
    modified_time: int
    remote_data_dir: str
    def __init__(self, table_id: _Optional[int] = ..., schema_id: _Optional[int] = ..., table_json: _Optional[bytes] = ..., created_time: _Optional[int] = ..., modified_time: _Optional[int] = ..., remote_data_dir: _Optional[str] = ...) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ("database_name",)
    DATABASE_NAME_FIELD_NUMBER: _ClassVar[int]
    database_name: str
    def __init__(self, database_name: _Optional[str] = ...) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("table_name",)
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    table_name: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, table_name: _Optional[_Iterable[str]] = ...) -> None: ...

class TableExistsRequest(_message.Message):
    __slots__ = ("table_path",)
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ...) -> None: ...

class TableExistsResponse(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: bool = ...) -> None: ...

class GetTableSchemaRequest(_message.Message):
    __slots__ = ("table_path", "schema_id")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    schema_id: int
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., schema_id: _Optional[int] = ...) -> None: ...

class GetTableSchemaResponse(_message.Message):
    __slots__ = ("schema_id", "schema_json")
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    schema_id: int
    schema_json: bytes
    def __init__(self, schema_id: _Optional[int] = ..., schema_json: _Optional[bytes] = ...) -> None: ...

class AlterTableRequest(_message.Message):
    __slots__ = ("table_path", "ignore_if_not_exists", "config_changes", "add_columns", "drop_columns", "rename_columns", "modify_columns")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_CHANGES_FIELD_NUMBER: _ClassVar[int]
    ADD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    DROP_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    RENAME_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    ignore_if_not_exists: bool
    config_changes: _containers.RepeatedCompositeFieldContainer[PbAlterConfig]
    add_columns: _containers.RepeatedCompositeFieldContainer[PbAddColumn]
    drop_columns: _containers.RepeatedCompositeFieldContainer[PbDropColumn]
    rename_columns: _containers.RepeatedCompositeFieldContainer[PbRenameColumn]
    modify_columns: _containers.RepeatedCompositeFieldContainer[PbModifyColumn]
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., ignore_if_not_exists: bool = ..., config_changes: _Optional[_Iterable[_Union[PbAlterConfig, _Mapping]]] = ..., add_columns: _Optional[_Iterable[_Union[PbAddColumn, _Mapping]]] = ..., drop_columns: _Optional[_Iterable[_Union[PbDropColumn, _Mapping]]] = ..., rename_columns: _Optional[_Iterable[_Union[PbRenameColumn, _Mapping]]] = ..., modify_columns: _Optional[_Iterable[_Union[PbModifyColumn, _Mapping]]] = ...) -> None: ...

class AlterTableResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbAddColumn(_message.Message):
    __slots__ = ("column_name", "data_type_json", "comment", "column_position_type", "agg_function_type", "agg_function_params")
    COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_JSON_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    COLUMN_POSITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    AGG_FUNCTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    AGG_FUNCTION_PARAMS_FIELD_NUMBER: _ClassVar[int]
    column_name: str
    data_type_json: bytes
    comment: str
    column_position_type: int
    agg_function_type: str
    agg_function_params: _containers.RepeatedCompositeFieldContainer[PbKeyValue]
    def __init__(self, column_name: _Optional[str] = ..., data_type_json: _Optional[bytes] = ..., comment: _Optional[str] = ..., column_position_type: _Optional[int] = ..., agg_function_type: _Optional[str] = ..., agg_function_params: _Optional[_Iterable[_Union[PbKeyValue, _Mapping]]] = ...) -> None: ...

class PbDropColumn(_message.Message):
    __slots__ = ("column_name",)
    COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    column_name: str
    def __init__(self, column_name: _Optional[str] = ...) -> None: ...

class PbRenameColumn(_message.Message):
    __slots__ = ("old_column_name", "new_column_name")
    OLD_COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    NEW_COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    old_column_name: str
    new_column_name: str
    def __init__(self, old_column_name: _Optional[str] = ..., new_column_name: _Optional[str] = ...) -> None: ...

class PbModifyColumn(_message.Message):
    __slots__ = ("column_name", "data_type_json", "comment", "column_position_type")
    COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_JSON_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    COLUMN_POSITION_TYPE_FIELD_NUMBER: _ClassVar[int]
    column_name: str
    data_type_json: bytes
    comment: str
    column_position_type: int
    def __init__(self, column_name: _Optional[str] = ..., data_type_json: _Optional[bytes] = ..., comment: _Optional[str] = ..., column_position_type: _Optional[int] = ...) -> None: ...

class ListPartitionInfosRequest(_message.Message):
    __slots__ = ("table_path", "partial_partition_spec")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_PARTITION_SPEC_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    partial_partition_spec: PbPartitionSpec
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., partial_partition_spec: _Optional[_Union[PbPartitionSpec, _Mapping]] = ...) -> None: ...

class ListPartitionInfosResponse(_message.Message):
    __slots__ = ("partitions_info",)
    PARTITIONS_INFO_FIELD_NUMBER: _ClassVar[int]
    partitions_info: _containers.RepeatedCompositeFieldContainer[PbPartitionInfo]
    def __init__(self, partitions_info: _Optional[_Iterable[_Union[PbPartitionInfo, _Mapping]]] = ...) -> None: ...

class PbPartitionInfo(_message.Message):
    __slots__ = ("partition_id", "partition_spec", "remote_data_dir")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_SPEC_FIELD_NUMBER: _ClassVar[int]
    REMOTE_DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    partition_spec: PbPartitionSpec
    remote_data_dir: str
    def __init__(self, partition_id: _Optional[int] = ..., partition_spec: _Optional[_Union[PbPartitionSpec, _Mapping]] = ..., remote_data_dir: _Optional[str] = ...) -> None: ...

class CreatePartitionRequest(_message.Message):
    __slots__ = ("table_path", "partition_spec", "ignore_if_not_exists")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_SPEC_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    partition_spec: PbPartitionSpec
    ignore_if_not_exists: bool
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., partition_spec: _Optional[_Union[PbPartitionSpec, _Mapping]] = ..., ignore_if_not_exists: bool = ...) -> None: ...

class CreatePartitionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropPartitionRequest(_message.Message):
    __slots__ = ("table_path", "partition_spec", "ignore_if_not_exists")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_SPEC_FIELD_NUMBER: _ClassVar[int]
    IGNORE_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    partition_spec: PbPartitionSpec
    ignore_if_not_exists: bool
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., partition_spec: _Optional[_Union[PbPartitionSpec, _Mapping]] = ..., ignore_if_not_exists: bool = ...) -> None: ...

class DropPartitionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MetadataRequest(_message.Message):
    __slots__ = ("table_path", "partitions_path", "partitions_id")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_ID_FIELD_NUMBER: _ClassVar[int]
    table_path: _containers.RepeatedCompositeFieldContainer[PbTablePath]
    partitions_path: _containers.RepeatedCompositeFieldContainer[PbPhysicalTablePath]
    partitions_id: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, table_path: _Optional[_Iterable[_Union[PbTablePath, _Mapping]]] = ..., partitions_path: _Optional[_Iterable[_Union[PbPhysicalTablePath, _Mapping]]] = ..., partitions_id: _Optional[_Iterable[int]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("coordinator_server", "tablet_servers", "table_metadata", "partition_metadata")
    COORDINATOR_SERVER_FIELD_NUMBER: _ClassVar[int]
    TABLET_SERVERS_FIELD_NUMBER: _ClassVar[int]
    TABLE_METADATA_FIELD_NUMBER: _ClassVar[int]
    PARTITION_METADATA_FIELD_NUMBER: _ClassVar[int]
    coordinator_server: PbServerNode
    tablet_servers: _containers.RepeatedCompositeFieldContainer[PbServerNode]
    table_metadata: _containers.RepeatedCompositeFieldContainer[PbTableMetadata]
    partition_metadata: _containers.RepeatedCompositeFieldContainer[PbPartitionMetadata]
    def __init__(self, coordinator_server: _Optional[_Union[PbServerNode, _Mapping]] = ..., tablet_servers: _Optional[_Iterable[_Union[PbServerNode, _Mapping]]] = ..., table_metadata: _Optional[_Iterable[_Union[PbTableMetadata, _Mapping]]] = ..., partition_metadata: _Optional[_Iterable[_Union[PbPartitionMetadata, _Mapping]]] = ...) -> None: ...

class UpdateMetadataRequest(_message.Message):
    __slots__ = ("coordinator_server", "tablet_servers", "table_metadata", "partition_metadata", "coordinator_epoch")
    COORDINATOR_SERVER_FIELD_NUMBER: _ClassVar[int]
    TABLET_SERVERS_FIELD_NUMBER: _ClassVar[int]
    TABLE_METADATA_FIELD_NUMBER: _ClassVar[int]
    PARTITION_METADATA_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    coordinator_server: PbServerNode
    tablet_servers: _containers.RepeatedCompositeFieldContainer[PbServerNode]
    table_metadata: _containers.RepeatedCompositeFieldContainer[PbTableMetadata]
    partition_metadata: _containers.RepeatedCompositeFieldContainer[PbPartitionMetadata]
    coordinator_epoch: int
    def __init__(self, coordinator_server: _Optional[_Union[PbServerNode, _Mapping]] = ..., tablet_servers: _Optional[_Iterable[_Union[PbServerNode, _Mapping]]] = ..., table_metadata: _Optional[_Iterable[_Union[PbTableMetadata, _Mapping]]] = ..., partition_metadata: _Optional[_Iterable[_Union[PbPartitionMetadata, _Mapping]]] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class UpdateMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbTableMetadata(_message.Message):
    __slots__ = ("table_path", "table_id", "schema_id", "table_json", "bucket_metadata", "created_time", "modified_time", "remote_data_dir")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_JSON_FIELD_NUMBER: _ClassVar[int]
    BUCKET_METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_TIME_FIELD_NUMBER: _ClassVar[int]
    REMOTE_DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    table_id: int
    schema_id: int
    table_json: bytes
    bucket_metadata: _containers.RepeatedCompositeFieldContainer[PbBucketMetadata]
    created_time: int
    modified_time: int
    remote_data_dir: str
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., table_id: _Optional[int] = ..., schema_id: _Optional[int] = ..., table_json: _Optional[bytes] = ..., bucket_metadata: _Optional[_Iterable[_Union[PbBucketMetadata, _Mapping]]] = ..., created_time: _Optional[int] = ..., modified_time: _Optional[int] = ..., remote_data_dir: _Optional[str] = ...) -> None: ...

class PbPartitionMetadata(_message.Message):
    __slots__ = ("table_id", "partition_name", "partition_id", "bucket_metadata")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_METADATA_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_name: str
    partition_id: int
    bucket_metadata: _containers.RepeatedCompositeFieldContainer[PbBucketMetadata]
    def __init__(self, table_id: _Optional[int] = ..., partition_name: _Optional[str] = ..., partition_id: _Optional[int] = ..., bucket_metadata: _Optional[_Iterable[_Union[PbBucketMetadata, _Mapping]]] = ...) -> None: ...

class PbBucketMetadata(_message.Message):
    __slots__ = ("bucket_id", "leader_id", "replica_id", "leader_epoch")
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    bucket_id: int
    leader_id: int
    replica_id: _containers.RepeatedScalarFieldContainer[int]
    leader_epoch: int
    def __init__(self, bucket_id: _Optional[int] = ..., leader_id: _Optional[int] = ..., replica_id: _Optional[_Iterable[int]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class InitWriterRequest(_message.Message):
    __slots__ = ("table_path",)
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    table_path: _containers.RepeatedCompositeFieldContainer[PbTablePath]
    def __init__(self, table_path: _Optional[_Iterable[_Union[PbTablePath, _Mapping]]] = ...) -> None: ...

class InitWriterResponse(_message.Message):
    __slots__ = ("writer_id",)
    WRITER_ID_FIELD_NUMBER: _ClassVar[int]
    writer_id: int
    def __init__(self, writer_id: _Optional[int] = ...) -> None: ...

class ProduceLogRequest(_message.Message):
    __slots__ = ("acks", "table_id", "timeout_ms", "buckets_req")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    acks: int
    table_id: int
    timeout_ms: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbProduceLogReqForBucket]
    def __init__(self, acks: _Optional[int] = ..., table_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbProduceLogReqForBucket, _Mapping]]] = ...) -> None: ...

class ProduceLogResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbProduceLogRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbProduceLogRespForBucket, _Mapping]]] = ...) -> None: ...

class PbProduceLogReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "records")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    records: bytes
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class PbProduceLogRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "base_offset")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    base_offset: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., base_offset: _Optional[int] = ...) -> None: ...

class FetchLogRequest(_message.Message):
    __slots__ = ("follower_server_id", "max_bytes", "tables_req", "max_wait_ms", "min_bytes", "read_preference")
    FOLLOWER_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TABLES_REQ_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    READ_PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    follower_server_id: int
    max_bytes: int
    tables_req: _containers.RepeatedCompositeFieldContainer[PbFetchLogReqForTable]
    max_wait_ms: int
    min_bytes: int
    read_preference: int
    def __init__(self, follower_server_id: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tables_req: _Optional[_Iterable[_Union[PbFetchLogReqForTable, _Mapping]]] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., read_preference: _Optional[int] = ...) -> None: ...

class FetchLogResponse(_message.Message):
    __slots__ = ("tables_resp",)
    TABLES_RESP_FIELD_NUMBER: _ClassVar[int]
    tables_resp: _containers.RepeatedCompositeFieldContainer[PbFetchLogRespForTable]
    def __init__(self, tables_resp: _Optional[_Iterable[_Union[PbFetchLogRespForTable, _Mapping]]] = ...) -> None: ...

class PbFetchLogReqForTable(_message.Message):
    __slots__ = ("table_id", "projection_pushdown_enabled", "projected_fields", "buckets_req", "filter_predicate", "filter_schema_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECTION_PUSHDOWN_ENABLED_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    FILTER_PREDICATE_FIELD_NUMBER: _ClassVar[int]
    FILTER_SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    projection_pushdown_enabled: bool
    projected_fields: _containers.RepeatedScalarFieldContainer[int]
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbFetchLogReqForBucket]
    filter_predicate: PbPredicate
    filter_schema_id: int
    def __init__(self, table_id: _Optional[int] = ..., projection_pushdown_enabled: bool = ..., projected_fields: _Optional[_Iterable[int]] = ..., buckets_req: _Optional[_Iterable[_Union[PbFetchLogReqForBucket, _Mapping]]] = ..., filter_predicate: _Optional[_Union[PbPredicate, _Mapping]] = ..., filter_schema_id: _Optional[int] = ...) -> None: ...

class PbFetchLogReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "fetch_offset", "max_fetch_bytes")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_FETCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    fetch_offset: int
    max_fetch_bytes: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., max_fetch_bytes: _Optional[int] = ...) -> None: ...

class PbFetchLogRespForTable(_message.Message):
    __slots__ = ("table_id", "buckets_resp")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbFetchLogRespForBucket]
    def __init__(self, table_id: _Optional[int] = ..., buckets_resp: _Optional[_Iterable[_Union[PbFetchLogRespForBucket, _Mapping]]] = ...) -> None: ...

class PbFetchLogRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "high_watermark", "log_start_offset", "remote_log_fetch_info", "records", "filtered_end_offset")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_FETCH_INFO_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    FILTERED_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    high_watermark: int
    log_start_offset: int
    remote_log_fetch_info: PbRemoteLogFetchInfo
    records: bytes
    filtered_end_offset: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., remote_log_fetch_info: _Optional[_Union[PbRemoteLogFetchInfo, _Mapping]] = ..., records: _Optional[bytes] = ..., filtered_end_offset: _Optional[int] = ...) -> None: ...

class PbRemoteLogFetchInfo(_message.Message):
    __slots__ = ("remote_log_tablet_dir", "partition_name", "remote_log_segments", "first_start_pos")
    REMOTE_LOG_TABLET_DIR_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_START_POS_FIELD_NUMBER: _ClassVar[int]
    remote_log_tablet_dir: str
    partition_name: str
    remote_log_segments: _containers.RepeatedCompositeFieldContainer[PbRemoteLogSegment]
    first_start_pos: int
    def __init__(self, remote_log_tablet_dir: _Optional[str] = ..., partition_name: _Optional[str] = ..., remote_log_segments: _Optional[_Iterable[_Union[PbRemoteLogSegment, _Mapping]]] = ..., first_start_pos: _Optional[int] = ...) -> None: ...

class PbRemoteLogSegment(_message.Message):
    __slots__ = ("remote_log_segment_id", "remote_log_start_offset", "remote_log_end_offset", "segment_size_in_bytes", "max_timestamp")
    REMOTE_LOG_SEGMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_SIZE_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_id: str
    remote_log_start_offset: int
    remote_log_end_offset: int
    segment_size_in_bytes: int
    max_timestamp: int
    def __init__(self, remote_log_segment_id: _Optional[str] = ..., remote_log_start_offset: _Optional[int] = ..., remote_log_end_offset: _Optional[int] = ..., segment_size_in_bytes: _Optional[int] = ..., max_timestamp: _Optional[int] = ...) -> None: ...

class PbPredicate(_message.Message):
    __slots__ = ("type", "leaf", "compound")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    COMPOUND_FIELD_NUMBER: _ClassVar[int]
    type: int
    leaf: PbLeafPredicate
    compound: PbCompoundPredicate
    def __init__(self, type: _Optional[int] = ..., leaf: _Optional[_Union[PbLeafPredicate, _Mapping]] = ..., compound: _Optional[_Union[PbCompoundPredicate, _Mapping]] = ...) -> None: ...

class PbLeafPredicate(_message.Message):
    __slots__ = ("function", "field_id", "literals")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    LITERALS_FIELD_NUMBER: _ClassVar[int]
    function: int
    field_id: int
    literals: _containers.RepeatedCompositeFieldContainer[PbLiteralValue]
    def __init__(self, function: _Optional[int] = ..., field_id: _Optional[int] = ..., literals: _Optional[_Iterable[_Union[PbLiteralValue, _Mapping]]] = ...) -> None: ...

class PbCompoundPredicate(_message.Message):
    __slots__ = ("function", "children")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    function: int
    children: _containers.RepeatedCompositeFieldContainer[PbPredicate]
    def __init__(self, function: _Optional[int] = ..., children: _Optional[_Iterable[_Union[PbPredicate, _Mapping]]] = ...) -> None: ...

class PbLiteralValue(_message.Message):
    __slots__ = ("literal_type", "is_null", "boolean_value", "int_value", "bigint_value", "float_value", "double_value", "string_value", "binary_value", "decimal_value", "timestamp_millis_value", "timestamp_nano_of_millis_value", "decimal_bytes")
    LITERAL_TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    BOOLEAN_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BIGINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BINARY_VALUE_FIELD_NUMBER: _ClassVar[int]
    DECIMAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MILLIS_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_NANO_OF_MILLIS_VALUE_FIELD_NUMBER: _ClassVar[int]
    DECIMAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    literal_type: int
    is_null: bool
    boolean_value: bool
    int_value: int
    bigint_value: int
    float_value: float
    double_value: float
    string_value: str
    binary_value: bytes
    decimal_value: int
    timestamp_millis_value: int
    timestamp_nano_of_millis_value: int
    decimal_bytes: bytes
    def __init__(self, literal_type: _Optional[int] = ..., is_null: bool = ..., boolean_value: bool = ..., int_value: _Optional[int] = ..., bigint_value: _Optional[int] = ..., float_value: _Optional[float] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., binary_value: _Optional[bytes] = ..., decimal_value: _Optional[int] = ..., timestamp_millis_value: _Optional[int] = ..., timestamp_nano_of_millis_value: _Optional[int] = ..., decimal_bytes: _Optional[bytes] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("follower_server_id", "offset_type", "table_id", "partition_id", "bucket_id", "startTimestamp")
    FOLLOWER_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_TYPE_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    STARTTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    follower_server_id: int
    offset_type: int
    table_id: int
    partition_id: int
    bucket_id: _containers.RepeatedScalarFieldContainer[int]
    startTimestamp: int
    def __init__(self, follower_server_id: _Optional[int] = ..., offset_type: _Optional[int] = ..., table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[_Iterable[int]] = ..., startTimestamp: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbListOffsetsRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbListOffsetsRespForBucket, _Mapping]]] = ...) -> None: ...

class PbListOffsetsRespForBucket(_message.Message):
    __slots__ = ("bucket_id", "error_code", "error_message", "offset")
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    bucket_id: int
    error_code: int
    error_message: str
    offset: int
    def __init__(self, bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class PutKvRequest(_message.Message):
    __slots__ = ("acks", "table_id", "timeout_ms", "target_columns", "buckets_req", "agg_mode")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    AGG_MODE_FIELD_NUMBER: _ClassVar[int]
    acks: int
    table_id: int
    timeout_ms: int
    target_columns: _containers.RepeatedScalarFieldContainer[int]
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbPutKvReqForBucket]
    agg_mode: int
    def __init__(self, acks: _Optional[int] = ..., table_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., target_columns: _Optional[_Iterable[int]] = ..., buckets_req: _Optional[_Iterable[_Union[PbPutKvReqForBucket, _Mapping]]] = ..., agg_mode: _Optional[int] = ...) -> None: ...

class PutKvResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbPutKvRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbPutKvRespForBucket, _Mapping]]] = ...) -> None: ...

class PbPutKvReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "records")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    records: bytes
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class PbPutKvRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "log_end_offset", "pressure")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    log_end_offset: int
    pressure: float
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., log_end_offset: _Optional[int] = ..., pressure: _Optional[float] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("table_id", "buckets_req", "insert_if_not_exists", "acks", "timeout_ms")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    INSERT_IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbLookupReqForBucket]
    insert_if_not_exists: bool
    acks: int
    timeout_ms: int
    def __init__(self, table_id: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbLookupReqForBucket, _Mapping]]] = ..., insert_if_not_exists: bool = ..., acks: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbLookupRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbLookupRespForBucket, _Mapping]]] = ...) -> None: ...

class PbLookupReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "keys", "original_partition_name")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    original_partition_name: str
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ..., original_partition_name: _Optional[str] = ...) -> None: ...

class PbLookupRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "values", "original_partition_name")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    values: _containers.RepeatedCompositeFieldContainer[PbValue]
    original_partition_name: str
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., values: _Optional[_Iterable[_Union[PbValue, _Mapping]]] = ..., original_partition_name: _Optional[str] = ...) -> None: ...

class PbValue(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: bytes
    def __init__(self, values: _Optional[bytes] = ...) -> None: ...

class PbValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, values: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PrefixLookupRequest(_message.Message):
    __slots__ = ("table_id", "buckets_req")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbPrefixLookupReqForBucket]
    def __init__(self, table_id: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbPrefixLookupReqForBucket, _Mapping]]] = ...) -> None: ...

class PrefixLookupResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbPrefixLookupRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbPrefixLookupRespForBucket, _Mapping]]] = ...) -> None: ...

class PbPrefixLookupReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "keys")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PbPrefixLookupRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "value_lists")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VALUE_LISTS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    value_lists: _containers.RepeatedCompositeFieldContainer[PbValueList]
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., value_lists: _Optional[_Iterable[_Union[PbValueList, _Mapping]]] = ...) -> None: ...

class LimitScanRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "limit")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    limit: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class LimitScanResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "is_log_table", "records")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IS_LOG_TABLE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    is_log_table: bool
    records: bytes
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., is_log_table: bool = ..., records: _Optional[bytes] = ...) -> None: ...

class GetFileSystemSecurityTokenRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFileSystemSecurityTokenResponse(_message.Message):
    __slots__ = ("schema", "token", "expiration_time", "addition_info")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_TIME_FIELD_NUMBER: _ClassVar[int]
    ADDITION_INFO_FIELD_NUMBER: _ClassVar[int]
    schema: str
    token: bytes
    expiration_time: int
    addition_info: _containers.RepeatedCompositeFieldContainer[PbKeyValue]
    def __init__(self, schema: _Optional[str] = ..., token: _Optional[bytes] = ..., expiration_time: _Optional[int] = ..., addition_info: _Optional[_Iterable[_Union[PbKeyValue, _Mapping]]] = ...) -> None: ...

class GetLatestKvSnapshotsRequest(_message.Message):
    __slots__ = ("table_path", "partition_name")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    partition_name: str
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., partition_name: _Optional[str] = ...) -> None: ...

class GetLatestKvSnapshotsResponse(_message.Message):
    __slots__ = ("table_id", "partition_id", "latest_snapshots")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    latest_snapshots: _containers.RepeatedCompositeFieldContainer[PbKvSnapshot]
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., latest_snapshots: _Optional[_Iterable[_Union[PbKvSnapshot, _Mapping]]] = ...) -> None: ...

class PbKvSnapshot(_message.Message):
    __slots__ = ("bucket_id", "snapshot_id", "log_offset")
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    bucket_id: int
    snapshot_id: int
    log_offset: int
    def __init__(self, bucket_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ..., log_offset: _Optional[int] = ...) -> None: ...

class GetKvSnapshotMetadataRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "snapshot_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    snapshot_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ...) -> None: ...

class GetKvSnapshotMetadataResponse(_message.Message):
    __slots__ = ("log_offset", "snapshot_files")
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FILES_FIELD_NUMBER: _ClassVar[int]
    log_offset: int
    snapshot_files: _containers.RepeatedCompositeFieldContainer[PbRemotePathAndLocalFile]
    def __init__(self, log_offset: _Optional[int] = ..., snapshot_files: _Optional[_Iterable[_Union[PbRemotePathAndLocalFile, _Mapping]]] = ...) -> None: ...

class PbRemotePathAndLocalFile(_message.Message):
    __slots__ = ("remote_path", "local_file_name")
    REMOTE_PATH_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    remote_path: str
    local_file_name: str
    def __init__(self, remote_path: _Optional[str] = ..., local_file_name: _Optional[str] = ...) -> None: ...

class ListKvSnapshotsRequest(_message.Message):
    __slots__ = ("table_id", "partition_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ...) -> None: ...

class ListKvSnapshotsResponse(_message.Message):
    __slots__ = ("table_id", "partition_id", "active_snapshots")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    active_snapshots: _containers.RepeatedCompositeFieldContainer[PbKvSnapshot]
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., active_snapshots: _Optional[_Iterable[_Union[PbKvSnapshot, _Mapping]]] = ...) -> None: ...

class ListRemoteLogManifestsRequest(_message.Message):
    __slots__ = ("table_id", "partition_id")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ...) -> None: ...

class ListRemoteLogManifestsResponse(_message.Message):
    __slots__ = ("manifests",)
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    manifests: _containers.RepeatedCompositeFieldContainer[PbRemoteLogManifestEntry]
    def __init__(self, manifests: _Optional[_Iterable[_Union[PbRemoteLogManifestEntry, _Mapping]]] = ...) -> None: ...

class PbRemoteLogManifestEntry(_message.Message):
    __slots__ = ("table_bucket", "remote_log_manifest_path", "remote_log_end_offset")
    TABLE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_MANIFEST_PATH_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    table_bucket: PbTableBucket
    remote_log_manifest_path: str
    remote_log_end_offset: int
    def __init__(self, table_bucket: _Optional[_Union[PbTableBucket, _Mapping]] = ..., remote_log_manifest_path: _Optional[str] = ..., remote_log_end_offset: _Optional[int] = ...) -> None: ...

class GetLakeSnapshotRequest(_message.Message):
    __slots__ = ("table_path", "snapshot_id", "readable")
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    READABLE_FIELD_NUMBER: _ClassVar[int]
    table_path: PbTablePath
    snapshot_id: int
    readable: bool
    def __init__(self, table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., snapshot_id: _Optional[int] = ..., readable: bool = ...) -> None: ...

class GetLakeSnapshotResponse(_message.Message):
    __slots__ = ("table_id", "snapshotId", "bucket_snapshots")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    snapshotId: int
    bucket_snapshots: _containers.RepeatedCompositeFieldContainer[PbLakeSnapshotForBucket]
    def __init__(self, table_id: _Optional[int] = ..., snapshotId: _Optional[int] = ..., bucket_snapshots: _Optional[_Iterable[_Union[PbLakeSnapshotForBucket, _Mapping]]] = ...) -> None: ...

class PbLakeSnapshotForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "log_offset", "partition_name")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NAME_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    log_offset: int
    partition_name: str
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., log_offset: _Optional[int] = ..., partition_name: _Optional[str] = ...) -> None: ...

class DescribeClusterConfigsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterConfigsResponse(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[PbDescribeConfig]
    def __init__(self, configs: _Optional[_Iterable[_Union[PbDescribeConfig, _Mapping]]] = ...) -> None: ...

class PbDescribeConfig(_message.Message):
    __slots__ = ("config_key", "config_value", "config_source")
    CONFIG_KEY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VALUE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SOURCE_FIELD_NUMBER: _ClassVar[int]
    config_key: str
    config_value: str
    config_source: str
    def __init__(self, config_key: _Optional[str] = ..., config_value: _Optional[str] = ..., config_source: _Optional[str] = ...) -> None: ...

class AlterClusterConfigsRequest(_message.Message):
    __slots__ = ("alter_configs",)
    ALTER_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    alter_configs: _containers.RepeatedCompositeFieldContainer[PbAlterConfig]
    def __init__(self, alter_configs: _Optional[_Iterable[_Union[PbAlterConfig, _Mapping]]] = ...) -> None: ...

class AlterClusterConfigsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterHealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterHealthResponse(_message.Message):
    __slots__ = ("num_replicas", "in_sync_replicas", "num_leader_replicas", "active_leader_replicas", "status")
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    NUM_LEADER_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_LEADER_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    num_replicas: int
    in_sync_replicas: int
    num_leader_replicas: int
    active_leader_replicas: int
    status: int
    def __init__(self, num_replicas: _Optional[int] = ..., in_sync_replicas: _Optional[int] = ..., num_leader_replicas: _Optional[int] = ..., active_leader_replicas: _Optional[int] = ..., status: _Optional[int] = ...) -> None: ...

class NotifyLeaderAndIsrRequest(_message.Message):
    __slots__ = ("coordinator_epoch", "notify_buckets_leader_req")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_BUCKETS_LEADER_REQ_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    notify_buckets_leader_req: _containers.RepeatedCompositeFieldContainer[PbNotifyLeaderAndIsrReqForBucket]
    def __init__(self, coordinator_epoch: _Optional[int] = ..., notify_buckets_leader_req: _Optional[_Iterable[_Union[PbNotifyLeaderAndIsrReqForBucket, _Mapping]]] = ...) -> None: ...

class NotifyLeaderAndIsrResponse(_message.Message):
    __slots__ = ("notify_buckets_leader_resp",)
    NOTIFY_BUCKETS_LEADER_RESP_FIELD_NUMBER: _ClassVar[int]
    notify_buckets_leader_resp: _containers.RepeatedCompositeFieldContainer[PbNotifyLeaderAndIsrRespForBucket]
    def __init__(self, notify_buckets_leader_resp: _Optional[_Iterable[_Union[PbNotifyLeaderAndIsrRespForBucket, _Mapping]]] = ...) -> None: ...

class PbNotifyLeaderAndIsrReqForBucket(_message.Message):
    __slots__ = ("physical_table_path", "table_bucket", "leader", "leader_epoch", "replicas", "isr", "bucket_epoch", "standby_replicas")
    PHYSICAL_TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    TABLE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    BUCKET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STANDBY_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    physical_table_path: PbPhysicalTablePath
    table_bucket: PbTableBucket
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    bucket_epoch: int
    standby_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, physical_table_path: _Optional[_Union[PbPhysicalTablePath, _Mapping]] = ..., table_bucket: _Optional[_Union[PbTableBucket, _Mapping]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., bucket_epoch: _Optional[int] = ..., standby_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class PbNotifyLeaderAndIsrRespForBucket(_message.Message):
    __slots__ = ("table_bucket", "error_code", "error_message")
    TABLE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    table_bucket: PbTableBucket
    error_code: int
    error_message: str
    def __init__(self, table_bucket: _Optional[_Union[PbTableBucket, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class StopReplicaRequest(_message.Message):
    __slots__ = ("coordinator_epoch", "stop_replicas_req")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STOP_REPLICAS_REQ_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    stop_replicas_req: _containers.RepeatedCompositeFieldContainer[PbStopReplicaReqForBucket]
    def __init__(self, coordinator_epoch: _Optional[int] = ..., stop_replicas_req: _Optional[_Iterable[_Union[PbStopReplicaReqForBucket, _Mapping]]] = ...) -> None: ...

class StopReplicaResponse(_message.Message):
    __slots__ = ("stop_replicas_resp",)
    STOP_REPLICAS_RESP_FIELD_NUMBER: _ClassVar[int]
    stop_replicas_resp: _containers.RepeatedCompositeFieldContainer[PbStopReplicaRespForBucket]
    def __init__(self, stop_replicas_resp: _Optional[_Iterable[_Union[PbStopReplicaRespForBucket, _Mapping]]] = ...) -> None: ...

class PbStopReplicaReqForBucket(_message.Message):
    __slots__ = ("table_bucket", "leader_epoch", "delete", "deleteRemote")
    TABLE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    DELETEREMOTE_FIELD_NUMBER: _ClassVar[int]
    table_bucket: PbTableBucket
    leader_epoch: int
    delete: bool
    deleteRemote: bool
    def __init__(self, table_bucket: _Optional[_Union[PbTableBucket, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., delete: bool = ..., deleteRemote: bool = ...) -> None: ...

class PbStopReplicaRespForBucket(_message.Message):
    __slots__ = ("table_bucket", "error_code", "error_message")
    TABLE_BUCKET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    table_bucket: PbTableBucket
    error_code: int
    error_message: str
    def __init__(self, table_bucket: _Optional[_Union[PbTableBucket, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class AdjustIsrRequest(_message.Message):
    __slots__ = ("serverId", "tables_req")
    SERVERID_FIELD_NUMBER: _ClassVar[int]
    TABLES_REQ_FIELD_NUMBER: _ClassVar[int]
    serverId: int
    tables_req: _containers.RepeatedCompositeFieldContainer[PbAdjustIsrReqForTable]
    def __init__(self, serverId: _Optional[int] = ..., tables_req: _Optional[_Iterable[_Union[PbAdjustIsrReqForTable, _Mapping]]] = ...) -> None: ...

class AdjustIsrResponse(_message.Message):
    __slots__ = ("tables_resp",)
    TABLES_RESP_FIELD_NUMBER: _ClassVar[int]
    tables_resp: _containers.RepeatedCompositeFieldContainer[PbAdjustIsrRespForTable]
    def __init__(self, tables_resp: _Optional[_Iterable[_Union[PbAdjustIsrRespForTable, _Mapping]]] = ...) -> None: ...

class PbAdjustIsrReqForTable(_message.Message):
    __slots__ = ("table_id", "buckets_req")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbAdjustIsrReqForBucket]
    def __init__(self, table_id: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbAdjustIsrReqForBucket, _Mapping]]] = ...) -> None: ...

class PbAdjustIsrReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "leader_epoch", "new_isr", "coordinator_epoch", "bucket_epoch", "standby_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BUCKET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STANDBY_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    leader_epoch: int
    new_isr: _containers.RepeatedScalarFieldContainer[int]
    coordinator_epoch: int
    bucket_epoch: int
    standby_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., coordinator_epoch: _Optional[int] = ..., bucket_epoch: _Optional[int] = ..., standby_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class PbAdjustIsrRespForTable(_message.Message):
    __slots__ = ("table_id", "buckets_resp")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbAdjustIsrRespForBucket]
    def __init__(self, table_id: _Optional[int] = ..., buckets_resp: _Optional[_Iterable[_Union[PbAdjustIsrRespForBucket, _Mapping]]] = ...) -> None: ...

class PbAdjustIsrRespForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "error_code", "error_message", "leader_id", "leader_epoch", "isr", "bucket_epoch", "coordinator_epoch", "standby_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    BUCKET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STANDBY_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    bucket_epoch: int
    coordinator_epoch: int
    standby_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., bucket_epoch: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., standby_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ControlledShutdownRequest(_message.Message):
    __slots__ = ("tablet_server_id", "tablet_server_epoch")
    TABLET_SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    TABLET_SERVER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    tablet_server_id: int
    tablet_server_epoch: int
    def __init__(self, tablet_server_id: _Optional[int] = ..., tablet_server_epoch: _Optional[int] = ...) -> None: ...

class ControlledShutdownResponse(_message.Message):
    __slots__ = ("remaining_leader_buckets",)
    REMAINING_LEADER_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    remaining_leader_buckets: _containers.RepeatedCompositeFieldContainer[PbTableBucket]
    def __init__(self, remaining_leader_buckets: _Optional[_Iterable[_Union[PbTableBucket, _Mapping]]] = ...) -> None: ...

class CommitKvSnapshotRequest(_message.Message):
    __slots__ = ("completed_snapshot", "coordinator_epoch", "bucket_leader_epoch")
    COMPLETED_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BUCKET_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    completed_snapshot: bytes
    coordinator_epoch: int
    bucket_leader_epoch: int
    def __init__(self, completed_snapshot: _Optional[bytes] = ..., coordinator_epoch: _Optional[int] = ..., bucket_leader_epoch: _Optional[int] = ...) -> None: ...

class CommitKvSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NotifyKvSnapshotOffsetRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "coordinator_epoch", "min_retain_offset")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MIN_RETAIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    coordinator_epoch: int
    min_retain_offset: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., min_retain_offset: _Optional[int] = ...) -> None: ...

class NotifyKvSnapshotOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommitRemoteLogManifestRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "remote_log_manifest_path", "remote_log_start_offset", "remote_log_end_offset", "coordinator_epoch", "bucket_leader_epoch", "highest_copied_end_offset")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_MANIFEST_PATH_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BUCKET_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_COPIED_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    remote_log_manifest_path: str
    remote_log_start_offset: int
    remote_log_end_offset: int
    coordinator_epoch: int
    bucket_leader_epoch: int
    highest_copied_end_offset: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., remote_log_manifest_path: _Optional[str] = ..., remote_log_start_offset: _Optional[int] = ..., remote_log_end_offset: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., bucket_leader_epoch: _Optional[int] = ..., highest_copied_end_offset: _Optional[int] = ...) -> None: ...

class CommitRemoteLogManifestResponse(_message.Message):
    __slots__ = ("commitSuccess",)
    COMMITSUCCESS_FIELD_NUMBER: _ClassVar[int]
    commitSuccess: bool
    def __init__(self, commitSuccess: bool = ...) -> None: ...

class NotifyRemoteLogOffsetsRequest(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "coordinator_epoch", "remote_start_offset", "remote_end_offset", "highest_copied_end_offset")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REMOTE_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_COPIED_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    coordinator_epoch: int
    remote_start_offset: int
    remote_end_offset: int
    highest_copied_end_offset: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., remote_start_offset: _Optional[int] = ..., remote_end_offset: _Optional[int] = ..., highest_copied_end_offset: _Optional[int] = ...) -> None: ...

class NotifyRemoteLogOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LakeTieringHeartbeatRequest(_message.Message):
    __slots__ = ("tiering_tables", "finished_tables", "failed_tables", "request_table", "force_finished_tables", "tiering_job_name", "tiering_job_application_id")
    TIERING_TABLES_FIELD_NUMBER: _ClassVar[int]
    FINISHED_TABLES_FIELD_NUMBER: _ClassVar[int]
    FAILED_TABLES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TABLE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FINISHED_TABLES_FIELD_NUMBER: _ClassVar[int]
    TIERING_JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    TIERING_JOB_APPLICATION_ID_FIELD_NUMBER: _ClassVar[int]
    tiering_tables: _containers.RepeatedCompositeFieldContainer[PbHeartbeatReqForTable]
    finished_tables: _containers.RepeatedCompositeFieldContainer[PbHeartbeatReqForTable]
    failed_tables: _containers.RepeatedCompositeFieldContainer[PbHeartbeatReqForTable]
    request_table: bool
    force_finished_tables: _containers.RepeatedScalarFieldContainer[int]
    tiering_job_name: str
    tiering_job_application_id: str
    def __init__(self, tiering_tables: _Optional[_Iterable[_Union[PbHeartbeatReqForTable, _Mapping]]] = ..., finished_tables: _Optional[_Iterable[_Union[PbHeartbeatReqForTable, _Mapping]]] = ..., failed_tables: _Optional[_Iterable[_Union[PbHeartbeatReqForTable, _Mapping]]] = ..., request_table: bool = ..., force_finished_tables: _Optional[_Iterable[int]] = ..., tiering_job_name: _Optional[str] = ..., tiering_job_application_id: _Optional[str] = ...) -> None: ...

class LakeTieringHeartbeatResponse(_message.Message):
    __slots__ = ("coordinator_epoch", "tiering_table", "tiering_table_resp", "finished_table_resp", "failed_table_resp")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIERING_TABLE_FIELD_NUMBER: _ClassVar[int]
    TIERING_TABLE_RESP_FIELD_NUMBER: _ClassVar[int]
    FINISHED_TABLE_RESP_FIELD_NUMBER: _ClassVar[int]
    FAILED_TABLE_RESP_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    tiering_table: PbLakeTieringTableInfo
    tiering_table_resp: _containers.RepeatedCompositeFieldContainer[PbHeartbeatRespForTable]
    finished_table_resp: _containers.RepeatedCompositeFieldContainer[PbHeartbeatRespForTable]
    failed_table_resp: _containers.RepeatedCompositeFieldContainer[PbHeartbeatRespForTable]
    def __init__(self, coordinator_epoch: _Optional[int] = ..., tiering_table: _Optional[_Union[PbLakeTieringTableInfo, _Mapping]] = ..., tiering_table_resp: _Optional[_Iterable[_Union[PbHeartbeatRespForTable, _Mapping]]] = ..., finished_table_resp: _Optional[_Iterable[_Union[PbHeartbeatRespForTable, _Mapping]]] = ..., failed_table_resp: _Optional[_Iterable[_Union[PbHeartbeatRespForTable, _Mapping]]] = ...) -> None: ...

class PbHeartbeatReqForTable(_message.Message):
    __slots__ = ("table_id", "coordinator_epoch", "tiering_epoch", "lake_tiering_stats")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIERING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAKE_TIERING_STATS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    coordinator_epoch: int
    tiering_epoch: int
    lake_tiering_stats: PbLakeTieringStats
    def __init__(self, table_id: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., tiering_epoch: _Optional[int] = ..., lake_tiering_stats: _Optional[_Union[PbLakeTieringStats, _Mapping]] = ...) -> None: ...

class PbLakeTieringStats(_message.Message):
    __slots__ = ("file_size", "record_count")
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    file_size: int
    record_count: int
    def __init__(self, file_size: _Optional[int] = ..., record_count: _Optional[int] = ...) -> None: ...

class PbLakeTieringTableInfo(_message.Message):
    __slots__ = ("table_id", "table_path", "tiering_epoch")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    TIERING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    table_path: PbTablePath
    tiering_epoch: int
    def __init__(self, table_id: _Optional[int] = ..., table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., tiering_epoch: _Optional[int] = ...) -> None: ...

class PbHeartbeatRespForTable(_message.Message):
    __slots__ = ("table_id", "error")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    error: ErrorResponse
    def __init__(self, table_id: _Optional[int] = ..., error: _Optional[_Union[ErrorResponse, _Mapping]] = ...) -> None: ...

class PrepareLakeTableSnapshotRequest(_message.Message):
    __slots__ = ("bucket_offsets", "ignore_previous_table_offsets")
    BUCKET_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_PREVIOUS_TABLE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    bucket_offsets: _containers.RepeatedCompositeFieldContainer[PbTableOffsets]
    ignore_previous_table_offsets: bool
    def __init__(self, bucket_offsets: _Optional[_Iterable[_Union[PbTableOffsets, _Mapping]]] = ..., ignore_previous_table_offsets: bool = ...) -> None: ...

class PrepareLakeTableSnapshotResponse(_message.Message):
    __slots__ = ("prepare_lake_table_resp",)
    PREPARE_LAKE_TABLE_RESP_FIELD_NUMBER: _ClassVar[int]
    prepare_lake_table_resp: _containers.RepeatedCompositeFieldContainer[PbPrepareLakeTableRespForTable]
    def __init__(self, prepare_lake_table_resp: _Optional[_Iterable[_Union[PbPrepareLakeTableRespForTable, _Mapping]]] = ...) -> None: ...

class PbTableOffsets(_message.Message):
    __slots__ = ("table_id", "table_path", "bucket_offsets")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    BUCKET_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    table_path: PbTablePath
    bucket_offsets: _containers.RepeatedCompositeFieldContainer[PbBucketOffset]
    def __init__(self, table_id: _Optional[int] = ..., table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., bucket_offsets: _Optional[_Iterable[_Union[PbBucketOffset, _Mapping]]] = ...) -> None: ...

class PbBucketOffset(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "log_end_offset")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    log_end_offset: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class PbPrepareLakeTableRespForTable(_message.Message):
    __slots__ = ("error_code", "error_message", "table_id", "lake_table_offsets_path")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    LAKE_TABLE_OFFSETS_PATH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    table_id: int
    lake_table_offsets_path: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., table_id: _Optional[int] = ..., lake_table_offsets_path: _Optional[str] = ...) -> None: ...

class CommitLakeTableSnapshotRequest(_message.Message):
    __slots__ = ("tables_req", "lake_table_snapshot_metadata")
    TABLES_REQ_FIELD_NUMBER: _ClassVar[int]
    LAKE_TABLE_SNAPSHOT_METADATA_FIELD_NUMBER: _ClassVar[int]
    tables_req: _containers.RepeatedCompositeFieldContainer[PbLakeTableSnapshotInfo]
    lake_table_snapshot_metadata: _containers.RepeatedCompositeFieldContainer[PbLakeTableSnapshotMetadata]
    def __init__(self, tables_req: _Optional[_Iterable[_Union[PbLakeTableSnapshotInfo, _Mapping]]] = ..., lake_table_snapshot_metadata: _Optional[_Iterable[_Union[PbLakeTableSnapshotMetadata, _Mapping]]] = ...) -> None: ...

class CommitLakeTableSnapshotResponse(_message.Message):
    __slots__ = ("table_resp",)
    TABLE_RESP_FIELD_NUMBER: _ClassVar[int]
    table_resp: _containers.RepeatedCompositeFieldContainer[PbCommitLakeTableSnapshotRespForTable]
    def __init__(self, table_resp: _Optional[_Iterable[_Union[PbCommitLakeTableSnapshotRespForTable, _Mapping]]] = ...) -> None: ...

class PbLakeTableSnapshotInfo(_message.Message):
    __slots__ = ("table_id", "snapshot_id", "buckets_req", "table_path", "tiering_epoch")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    TABLE_PATH_FIELD_NUMBER: _ClassVar[int]
    TIERING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    snapshot_id: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbLakeTableOffsetForBucket]
    table_path: PbTablePath
    tiering_epoch: int
    def __init__(self, table_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbLakeTableOffsetForBucket, _Mapping]]] = ..., table_path: _Optional[_Union[PbTablePath, _Mapping]] = ..., tiering_epoch: _Optional[int] = ...) -> None: ...

class PbLakeTableOffsetForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "log_end_offset", "max_timestamp")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    log_end_offset: int
    max_timestamp: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., max_timestamp: _Optional[int] = ...) -> None: ...

class PbLakeTableSnapshotMetadata(_message.Message):
    __slots__ = ("table_id", "snapshot_id", "tiered_bucket_offsets_file_path", "readable_bucket_offsets_file_path", "earliest_snapshot_id_to_keep")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    TIERED_BUCKET_OFFSETS_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    READABLE_BUCKET_OFFSETS_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_SNAPSHOT_ID_TO_KEEP_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    snapshot_id: int
    tiered_bucket_offsets_file_path: str
    readable_bucket_offsets_file_path: str
    earliest_snapshot_id_to_keep: int
    def __init__(self, table_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ..., tiered_bucket_offsets_file_path: _Optional[str] = ..., readable_bucket_offsets_file_path: _Optional[str] = ..., earliest_snapshot_id_to_keep: _Optional[int] = ...) -> None: ...

class PbCommitLakeTableSnapshotRespForTable(_message.Message):
    __slots__ = ("error_code", "error_message", "table_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    table_id: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., table_id: _Optional[int] = ...) -> None: ...

class NotifyLakeTableOffsetRequest(_message.Message):
    __slots__ = ("coordinator_epoch", "notify_buckets_req")
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    coordinator_epoch: int
    notify_buckets_req: _containers.RepeatedCompositeFieldContainer[PbNotifyLakeTableOffsetReqForBucket]
    def __init__(self, coordinator_epoch: _Optional[int] = ..., notify_buckets_req: _Optional[_Iterable[_Union[PbNotifyLakeTableOffsetReqForBucket, _Mapping]]] = ...) -> None: ...

class NotifyLakeTableOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbNotifyLakeTableOffsetReqForBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "snapshot_id", "log_start_offset", "log_end_offset", "max_timestamp")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    snapshot_id: int
    log_start_offset: int
    log_end_offset: int
    max_timestamp: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., max_timestamp: _Optional[int] = ...) -> None: ...

class GetTableStatsRequest(_message.Message):
    __slots__ = ("table_id", "buckets_req", "target_columns")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_REQ_FIELD_NUMBER: _ClassVar[int]
    TARGET_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    buckets_req: _containers.RepeatedCompositeFieldContainer[PbTableStatsReqForBucket]
    target_columns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, table_id: _Optional[int] = ..., buckets_req: _Optional[_Iterable[_Union[PbTableStatsReqForBucket, _Mapping]]] = ..., target_columns: _Optional[_Iterable[int]] = ...) -> None: ...

class GetTableStatsResponse(_message.Message):
    __slots__ = ("buckets_resp",)
    BUCKETS_RESP_FIELD_NUMBER: _ClassVar[int]
    buckets_resp: _containers.RepeatedCompositeFieldContainer[PbTableStatsRespForBucket]
    def __init__(self, buckets_resp: _Optional[_Iterable[_Union[PbTableStatsRespForBucket, _Mapping]]] = ...) -> None: ...

class PbTableStatsReqForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ...) -> None: ...

class PbTableStatsRespForBucket(_message.Message):
    __slots__ = ("error_code", "error_message", "partition_id", "bucket_id", "row_count")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    partition_id: int
    bucket_id: int
    row_count: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., row_count: _Optional[int] = ...) -> None: ...

class RegisterProducerOffsetsRequest(_message.Message):
    __slots__ = ("producer_id", "table_offsets", "ttl_ms")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    table_offsets: _containers.RepeatedCompositeFieldContainer[PbProducerTableOffsets]
    ttl_ms: int
    def __init__(self, producer_id: _Optional[str] = ..., table_offsets: _Optional[_Iterable[_Union[PbProducerTableOffsets, _Mapping]]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RegisterProducerOffsetsResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: int
    def __init__(self, result: _Optional[int] = ...) -> None: ...

class GetProducerOffsetsRequest(_message.Message):
    __slots__ = ("producer_id",)
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    def __init__(self, producer_id: _Optional[str] = ...) -> None: ...

class GetProducerOffsetsResponse(_message.Message):
    __slots__ = ("producer_id", "expiration_time", "table_offsets")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRATION_TIME_FIELD_NUMBER: _ClassVar[int]
    TABLE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    expiration_time: int
    table_offsets: _containers.RepeatedCompositeFieldContainer[PbProducerTableOffsets]
    def __init__(self, producer_id: _Optional[str] = ..., expiration_time: _Optional[int] = ..., table_offsets: _Optional[_Iterable[_Union[PbProducerTableOffsets, _Mapping]]] = ...) -> None: ...

class DeleteProducerOffsetsRequest(_message.Message):
    __slots__ = ("producer_id",)
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    def __init__(self, producer_id: _Optional[str] = ...) -> None: ...

class DeleteProducerOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbProducerTableOffsets(_message.Message):
    __slots__ = ("table_id", "bucket_offsets")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    bucket_offsets: _containers.RepeatedCompositeFieldContainer[PbBucketOffset]
    def __init__(self, table_id: _Optional[int] = ..., bucket_offsets: _Optional[_Iterable[_Union[PbBucketOffset, _Mapping]]] = ...) -> None: ...

class AcquireKvSnapshotLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "lease_duration_ms", "snapshots_to_lease")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_TO_LEASE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lease_duration_ms: int
    snapshots_to_lease: _containers.RepeatedCompositeFieldContainer[PbKvSnapshotLeaseForTable]
    def __init__(self, lease_id: _Optional[str] = ..., lease_duration_ms: _Optional[int] = ..., snapshots_to_lease: _Optional[_Iterable[_Union[PbKvSnapshotLeaseForTable, _Mapping]]] = ...) -> None: ...

class AcquireKvSnapshotLeaseResponse(_message.Message):
    __slots__ = ("unavailable_snapshots",)
    UNAVAILABLE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    unavailable_snapshots: _containers.RepeatedCompositeFieldContainer[PbKvSnapshotLeaseForTable]
    def __init__(self, unavailable_snapshots: _Optional[_Iterable[_Union[PbKvSnapshotLeaseForTable, _Mapping]]] = ...) -> None: ...

class ReleaseKvSnapshotLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "buckets_to_release")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_TO_RELEASE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    buckets_to_release: _containers.RepeatedCompositeFieldContainer[PbTableBucket]
    def __init__(self, lease_id: _Optional[str] = ..., buckets_to_release: _Optional[_Iterable[_Union[PbTableBucket, _Mapping]]] = ...) -> None: ...

class ReleaseKvSnapshotLeaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropKvSnapshotLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class DropKvSnapshotLeaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PbKvSnapshotLeaseForTable(_message.Message):
    __slots__ = ("table_id", "bucket_snapshots")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    bucket_snapshots: _containers.RepeatedCompositeFieldContainer[PbKvSnapshotLeaseForBucket]
    def __init__(self, table_id: _Optional[int] = ..., bucket_snapshots: _Optional[_Iterable[_Union[PbKvSnapshotLeaseForBucket, _Mapping]]] = ...) -> None: ...

class PbKvSnapshotLeaseForBucket(_message.Message):
    __slots__ = ("partition_id", "bucket_id", "snapshot_id")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    bucket_id: int
    snapshot_id: int
    def __init__(self, partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., snapshot_id: _Optional[int] = ...) -> None: ...

class PbScanReqForBucket(_message.Message):
    __slots__ = ("table_id", "partition_id", "bucket_id", "limit")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    partition_id: int
    bucket_id: int
    limit: int
    def __init__(self, table_id: _Optional[int] = ..., partition_id: _Optional[int] = ..., bucket_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ScanKvRequest(_message.Message):
    __slots__ = ("scanner_id", "bucket_scan_req", "call_seq_id", "batch_size_bytes", "close_scanner")
    SCANNER_ID_FIELD_NUMBER: _ClassVar[int]
    BUCKET_SCAN_REQ_FIELD_NUMBER: _ClassVar[int]
    CALL_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SCANNER_FIELD_NUMBER: _ClassVar[int]
    scanner_id: bytes
    bucket_scan_req: PbScanReqForBucket
    call_seq_id: int
    batch_size_bytes: int
    close_scanner: bool
    def __init__(self, scanner_id: _Optional[bytes] = ..., bucket_scan_req: _Optional[_Union[PbScanReqForBucket, _Mapping]] = ..., call_seq_id: _Optional[int] = ..., batch_size_bytes: _Optional[int] = ..., close_scanner: bool = ...) -> None: ...

class ScanKvResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "scanner_id", "has_more_results", "records", "log_offset")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SCANNER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    scanner_id: bytes
    has_more_results: bool
    records: bytes
    log_offset: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., scanner_id: _Optional[bytes] = ..., has_more_results: bool = ..., records: _Optional[bytes] = ..., log_offset: _Optional[int] = ...) -> None: ...
