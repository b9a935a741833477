"""Where tiering splits run: on Spark executors, or in this process (tests and tiny deployments)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from strom.common.table_descriptor import TableInfo
from strom.lake.interface import WriteResult
from strom.spark.tiering.split_task import write_split
from strom.spark.tiering.tiering_splits import TieringSplit


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
    """Runs splits in this process, on a few threads: reading buckets and writing Parquet spend most of
    their time in Arrow and the network, outside the GIL, so splits overlap as Spark tasks would."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1

    def run(
        self,
        splits: Sequence[TieringSplit],
        table_info: TableInfo,
        client: Mapping[str, str],
        lake_format: str,
        lake_properties: Mapping[str, str],
    ) -> list[WriteResult]:
        if len(splits) <= 1 or self.workers == 1:
            return [write_split(s, table_info, client, lake_format, lake_properties) for s in splits]
        with ThreadPoolExecutor(min(self.workers, len(splits)), thread_name_prefix="tiering-split") as pool:
            return list(
                pool.map(lambda s: write_split(s, table_info, client, lake_format, lake_properties), splits)
            )


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
