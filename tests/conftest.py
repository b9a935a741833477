from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cluster


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster (coordinator + 2 tablet servers) for tests that only create their own objects."""
    cluster = Cluster(tmp_path_factory.mktemp("shared-cluster"), tablet_servers=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[type]:
    """Private clusters for tests that kill or restart servers."""
    started: list[Cluster] = []

    def make(tablet_servers: int = 1, config: dict[str, str] | None = None) -> Cluster:
        cluster = Cluster(tmp_path / f"cluster-{len(started)}", tablet_servers, config).start()
        started.append(cluster)
        return cluster

    yield make  # type: ignore[misc]
    for cluster in started:
        cluster.stop()
