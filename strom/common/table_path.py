"""Table identities: `TablePath` (database + table) and `PhysicalTablePath` (+ partition).

Names become directory names on disk, so Fluss restricts them: ASCII letters, digits, ``_`` and
``-``, at most 200 characters, not ``.``/``..``, and not starting with the reserved ``__`` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.common.errors import InvalidDatabaseError, InvalidTableError

DEFAULT_DATABASE_NAME = "fluss"
# Leaves room for "-<table_id>" in a 255-character directory name.
MAX_NAME_LENGTH = 200
# Reserved for internal databases, tables and partitions.
INTERNAL_NAME_PREFIX = "__"
PARTITION_SEPARATOR = "$"

_VALID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def detect_invalid_name(identifier: str | None) -> str | None:
    """Why `identifier` is not a valid database/table/partition-value name, or None if it is."""
    if identifier is None:
        return "null string is not allowed"
    if identifier == "":
        return "the empty string is not allowed"
    if identifier in (".", ".."):
        return f"'{identifier}' is not allowed"
    if len(identifier) > MAX_NAME_LENGTH:
        return f"the length of '{identifier}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not _VALID_CHARS.issuperset(identifier):
        return f"'{identifier}' contains one or more characters other than ASCII alphanumerics, '_' and '-'"
    return None


def detect_reserved_prefix(identifier: str | None) -> str | None:
    """Why `identifier` uses the reserved internal prefix, or None."""
    if identifier is not None and identifier.startswith(INTERNAL_NAME_PREFIX):
        return (
            f"'{INTERNAL_NAME_PREFIX}' is not allowed as prefix, since it is reserved for internal "
            "databases/internal tables/internal partitions in Fluss server"
        )
    return None


def validate_database_name(name: str) -> None:
    problem = detect_invalid_name(name) or detect_reserved_prefix(name)
    if problem is not None:
        raise InvalidDatabaseError(f"Database name {name} is invalid: {problem}")


def validate_table_name(name: str) -> None:
    problem = detect_invalid_name(name) or detect_reserved_prefix(name)
    if problem is not None:
        raise InvalidTableError(f"Table name {name} is invalid: {problem}")


@dataclass(frozen=True, slots=True)
class TablePath:
    database_name: str
    table_name: str

    @classmethod
    def parse(cls, text: str) -> TablePath:
        """``"db.t"`` → TablePath; a name without a dot lands in the default database."""
        db, sep, table = text.partition(".")
        return cls(db, table) if sep else cls(DEFAULT_DATABASE_NAME, db)

    def is_valid(self) -> bool:
        return (
            detect_invalid_name(self.database_name) is None and detect_invalid_name(self.table_name) is None
        )

    def validate(self) -> None:
        """Raise InvalidDatabaseError / InvalidTableError naming the problem."""
        validate_database_name(self.database_name)
        validate_table_name(self.table_name)

    def __str__(self) -> str:
        return f"{self.database_name}.{self.table_name}"


@dataclass(frozen=True, slots=True)
class PhysicalTablePath:
    """A table, or one partition of a partitioned table."""

    table_path: TablePath
    partition_name: str | None = None

    @classmethod
    def of(cls, database_name: str, table_name: str, partition_name: str | None = None) -> PhysicalTablePath:
        return cls(TablePath(database_name, table_name), partition_name)

    @property
    def database_name(self) -> str:
        return self.table_path.database_name

    @property
    def table_name(self) -> str:
        return self.table_path.table_name

    def is_valid(self) -> bool:
        if not self.table_path.is_valid():
            return False
        if self.partition_name is not None:
            values = self.partition_name.split(PARTITION_SEPARATOR)
            return all(detect_invalid_name(v) is None for v in values)
        return True

    def __str__(self) -> str:
        if self.partition_name is None:
            return str(self.table_path)
        return f"{self.table_path}(p={self.partition_name})"
