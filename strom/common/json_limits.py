"""Bounds on JSON documents that arrive in requests (table and database descriptors), checked before
parsing: a few kilobytes of brackets must not exhaust the parser's recursion, and a document must not
be arbitrarily large."""

from __future__ import annotations

MAX_DOCUMENT_BYTES = 4 << 20
MAX_NESTING = 64


def check_json_bounds(data: bytes | str, what: str) -> None:
    """Raises ValueError naming `what` when the document is too large or nests too deeply."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{what} of {len(raw)} bytes is larger than {MAX_DOCUMENT_BYTES} bytes")
    # Brackets inside strings count too: an over-estimate that only refuses absurd documents.
    depth = deepest = 0
    for byte in raw.translate(None, _NOT_BRACKETS):
        depth += 1 if byte in _OPENING else -1
        deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            raise ValueError(f"{what} nests deeper than {MAX_NESTING} levels")


_OPENING = frozenset(b"[{")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_int(value: object, what: str) -> int:
    """An integer field of a JSON document: 3 is fine, 3.0, 1.5, true and "3" are not."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"'{what}' must be an integer, got {value!r}")
    return value
