from datetime import datetime

import pytest

from strom.common.config import AutoPartitionTimeUnit
from strom.common.errors import PartitionSpecInvalidError
from strom.common.partition import (
    PartitionSpec,
    auto_partition_value,
    is_valid_partition_time,
    parse_partition_name,
    partition_name,
    partition_qualified_name,
    validate_auto_partition_time,
    validate_partition_spec,
    validate_time_format,
)
from strom.common.table_path import TablePath

TP = TablePath("db", "t")


def test_partition_name_follows_key_order_and_joins_with_dollar() -> None:
    assert partition_name(["year", "region"], {"region": "us", "year": "2024"}) == "2024$us"
    assert partition_name(["d"], PartitionSpec.of([("d", "20240501")])) == "20240501"


def test_parse_partition_name_is_the_inverse() -> None:
    spec = parse_partition_name(["year", "region"], "2024$us")
    assert dict(spec) == {"year": "2024", "region": "us"}
    assert list(spec) == ["year", "region"]
    assert partition_name(["year", "region"], spec) == "2024$us"
    with pytest.raises(PartitionSpecInvalidError, match="2 partition keys"):
        parse_partition_name(["year", "region"], "2024")


def test_partition_spec_equality_ignores_order() -> None:
    assert PartitionSpec.of({"a": "1", "b": "2"}) == PartitionSpec.of([("b", "2"), ("a", "1")])
    assert PartitionSpec.of({"a": "1"}) != PartitionSpec.of({"a": "2"})


def test_qualified_name() -> None:
    assert partition_qualified_name(["y", "r"], ["2024", "us"]) == "y=2024/r=us"


def test_validate_spec_checks_keys_and_values() -> None:
    assert validate_partition_spec(TP, ["y", "r"], {"r": "us", "y": "2024"}, is_create=True) == ["2024", "us"]
    with pytest.raises(PartitionSpecInvalidError, match="size is not equal") as e:
        validate_partition_spec(TP, ["y", "r"], {"y": "2024"}, is_create=True)
    assert e.value.code == 43
    with pytest.raises(PartitionSpecInvalidError, match="does not contain partition key 'r'"):
        validate_partition_spec(TP, ["y", "r"], {"y": "2024", "x": "us"}, is_create=True)
    with pytest.raises(PartitionSpecInvalidError, match="The partition value a/b is invalid"):
        validate_partition_spec(TP, ["y"], {"y": "a/b"}, is_create=True)
    with pytest.raises(PartitionSpecInvalidError, match="empty string"):
        validate_partition_spec(TP, ["y"], {"y": ""}, is_create=False)


def test_reserved_prefix_only_rejected_on_create() -> None:
    with pytest.raises(PartitionSpecInvalidError, match="reserved"):
        validate_partition_spec(TP, ["y"], {"y": "__historical__"}, is_create=True)
    validate_partition_spec(TP, ["y"], {"y": "__historical__"}, is_create=False)


MOMENT = datetime(2024, 5, 31, 13, 45)


@pytest.mark.parametrize(
    ("unit", "now", "next_", "prev"),
    [
        ("YEAR", "2024", "2025", "2023"),
        ("QUARTER", "20242", "20243", "20241"),
        ("MONTH", "202405", "202406", "202404"),
        ("DAY", "20240531", "20240601", "20240530"),
        ("HOUR", "2024053113", "2024053114", "2024053112"),
    ],
)
def test_auto_partition_values(unit: str, now: str, next_: str, prev: str) -> None:
    assert auto_partition_value(unit, MOMENT) == now
    assert auto_partition_value(AutoPartitionTimeUnit(unit), MOMENT, 1) == next_
    assert auto_partition_value(unit.lower(), MOMENT, -1) == prev


def test_auto_partition_month_arithmetic_clamps_the_day() -> None:
    assert auto_partition_value("MONTH", datetime(2024, 1, 31), 1) == "202402"
    assert auto_partition_value("QUARTER", datetime(2024, 11, 30), 1) == "20251"
    assert auto_partition_value("DAY", datetime(2024, 12, 31, 23), 1) == "20250101"


def test_custom_time_format() -> None:
    assert auto_partition_value("DAY", MOMENT, time_format="yyyy-MM-dd") == "2024-05-31"
    assert auto_partition_value("HOUR", MOMENT, time_format="yyyyMMdd'h'HH") == "20240531h13"
    validate_time_format("yyyy-MM-dd", AutoPartitionTimeUnit.DAY)
    with pytest.raises(ValueError, match="invalid partition value"):
        validate_time_format("yyyy/MM/dd", AutoPartitionTimeUnit.DAY)
    with pytest.raises(ValueError, match="in this order"):
        validate_time_format("yyyyMM", AutoPartitionTimeUnit.DAY)
    with pytest.raises(ValueError, match="fixed width 4"):
        validate_time_format("yyMMdd", AutoPartitionTimeUnit.DAY)
    with pytest.raises(ValueError, match="unsupported time field 'm'"):
        validate_time_format("yyyyMMddHHmm", AutoPartitionTimeUnit.HOUR)
    with pytest.raises(ValueError, match="optional sections"):
        validate_time_format("yyyy[MM]", AutoPartitionTimeUnit.MONTH)


def test_is_valid_partition_time() -> None:
    assert is_valid_partition_time("20240229", AutoPartitionTimeUnit.DAY)
    assert not is_valid_partition_time("20230229", AutoPartitionTimeUnit.DAY)
    assert not is_valid_partition_time("2024053", AutoPartitionTimeUnit.DAY)
    assert not is_valid_partition_time("20245", AutoPartitionTimeUnit.QUARTER)
    assert is_valid_partition_time("2024-05-31", AutoPartitionTimeUnit.DAY, "yyyy-MM-dd")
    assert not is_valid_partition_time("2024053124", AutoPartitionTimeUnit.HOUR)


def test_created_auto_partitions_must_match_the_pattern_and_be_retained() -> None:
    path = TablePath("db", "t")
    now = datetime(2026, 3, 15, 12, 0)
    auto = {"table.auto-partition.enabled": "true", "table.auto-partition.time-unit": "DAY"}
    keep_two = {**auto, "table.auto-partition.num-retention": "2", "table.auto-partition.time-zone": "UTC"}
    validate_auto_partition_time(path, ["dt"], {"dt": "20260313"}, keep_two, now)  # the oldest kept
    validate_auto_partition_time(path, ["dt"], {"dt": "20260320"}, keep_two, now)
    with pytest.raises(
        PartitionSpecInvalidError, match=r"'20260312' of table db\.t is out-of-date.*'20260313'"
    ):
        validate_auto_partition_time(path, ["dt"], {"dt": "20260312"}, keep_two, now)
    with pytest.raises(PartitionSpecInvalidError, match="expected format 'yyyyMMdd'"):
        validate_auto_partition_time(path, ["dt"], {"dt": "2026-03-12"}, keep_two, now)
    # no retention, or no auto-partitioning: any old value may be created
    forever = {**auto, "table.auto-partition.num-retention": "-1"}
    validate_auto_partition_time(path, ["dt"], {"dt": "19990101"}, forever, now)
    validate_auto_partition_time(path, ["dt"], {"dt": "anything"}, {}, now)
