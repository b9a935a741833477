"""Fluss type strings, as `strom table alter --add-column` and `TableChange.add_column` take them."""

from __future__ import annotations

import pytest

from strom.common import types as t
from strom.common.type_strings import parse_data_type


@pytest.mark.parametrize(
    "text, expected",
    [
        ("STRING", t.STRING()),
        ("int", t.INT()),
        ("INTEGER", t.INT()),
        ("DECIMAL(10, 2)", t.DECIMAL(10, 2)),
        ("TIMESTAMP(3)", t.TIMESTAMP(3)),
        ("TIMESTAMP_LTZ", t.TIMESTAMP_LTZ()),
        ("BIGINT NOT NULL", t.BIGINT().copy(nullable=False)),
        ("ARRAY<INT>", t.ARRAY(t.INT())),
        ("MAP<STRING, ARRAY<DOUBLE>>", t.MAP(t.STRING(), t.ARRAY(t.DOUBLE()))),
    ],
)
def test_parses_what_str_of_a_type_prints(text: str, expected: t.DataType) -> None:
    assert parse_data_type(text) == expected
    assert parse_data_type(str(expected)) == expected


@pytest.mark.parametrize(
    "text, words", [("VARCHARX", "unknown type"), ("CHAR", "needs a length"), ("INT INT", "unexpected")]
)
def test_bad_type_strings_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_data_type(text)
