"""Kafka's error codes, and the Kafka code for each Fluss error a Kafka request can meet."""

from __future__ import annotations

from strom.common import errors as fluss

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
FENCED_LEADER_EPOCH = 74

_BY_FLUSS: dict[type[fluss.FlussError], int] = {
    fluss.NotLeaderOrFollowerError: NOT_LEADER_OR_FOLLOWER,
    fluss.LeaderNotAvailableError: LEADER_NOT_AVAILABLE,
    fluss.UnknownTableOrBucketError: UNKNOWN_TOPIC_OR_PARTITION,
    fluss.TableNotExistError: UNKNOWN_TOPIC_OR_PARTITION,
    fluss.DatabaseNotExistError: UNKNOWN_TOPIC_OR_PARTITION,
    fluss.TableAlreadyExistError: TOPIC_ALREADY_EXISTS,
    fluss.InvalidTableError: INVALID_TOPIC_EXCEPTION,
    fluss.InvalidDatabaseError: INVALID_TOPIC_EXCEPTION,
    fluss.InvalidReplicationFactorError: INVALID_REPLICATION_FACTOR,
    fluss.TooManyBucketsError: INVALID_PARTITIONS,
    fluss.InvalidConfigError: INVALID_CONFIG,
    fluss.CorruptRecordError: CORRUPT_MESSAGE,
    fluss.CorruptMessageError: CORRUPT_MESSAGE,
    fluss.RecordTooLargeError: MESSAGE_TOO_LARGE,
    fluss.InvalidRequiredAcksError: INVALID_REQUIRED_ACKS,
    fluss.LogOffsetOutOfRangeError: OFFSET_OUT_OF_RANGE,
    fluss.RequestTimeoutError: REQUEST_TIMED_OUT,
    fluss.NotEnoughReplicasError: NOT_ENOUGH_REPLICAS,
    fluss.NotEnoughReplicasAfterAppendError: NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    fluss.OutOfOrderSequenceError: OUT_OF_ORDER_SEQUENCE_NUMBER,
    fluss.DuplicateSequenceError: DUPLICATE_SEQUENCE_NUMBER,
    fluss.UnknownWriterIdError: UNKNOWN_PRODUCER_ID,
    fluss.InvalidTimestampError: INVALID_TIMESTAMP,
    fluss.FencedLeaderEpochError: FENCED_LEADER_EPOCH,
    fluss.StorageError: KAFKA_STORAGE_ERROR,
}
_BY_FLUSS_CODE = {cls.code: code for cls, code in _BY_FLUSS.items()}


def kafka_code(error: fluss.FlussError) -> int:
    for cls, code in _BY_FLUSS.items():
        if isinstance(error, cls):
            return code
    return _BY_FLUSS_CODE.get(error.code, UNKNOWN_SERVER_ERROR)


def kafka_code_of(fluss_code: int) -> int:
    """The Kafka code for a Fluss error code carried in a response field."""
    return NONE if fluss_code == 0 else _BY_FLUSS_CODE.get(fluss_code, UNKNOWN_SERVER_ERROR)
