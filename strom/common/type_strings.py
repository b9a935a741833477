"""Fluss data types from their SQL text (`STRING`, `DECIMAL(10, 2)`, `ARRAY<INT> NOT NULL`...), the
form `str(DataType)` prints, for the CLI and `TableChange.add_column`."""

from __future__ import annotations

import re
from collections.abc import Callable

from strom.common import types as t
from strom.common.types import DataType

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(.))")

_SIMPLE: dict[str, Callable[[], DataType]] = {
    "BOOLEAN": t.BOOLEAN,
    "TINYINT": t.TINYINT,
    "SMALLINT": t.SMALLINT,
    "INT": t.INT,
    "INTEGER": t.INT,
    "BIGINT": t.BIGINT,
    "FLOAT": t.FLOAT,
    "DOUBLE": t.DOUBLE,
    "STRING": t.STRING,
    "DATE": t.DATE,
    "BYTES": t.BYTES,
}
_ONE_PARAM: dict[str, Callable[..., DataType]] = {
    "CHAR": t.CHAR,
    "BINARY": t.BINARY,
    "TIME": t.TIME,
    "TIMESTAMP": t.TIMESTAMP,
    "TIMESTAMP_LTZ": t.TIMESTAMP_LTZ,
    "DECIMAL": t.DECIMAL,
}
_NEED_PARAM = {"CHAR", "BINARY"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(0).strip() for m in _TOKEN.finditer(text) if m.group(0).strip()]
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise ValueError(f"data type {self.text!r}: expected {expected or 'more'}, found {token!r}")
        self.pos += 1
        return token

    def number(self) -> int:
        token = self.take()
        if not token.isdigit():
            raise ValueError(f"data type {self.text!r}: expected a number, found {token!r}")
        return int(token)

    def data_type(self) -> DataType:
        name = self.take().upper()
        if name in _SIMPLE:
            result = _SIMPLE[name]()
        elif name in _ONE_PARAM:
            params: list[int] = []
            if self.peek() == "(":
                self.take("(")
                params.append(self.number())
                while self.peek() == ",":
                    self.take(",")
                    params.append(self.number())
                self.take(")")
            elif name in _NEED_PARAM:
                raise ValueError(f"data type {self.text!r}: {name} needs a length, e.g. {name}(10)")
            result = _ONE_PARAM[name](*params)
        elif name == "ARRAY":
            self.take("<")
            element = self.data_type()
            self.take(">")
            result = t.ARRAY(element)
        elif name == "MAP":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            result = t.MAP(key, value)
        else:
            raise ValueError(f"data type {self.text!r}: unknown type {name!r}")
        if (self.peek() or "").upper() == "NOT":
            self.take("NOT")
            self.take("NULL")
            result = result.copy(nullable=False)
        return result


def parse_data_type(text: str) -> DataType:
    """The type `text` names; ValueError names what is wrong with it."""
    parser = _Parser(text)
    result = parser.data_type()
    if parser.peek() is not None:
        raise ValueError(f"data type {text!r}: unexpected {parser.peek()!r}")
    return result
