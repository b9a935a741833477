"""Where tiering splits run: on Spark executors, or in this process (tests and tiny deployments)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from strom.common.table_descriptor import TableInfo
from strom.lake.interface import WriteResult
from strom.spark.tiering.split_writer import write_split
from strom.spark.tiering.splits import TieringSplit


class SplitRunner(Protocol):
    def run(
        self,
        splits: Sequence[TieringSplit],
        table_info: TableInfo,
        client: Mapping[str, str],
        lake_format: str,
        lake_properties: Mapping[str, str],
    ) -> list[WriteResult]: ...


class LocalSplitRunner:
    """Runs splits one after another in this process."""

    def run(
        self,
        splits: Sequence[TieringSplit],
        table_info: TableInfo,
        client: Mapping[str, str],
        lake_format: str,
        lake_properties: Mapping[str, str],
    ) -> list[WriteResult]:
        return [write_split(s, table_info, client, lake_format, lake_properties) for s in splits]


class SparkSplitRunner:
    """One Spark job per round: splits spread over a few partitions, write results collected.

    A failed task is retried by Spark; its half-written files are deleted by the writer, and a retried
    split writes new files, so a round's results never hold duplicates.
    """

    def __init__(self, spark: Any, parallelism: int | None = None) -> None:
        self.spark = spark
        self.parallelism = parallelism or max(1, spark.sparkContext.defaultParallelism)

    def run(
        self,
        splits: Sequence[TieringSplit],
        table_info: TableInfo,
        client: Mapping[str, str],
        lake_format: str,
        lake_properties: Mapping[str, str],
    ) -> list[WriteResult]:
        if not splits:
            return []
        properties = dict(lake_properties)
        client = dict(client)

        def run_partition(items: Any) -> Any:
            for split in items:
                yield write_split(split, table_info, client, lake_format, properties)

        partitions = min(self.parallelism, len(splits))
        rdd = self.spark.sparkContext.parallelize(list(splits), partitions)
        return list(rdd.mapPartitions(run_partition).collect())
