"""The lake options the coordinator shows in the properties of lake-enabled tables (as Fluss does)."""

from __future__ import annotations

import json

from strom.common.config import Configuration
from strom.server.coordinator.table_lake_options import table_lake_options, with_lake_options


def test_lake_options_of_the_cluster_without_secrets() -> None:
    config = Configuration(
        {
            "datalake.format": "iceberg",
            "datalake.iceberg.type": "sql",
            "datalake.iceberg.uri": "sqlite:///c.db",
            "datalake.iceberg.s3.secret-access-key": "hidden",
            "datalake.iceberg.s3.access-key-id": "hidden",
            "datalake.iceberg.jdbc.password": "hidden",
            "datalake.iceberg.token": "hidden",
            "datalake.paimon.warehouse": "/other",
        }
    )
    assert table_lake_options(config) == {
        "table.datalake.iceberg.type": "sql",
        "table.datalake.iceberg.uri": "sqlite:///c.db",
    }
    assert table_lake_options(Configuration({"datalake.iceberg.uri": "x"})) == {}


def test_only_lake_enabled_tables_show_them() -> None:
    lake = {"table.datalake.iceberg.uri": "sqlite:///c.db"}
    enabled = json.dumps(
        {"properties": {"table.datalake.enabled": "true", "table.datalake.format": "iceberg"}}
    )
    shown = json.loads(with_lake_options(enabled.encode(), lake))["properties"]
    assert shown == {"table.datalake.enabled": "true", "table.datalake.format": "iceberg", **lake}
    plain = json.dumps({"properties": {"table.replication.factor": "1"}}).encode()
    assert with_lake_options(plain, lake) == plain
    assert with_lake_options(enabled.encode(), {}) == enabled.encode()
