"""The one place that decides whether the lake is on: for the cluster, and for one table.

As in Fluss: a cluster that names a `datalake.format` binds every new table to that format (stamps
`table.datalake.format`, which changes how its keys are encoded), and creates lake tables in its
catalog. It accepts tables with `table.datalake.enabled` when `datalake.enabled` is true or, when
that is unset (the older behaviour), when a format is named; `datalake.enabled: false` pre-binds the
format without allowing lake tables yet. A table is tiered when its `table.datalake.enabled` is true.
A cluster without `datalake.format` (`strom local --lake-format none`) has no lake at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common import config as cfg
from strom.common.config import Configuration, DataLakeFormat


def cluster_lake_enabled(config: Configuration) -> bool:
    """Whether tables of this cluster may enable lake tiering."""
    explicit = config.get_optional(cfg.DATALAKE_ENABLED)
    if explicit is not None:
        return explicit
    return config.contains(cfg.DATALAKE_FORMAT)


def cluster_lake_format(config: Configuration) -> DataLakeFormat | None:
    """The format new tables are bound to; None: the cluster has no lake."""
    return config.get_optional(cfg.DATALAKE_FORMAT)


def table_lake_enabled(properties: Mapping[str, object]) -> bool:
    """Whether a table (its stored `properties`) is tiered into the lake."""
    return str(properties.get(cfg.TABLE_DATALAKE_ENABLED.key, "false")).strip().lower() == "true"
