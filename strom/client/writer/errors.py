"""Errors the writer raises itself, and which server errors it retries.

Server errors keep their `strom.common.errors` classes. The writer does not go by each class's
`retriable` flag: it retries exactly the codes Fluss's writer retries, so an error such as
SCHEMA_NOT_EXIST fails the write instead of being resent forever.
"""

from __future__ import annotations

from strom.common import errors as e

__all__ = [
    "INVALID_METADATA_ERRORS",
    "RETRIABLE_WRITE_ERRORS",
    "BufferExhaustedError",
    "WriterClosedError",
    "is_retriable_write_error",
]


class WriterClosedError(e.FlussError):
    """The writer (or its connection) is closed; nothing more can be written."""

    error_name = "CLIENT_ERROR"


class BufferExhaustedError(e.FlussError):
    """Waited longer than client.writer.buffer.wait-timeout for writer buffer memory."""

    error_name = "CLIENT_ERROR"


# Fluss's writer: NETWORK, CORRUPT_MESSAGE, LOG/KV storage, NOT_LEADER, CORRUPT_RECORD,
# UNKNOWN_TABLE_OR_BUCKET, REQUEST_TIME_OUT, STORAGE, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
# LEADER_NOT_AVAILABLE, STORAGE_BACKPRESSURE.
RETRIABLE_WRITE_ERRORS: tuple[type[e.FlussError], ...] = (
    e.NetworkError,
    e.CorruptMessageError,
    e.StorageError,  # LogStorageError and KvStorageError are subclasses
    e.NotLeaderOrFollowerError,
    e.CorruptRecordError,
    e.UnknownTableOrBucketError,
    e.RequestTimeoutError,
    e.NotEnoughReplicasAfterAppendError,
    e.NotEnoughReplicasError,
    e.LeaderNotAvailableError,
    e.StorageBackpressureError,
)

# Errors after which the bucket leaders are looked up again.
INVALID_METADATA_ERRORS: tuple[type[e.FlussError], ...] = (
    e.NetworkError,
    e.NotLeaderOrFollowerError,
    e.UnknownTableOrBucketError,
    e.LeaderNotAvailableError,
)


def is_retriable_write_error(error: BaseException) -> bool:
    return isinstance(error, RETRIABLE_WRITE_ERRORS)
