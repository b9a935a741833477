import pytest

from strom.common import errors
from strom.common.errors import (
    FlussError,
    InvalidConfigError,
    InvalidPartitionError,
    LogStorageError,
    PartitionSpecInvalidError,
    StorageError,
    TableNotExistError,
    UnknownServerError,
    all_error_classes,
    error_class_for_code,
    error_for_code,
)


def test_every_code_from_minus_one_to_73_except_none_has_a_class() -> None:
    registry = all_error_classes()
    assert set(registry) == set(range(-1, 74)) - {0}
    for code, cls in registry.items():
        assert cls.code == code
        assert issubclass(cls, FlussError)


def test_known_codes_and_names() -> None:
    assert TableNotExistError.code == 7
    assert InvalidConfigError.code == 39
    assert PartitionSpecInvalidError.code == 43 and InvalidPartitionError is PartitionSpecInvalidError
    assert error_class_for_code(49).__name__ == "TooManyBucketsError"
    assert error_class_for_code(12).__name__ == "NotLeaderOrFollowerError"


def test_retriable_and_invalid_metadata_codes() -> None:
    writer_retries = {1, 3, 10, 11, 12, 14, 21, 25, 26, 28, 29, 44, 72}
    registry = all_error_classes()
    retriable = {c for c, cls in registry.items() if cls.retriable}
    assert writer_retries <= retriable
    # Java also marks these retriable (SchemaNotExist, DiskWriteLocked, HistoricalPartitionThrottled,
    # RetriableAuthenticate); nothing else is.
    assert retriable - writer_retries == {9, 51, 70, 73}
    assert {c for c, cls in registry.items() if cls.invalid_metadata} == {1, 12, 21, 44}


def test_error_for_code_builds_instances_with_messages() -> None:
    e = error_for_code(7, "Table db.t does not exist")
    assert isinstance(e, TableNotExistError)
    assert e.message == "Table db.t does not exist" and str(e) == e.message
    default = error_for_code(7)
    assert default.message  # a default description, never empty
    assert "code=7" in repr(default)


def test_unknown_code_becomes_unknown_server_error() -> None:
    e = error_for_code(999, "boom")
    assert isinstance(e, UnknownServerError) and e.code == -1
    assert "999" in e.message and "boom" in e.message


def test_none_is_not_an_error() -> None:
    with pytest.raises(ValueError):
        error_for_code(0)


def test_storage_family() -> None:
    assert issubclass(LogStorageError, StorageError)
    with pytest.raises(StorageError):
        raise LogStorageError("disk full")


def test_duplicate_code_registration_is_refused() -> None:
    with pytest.raises(TypeError, match="registered twice"):

        class Another(FlussError):  # pragma: no cover - definition itself fails
            code = 7

    assert errors.error_class_for_code(7) is TableNotExistError
