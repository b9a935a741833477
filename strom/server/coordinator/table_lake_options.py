"""The lake's connection options in the properties of lake-enabled tables, as Fluss serves them.

Fluss's coordinator shows every table with `table.datalake.enabled` the cluster's `datalake.<format>.*`
options as `table.datalake.<format>.*` properties (computed when the table is read, not stored, so a
reconfigured cluster shows its new catalog), leaving out options whose names look secret. Readers then
need nothing but the table: a Spark union read finds the lake catalog from the table alone.
"""

from __future__ import annotations

import json

from strom.common.config import Configuration
from strom.common.lake_enablement import cluster_lake_format, table_lake_enabled

# option names containing any of these are not shown (Fluss: password, secret, key; and tokens)
SENSITIVE_PARTS = ("password", "secret", "key", "token")


def table_lake_options(config: Configuration) -> dict[str, str]:
    """`table.datalake.<format>.*` from the cluster's `datalake.<format>.*` (empty without a lake)."""
    lake_format = cluster_lake_format(config)
    if lake_format is None:
        return {}
    prefix = f"datalake.{str(lake_format).lower()}."
    return {
        f"table.{key}": value
        for key, value in config.items()
        if key.startswith(prefix) and not any(part in key[len(prefix) :].lower() for part in SENSITIVE_PARTS)
    }


def with_lake_options(table_json: bytes, lake_options: dict[str, str]) -> bytes:
    """A stored table descriptor as served: with the lake options when the table is lake-enabled."""
    if not lake_options:
        return table_json
    descriptor = json.loads(table_json)
    properties = descriptor.get("properties") or {}
    if not table_lake_enabled(properties):
        return table_json
    descriptor["properties"] = {**properties, **lake_options}
    return json.dumps(descriptor).encode()
