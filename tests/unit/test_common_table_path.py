import pytest

from strom.common.errors import InvalidDatabaseError, InvalidTableError
from strom.common.table_path import PhysicalTablePath, TablePath, detect_invalid_name


def test_str_and_equality() -> None:
    assert str(TablePath("db", "t")) == "db.t"
    assert TablePath("db", "t") == TablePath("db", "t")
    assert len({TablePath("db", "t"), TablePath("db", "t")}) == 1
    assert str(PhysicalTablePath.of("db", "t")) == "db.t"
    assert str(PhysicalTablePath.of("db", "t", "2024$us")) == "db.t(p=2024$us)"
    assert TablePath.parse("a.b") == TablePath("a", "b")
    assert TablePath.parse("b") == TablePath("fluss", "b")


@pytest.mark.parametrize("name", ["a", "A_b-9", "x" * 200])
def test_valid_names(name: str) -> None:
    TablePath(name, name).validate()
    assert detect_invalid_name(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty string"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("x" * 201, "max allowed length 200"),
        ("a.b", "other than ASCII alphanumerics"),
        ("a b", "other than ASCII alphanumerics"),
        ("naïve", "other than ASCII alphanumerics"),
        ("a$b", "other than ASCII alphanumerics"),
    ],
)
def test_invalid_names(name: str, reason: str) -> None:
    with pytest.raises(InvalidTableError, match=reason) as e:
        TablePath("db", name).validate()
    assert e.value.code == 15
    assert f"Table name {name} is invalid" in e.value.message
    with pytest.raises(InvalidDatabaseError, match=reason) as d:
        TablePath(name, "t").validate()
    assert d.value.code == 16


def test_reserved_prefix() -> None:
    with pytest.raises(InvalidTableError, match="'__' is not allowed as prefix"):
        TablePath("db", "__internal").validate()
    with pytest.raises(InvalidDatabaseError, match="reserved"):
        TablePath("__sys", "t").validate()
    # is_valid only checks characters and length, like Java's isValid
    assert TablePath("db", "__internal").is_valid()


def test_physical_path_validity() -> None:
    assert PhysicalTablePath.of("db", "t", "2024$us").is_valid()
    assert not PhysicalTablePath.of("db", "t", "2024$u s").is_valid()
