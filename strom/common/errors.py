"""The error hierarchy shared by servers and clients, keyed by Fluss's numeric error codes.

Every class carries its wire `code`, whether a client may simply retry the request (`retriable`)
and whether it should refresh its metadata first (`invalid_metadata`). Retriability follows the
Java exception hierarchy (subclasses of RetriableException / InvalidMetadataException).
Code 0 (NONE) is not an error and has no class.
"""

from __future__ import annotations

from typing import ClassVar

NONE_CODE = 0

_REGISTRY: dict[int, type[FlussError]] = {}


class FlussError(Exception):
    """Root of all Strom errors that travel on the wire."""

    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    # Fluss's Errors enum constant, handy in logs.
    error_name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    default_message: ClassVar[str] = "The server hit an unexpected error while handling the request."

    def __init__(self, message: str | None = None) -> None:
        self.message: str = message if message else self.default_message
        super().__init__(self.message)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # The class docstring doubles as the default message.
        if "default_message" not in cls.__dict__ and cls.__doc__:
            cls.default_message = " ".join(cls.__doc__.split())
        # A subclass that declares its own code owns that code; aliases and helper subclasses
        # that only inherit a code do not replace the registered class.
        if "code" in cls.__dict__:
            if cls.code in _REGISTRY:
                raise TypeError(f"error code {cls.code} registered twice: {_REGISTRY[cls.code]} and {cls}")
            _REGISTRY[cls.code] = cls

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class UnknownServerError(FlussError):
    """The server hit an unexpected error while handling the request."""

    code = -1


class StorageError(FlussError):
    """A storage error occurred on the server."""

    code = 26
    retriable = True
    error_name = "STORAGE_EXCEPTION"


class AuthenticateError(FlussError):
    """Authentication failed."""

    code = 46
    error_name = "AUTHENTICATE_EXCEPTION"


class InvalidOffsetError(FlussError):
    """The offset is invalid."""


class NetworkError(FlussError):
    """The connection closed before a response arrived."""

    code = 1
    retriable = True
    invalid_metadata = True
    error_name = "NETWORK_EXCEPTION"


class UnsupportedVersionError(FlussError):
    """This API version is not supported."""

    code = 2
    error_name = "UNSUPPORTED_VERSION"


class CorruptMessageError(FlussError):
    """The message failed its checksum, is too large, or is otherwise corrupt."""

    code = 3
    retriable = True
    error_name = "CORRUPT_MESSAGE"


class DatabaseNotExistError(FlussError):
    """The database does not exist."""

    code = 4
    error_name = "DATABASE_NOT_EXIST"


class DatabaseNotEmptyError(FlussError):
    """The database is not empty."""

    code = 5
    error_name = "DATABASE_NOT_EMPTY"


class DatabaseAlreadyExistError(FlussError):
    """The database already exists."""

    code = 6
    error_name = "DATABASE_ALREADY_EXIST"


class TableNotExistError(FlussError):
    """The table does not exist."""

    code = 7
    error_name = "TABLE_NOT_EXIST"


class TableAlreadyExistError(FlussError):
    """The table already exists."""

    code = 8
    error_name = "TABLE_ALREADY_EXIST"


class SchemaNotExistError(FlussError):
    """The schema does not exist."""

    code = 9
    retriable = True
    error_name = "SCHEMA_NOT_EXIST"


class LogStorageError(StorageError):
    """Storing log data failed on the server."""

    code = 10
    retriable = True
    error_name = "LOG_STORAGE_EXCEPTION"


class KvStorageError(StorageError):
    """Storing key-value data failed on the server."""

    code = 11
    retriable = True
    error_name = "KV_STORAGE_EXCEPTION"


class NotLeaderOrFollowerError(FlussError):
    """This server is neither leader nor follower of the bucket."""

    code = 12
    retriable = True
    invalid_metadata = True
    error_name = "NOT_LEADER_OR_FOLLOWER"


class RecordTooLargeError(FlussError):
    """The record is too large."""

    code = 13
    error_name = "RECORD_TOO_LARGE_EXCEPTION"


class CorruptRecordError(FlussError):
    """The record is corrupt."""

    code = 14
    retriable = True
    error_name = "CORRUPT_RECORD_EXCEPTION"


class InvalidTableError(FlussError):
    """The operation names an invalid table."""

    code = 15
    error_name = "INVALID_TABLE_EXCEPTION"


class InvalidDatabaseError(FlussError):
    """The operation names an invalid database."""

    code = 16
    error_name = "INVALID_DATABASE_EXCEPTION"


class InvalidReplicationFactorError(FlussError):
    """The replication factor exceeds the number of available tablet servers."""

    code = 17
    error_name = "INVALID_REPLICATION_FACTOR"


class InvalidRequiredAcksError(FlussError):
    """The produce request asked for an invalid acks value."""

    code = 18
    error_name = "INVALID_REQUIRED_ACKS"


class LogOffsetOutOfRangeError(InvalidOffsetError):
    """The log offset is out of range."""

    code = 19
    error_name = "LOG_OFFSET_OUT_OF_RANGE_EXCEPTION"


class NonPrimaryKeyTableError(FlussError):
    """The table has no primary key."""

    code = 20
    error_name = "NON_PRIMARY_KEY_TABLE_EXCEPTION"


class UnknownTableOrBucketError(FlussError):
    """The table or bucket does not exist on this server."""

    code = 21
    retriable = True
    invalid_metadata = True
    error_name = "UNKNOWN_TABLE_OR_BUCKET_EXCEPTION"


class InvalidUpdateVersionError(FlussError):
    """The update version is invalid."""

    code = 22
    error_name = "INVALID_UPDATE_VERSION_EXCEPTION"


class InvalidCoordinatorError(FlussError):
    """The coordinator is invalid."""

    code = 23
    error_name = "INVALID_COORDINATOR_EXCEPTION"


class FencedLeaderEpochError(FlussError):
    """The leader epoch is stale."""

    code = 24
    error_name = "FENCED_LEADER_EPOCH_EXCEPTION"


class RequestTimeoutError(FlussError):
    """The request timed out."""

    code = 25
    retriable = True
    error_name = "REQUEST_TIME_OUT"


class OperationNotAttemptedError(FlussError):
    """The server did not attempt the operation."""

    code = 27
    error_name = "OPERATION_NOT_ATTEMPTED_EXCEPTION"


class NotEnoughReplicasAfterAppendError(FlussError):
    """The records were written, but to fewer in-sync replicas than required."""

    code = 28
    retriable = True
    error_name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND_EXCEPTION"


class NotEnoughReplicasError(FlussError):
    """The write was rejected: fewer in-sync replicas than required."""

    code = 29
    retriable = True
    error_name = "NOT_ENOUGH_REPLICAS_EXCEPTION"


class SecurityTokenError(FlussError):
    """Obtaining a file-system security token failed."""

    code = 30
    error_name = "SECURITY_TOKEN_EXCEPTION"


class OutOfOrderSequenceError(FlussError):
    """The batch sequence number is out of order."""

    code = 31
    error_name = "OUT_OF_ORDER_SEQUENCE_EXCEPTION"


class DuplicateSequenceError(FlussError):
    """The batch sequence number is a duplicate."""

    code = 32
    error_name = "DUPLICATE_SEQUENCE_EXCEPTION"


class UnknownWriterIdError(FlussError):
    """The server has no state for this writer id."""

    code = 33
    error_name = "UNKNOWN_WRITER_ID_EXCEPTION"


class InvalidColumnProjectionError(FlussError):
    """The column projection is invalid."""

    code = 34
    error_name = "INVALID_COLUMN_PROJECTION"


class InvalidTargetColumnError(FlussError):
    """The target columns of the write are invalid."""

    code = 35
    error_name = "INVALID_TARGET_COLUMN"


class PartitionNotExistError(FlussError):
    """The partition does not exist."""

    code = 36
    error_name = "PARTITION_NOT_EXISTS"


class TableNotPartitionedError(FlussError):
    """The table is not partitioned."""

    code = 37
    error_name = "TABLE_NOT_PARTITIONED_EXCEPTION"


class InvalidTimestampError(FlussError):
    """The timestamp is invalid."""

    code = 38
    error_name = "INVALID_TIMESTAMP_EXCEPTION"


class InvalidConfigError(FlussError):
    """The configuration is invalid."""

    code = 39
    error_name = "INVALID_CONFIG_EXCEPTION"


class LakeStorageNotConfiguredError(FlussError):
    """No lake storage is configured."""

    code = 40
    error_name = "LAKE_STORAGE_NOT_CONFIGURED_EXCEPTION"


class KvSnapshotNotExistError(FlussError):
    """The kv snapshot does not exist."""

    code = 41
    error_name = "KV_SNAPSHOT_NOT_EXIST"


class PartitionAlreadyExistsError(FlussError):
    """The partition already exists."""

    code = 42
    error_name = "PARTITION_ALREADY_EXISTS"


class PartitionSpecInvalidError(FlussError):
    """The partition spec is invalid."""

    code = 43
    error_name = "PARTITION_SPEC_INVALID_EXCEPTION"


class LeaderNotAvailableError(FlussError):
    """The bucket has no available leader right now."""

    code = 44
    retriable = True
    invalid_metadata = True
    error_name = "LEADER_NOT_AVAILABLE_EXCEPTION"


class TooManyPartitionsError(FlussError):
    """The maximum number of partitions is exceeded."""

    code = 45
    error_name = "PARTITION_MAX_NUM_EXCEPTION"


class SecurityDisabledError(FlussError):
    """Security is disabled."""

    code = 47
    error_name = "SECURITY_DISABLED_EXCEPTION"


class AuthorizationError(FlussError):
    """Authorization failed."""

    code = 48
    error_name = "AUTHORIZATION_EXCEPTION"


class TooManyBucketsError(FlussError):
    """The maximum number of buckets is exceeded."""

    code = 49
    error_name = "BUCKET_MAX_NUM_EXCEPTION"


class FencedTieringEpochError(FlussError):
    """The tiering epoch is stale."""

    code = 50
    error_name = "FENCED_TIERING_EPOCH_EXCEPTION"


# Java derives it from AuthenticationException, not RetriableException; its name says a retry
# may succeed, so it is marked retriable here.
class RetriableAuthenticateError(AuthenticateError):
    """Authentication failed, but may succeed if retried."""

    code = 51
    retriable = True
    error_name = "RETRIABLE_AUTHENTICATE_EXCEPTION"


class InvalidServerRackInfoError(FlussError):
    """The server rack info is invalid."""

    code = 52
    error_name = "INVALID_SERVER_RACK_INFO_EXCEPTION"


class LakeSnapshotNotExistError(FlussError):
    """The lake snapshot does not exist."""

    code = 53
    error_name = "LAKE_SNAPSHOT_NOT_EXIST"


class LakeTableAlreadyExistError(FlussError):
    """The lake table already exists."""

    code = 54
    error_name = "LAKE_TABLE_ALREADY_EXIST"


class IneligibleReplicaError(FlussError):
    """The new ISR contains an ineligible replica."""

    code = 55
    error_name = "INELIGIBLE_REPLICA_EXCEPTION"


class InvalidAlterTableError(FlussError):
    """The table alteration is invalid."""

    code = 56
    error_name = "INVALID_ALTER_TABLE_EXCEPTION"


class DeletionDisabledError(FlussError):
    """Deletes are disabled on this table."""

    code = 57
    error_name = "DELETION_DISABLED_EXCEPTION"


class ServerNotExistError(FlussError):
    """The server does not exist."""

    code = 58
    error_name = "SERVER_NOT_EXIST_EXCEPTION"


class ServerTagAlreadyExistError(FlussError):
    """The server tag already exists."""

    code = 59
    error_name = "SEVER_TAG_ALREADY_EXIST_EXCEPTION"


class ServerTagNotExistError(FlussError):
    """The server tag does not exist."""

    code = 60
    error_name = "SEVER_TAG_NOT_EXIST_EXCEPTION"


class RebalanceFailureError(FlussError):
    """The rebalance task failed."""

    code = 61
    error_name = "REBALANCE_FAILURE_EXCEPTION"


class NoRebalanceInProgressError(FlussError):
    """No rebalance is in progress."""

    code = 62
    error_name = "NO_REBALANCE_IN_PROGRESS_EXCEPTION"


class InvalidProducerIdError(FlussError):
    """The producer id is invalid."""

    code = 63
    error_name = "INVALID_PRODUCER_ID_EXCEPTION"


class ConfigError(FlussError):
    """A configuration error occurred."""

    code = 64
    error_name = "CONFIG_EXCEPTION"


class NotCoordinatorLeaderError(FlussError):
    """This coordinator is not the leader."""

    code = 65
    error_name = "NOT_COORDINATOR_LEADER_EXCEPTION"


class ScannerExpiredError(FlussError):
    """The scanner session expired after inactivity."""

    code = 66
    error_name = "SCANNER_EXPIRED"


class UnknownScannerIdError(FlussError):
    """The server does not know this scanner id."""

    code = 67
    error_name = "UNKNOWN_SCANNER_ID"


class InvalidScanRequestError(FlussError):
    """The scan request is invalid."""

    code = 68
    error_name = "INVALID_SCAN_REQUEST"


class TooManyScannersError(FlussError):
    """The scanner session limit has been reached."""

    code = 69
    error_name = "TOO_MANY_SCANNERS"


class DiskWriteLockedError(FlussError):
    """Writes are refused: the data disk reached its configured usage limit."""

    code = 70
    retriable = True
    error_name = "DISK_WRITE_LOCKED"


class InsufficientKvLeaderReplicaCapacityError(FlussError):
    """The cluster lacks capacity for more KV leader replicas."""

    code = 71
    error_name = "INSUFFICIENT_KV_LEADER_REPLICA_CAPACITY"


class StorageBackpressureError(FlussError):
    """The write was refused: the KV storage engine is under write pressure."""

    code = 72
    retriable = True
    error_name = "STORAGE_BACKPRESSURE_EXCEPTION"


class HistoricalPartitionThrottledError(FlussError):
    """Too many requests for historical partitions are in flight."""

    code = 73
    retriable = True
    error_name = "HISTORICAL_PARTITION_THROTTLED"


# Java's class names for the same codes.
InvalidPartitionError = PartitionSpecInvalidError
AuthenticationError = AuthenticateError


def error_class_for_code(code: int) -> type[FlussError]:
    """The class registered for a wire code; UnknownServerError for codes we do not know."""
    return _REGISTRY.get(code, UnknownServerError)


def error_for_code(code: int, message: str | None = None) -> FlussError:
    """An instance of the error for a wire code (never for NONE)."""
    if code == NONE_CODE:
        raise ValueError("error code 0 (NONE) is not an error")
    cls = _REGISTRY.get(code)
    if cls is None:
        text = f"unknown error code {code}" + (f": {message}" if message else "")
        return UnknownServerError(text)
    return cls(message)


def all_error_classes() -> dict[int, type[FlussError]]:
    """Every registered code and its class (a copy)."""
    return dict(sorted(_REGISTRY.items()))
