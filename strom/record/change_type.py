"""Row change types of Fluss changelogs, as stored one byte per row in log batches."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ChangeType"]


class ChangeType(IntEnum):
    APPEND_ONLY = 0
    INSERT = 1
    UPDATE_BEFORE = 2
    UPDATE_AFTER = 3
    DELETE = 4

    @property
    def short_string(self) -> str:
        return _SHORT[self]

    @classmethod
    def from_short_string(cls, text: str) -> ChangeType:
        try:
            return _BY_SHORT[text]
        except KeyError:
            raise ValueError(f"unknown change type {text!r}") from None


_SHORT: dict[ChangeType, str] = {
    ChangeType.APPEND_ONLY: "+A",
    ChangeType.INSERT: "+I",
    ChangeType.UPDATE_BEFORE: "-U",
    ChangeType.UPDATE_AFTER: "+U",
    ChangeType.DELETE: "-D",
}
_BY_SHORT: dict[str, ChangeType] = {v: k for k, v in _SHORT.items()}
