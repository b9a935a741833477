from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cluster

from strom.server.launcher import free_port
from strom.server.zookeeper.local_server import LocalZooKeeper
from strom.spark.standalone import StandaloneCluster, start_standalone


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster (coordinator + 2 tablet servers) for tests that only create their own objects."""
    cluster = Cluster(tmp_path_factory.mktemp("shared-cluster"), tablet_servers=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    """One ZooKeeper server for the test run (clusters keep apart under root znodes of their own)."""
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"), free_port())
    server.start()
    try:
        server.wait_until_serving()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One Spark standalone cluster (a master and 2 workers, each its own JVM) for the test run. A test
    that kills a worker starts a replacement before it ends, so the next test finds 2 workers."""
    cluster = start_standalone(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=2)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def python_without_strom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python for Spark executors that has Strom's dependencies but cannot import `strom`: a venv
    whose site-packages adds ours as a plain path, so our editable install's finder (a .pth hook
    there) never runs. Executors must get `strom` from the zip the driver ships."""
    venv = tmp_path_factory.mktemp("executor-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = next((venv / "lib").glob("python3*/site-packages"))
    (site_packages / "strom_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


@pytest.fixture
def cluster_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[type]:
    """Private clusters for tests that kill or restart servers; `zookeeper=True` puts the metadata in
    the test run's ZooKeeper server, and allows several coordinators."""
    started: list[Cluster] = []

    def make(
        tablet_servers: int = 1,
        config: dict[str, str] | None = None,
        *,
        zookeeper: bool = False,
        coordinators: int = 1,
    ) -> Cluster:
        address = request.getfixturevalue("zookeeper").address if zookeeper else None
        cluster = Cluster(
            tmp_path / f"cluster-{len(started)}",
            tablet_servers,
            config,
            zookeeper=address,
            coordinators=coordinators,
        )
        started.append(cluster)
        return cluster.start()

    yield make  # type: ignore[misc]
    for cluster in started:
        cluster.stop()
