from datetime import timedelta

import pytest

from strom.common import config as cfg
from strom.common.config import (
    ArrowCompressionType,
    Configuration,
    DataLakeFormat,
    LogFormat,
    MemorySize,
    format_duration,
    format_memory_size,
    parse_duration,
    parse_memory_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3min", timedelta(minutes=3)),
        ("10 s", timedelta(seconds=10)),
        ("7 d", timedelta(days=7)),
        ("500ms", timedelta(milliseconds=500)),
        ("1h", timedelta(hours=1)),
        ("2 hours", timedelta(hours=2)),
        ("5 m", timedelta(minutes=5)),
        ("30 sec", timedelta(seconds=30)),
        ("  1 MIN ", timedelta(minutes=1)),
        ("250µs", timedelta(microseconds=250)),
        ("3000ns", timedelta(microseconds=3)),
        ("0ms", timedelta(0)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "match"), [("10", "time unit"), ("ms", "number"), ("5 weeks", "unit"), ("", "empty")]
)
def test_parse_duration_rejects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_duration(text)


def test_format_duration_uses_largest_exact_unit() -> None:
    assert format_duration(timedelta(minutes=10)) == "10 min"
    assert format_duration(timedelta(days=7)) == "7 d"
    assert format_duration(timedelta(milliseconds=1500)) == "1500 ms"
    assert parse_duration(format_duration(timedelta(seconds=90))) == timedelta(seconds=90)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024m", 1 << 30),
        ("2mb", 2 << 20),
        ("64 kb", 64 << 10),
        ("4k", 4096),
        ("1b", 1),
        ("10 bytes", 10),
        ("3 GB", 3 << 30),
        ("1t", 1 << 40),
    ],
)
def test_parse_memory_size(text: str, expected: int) -> None:
    assert parse_memory_size(text) == expected
    assert MemorySize.parse(text) == expected


@pytest.mark.parametrize("text", ["1024", "2 xb", "mb", "99999999999999999999b"])
def test_parse_memory_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory_size(text)


def test_format_memory_size() -> None:
    assert format_memory_size(1 << 30) == "1gb"
    assert format_memory_size(3072) == "3kb"
    assert format_memory_size(1500) == "1500b"
    assert str(MemorySize(128 << 20)) == "128mb"


def test_configuration_typed_get_and_defaults() -> None:
    conf = Configuration(
        {
            "table.log.format": "arrow",
            "table.datalake.format": "PAIMON",
            "kv.snapshot.interval": "5 min",
            "table.auto-partition.enabled": "TRUE",
            "default.bucket.number": "4",
        }
    )
    assert conf.get(cfg.TABLE_LOG_FORMAT) is LogFormat.ARROW
    assert conf.get(cfg.TABLE_DATALAKE_FORMAT) is DataLakeFormat.PAIMON
    assert conf.get(cfg.KV_SNAPSHOT_INTERVAL) == timedelta(minutes=5)
    assert conf.get(cfg.TABLE_AUTO_PARTITION_ENABLED) is True
    assert conf.get(cfg.DEFAULT_BUCKET_NUMBER) == 4
    # defaults
    assert conf.get(cfg.LOG_SEGMENT_FILE_SIZE) == 1 << 30
    assert conf.get(cfg.TABLE_LOG_ARROW_COMPRESSION_TYPE) is ArrowCompressionType.ZSTD
    assert conf.get(cfg.DEFAULT_REPLICATION_FACTOR) == 1
    assert conf.get(cfg.TABLE_MERGE_ENGINE) is None
    assert conf.get_optional(cfg.TABLE_LOG_TTL) is None and conf.get(cfg.TABLE_LOG_TTL) == timedelta(days=7)
    # plain mapping access still works
    assert conf["default.bucket.number"] == "4" and conf.get("missing") is None


def test_configuration_bad_value_names_the_key() -> None:
    conf = Configuration({"table.log.format": "parquet", "table.replication.factor": "two"})
    with pytest.raises(ValueError, match=r"table\.log\.format"):
        conf.get(cfg.TABLE_LOG_FORMAT)
    with pytest.raises(ValueError, match=r"table\.replication\.factor"):
        conf.get(cfg.TABLE_REPLICATION_FACTOR)


def test_configuration_set_writes_fluss_strings() -> None:
    conf = Configuration()
    conf.set(cfg.TABLE_LOG_TTL, timedelta(hours=2))
    conf.set(cfg.TABLE_DATALAKE_ENABLED, True)
    conf.set(cfg.TABLE_DATALAKE_FORMAT, DataLakeFormat.ICEBERG)
    assert conf.to_dict() == {
        "table.log.ttl": "2 h",
        "table.datalake.enabled": "true",
        "table.datalake.format": "iceberg",
    }


def test_fallback_keys() -> None:
    conf = Configuration({"netty.server.max-request-size": "64mb"})
    assert conf.get(cfg.RPC_MAX_FRAME_SIZE) == 64 << 20
    assert Configuration().get(cfg.RPC_MAX_FRAME_SIZE) == 32 << 20


def test_fluss_defaults() -> None:
    assert cfg.KV_SNAPSHOT_INTERVAL.default == timedelta(minutes=10)
    assert cfg.MAX_BUCKET_NUM.default == 4096 and cfg.MAX_PARTITION_NUM.default == 1000
    assert cfg.TABLE_DATALAKE_FRESHNESS.default == timedelta(minutes=3)
    assert cfg.TABLE_AUTO_PARTITION_NUM_PRECREATE.default == 2
    assert cfg.TABLE_AUTO_PARTITION_NUM_RETENTION.default == 7
    assert cfg.TABLE_TIERED_LOG_LOCAL_SEGMENTS.default == 2
    assert cfg.TABLE_LOG_ARROW_COMPRESSION_ZSTD_LEVEL.default == 3


def test_catalogues() -> None:
    assert all(k.startswith("table.") for k in cfg.TABLE_OPTIONS)
    assert "table.merge-engine.versioned.ver-column" in cfg.TABLE_OPTIONS
    assert "bucket.num" not in cfg.TABLE_OPTIONS and "bucket.num" in cfg.CONNECTOR_OPTIONS
    assert not any(k.startswith("table.") for k in cfg.SERVER_OPTIONS)
    for option in [*cfg.TABLE_OPTIONS.values(), *cfg.SERVER_OPTIONS.values(), *cfg.CLIENT_OPTIONS.values()]:
        assert option.description
        if option.default is not None:
            # every default survives a trip through its string form
            assert option.parse(cfg.to_config_string(option.default)) == option.default
