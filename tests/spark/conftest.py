"""One SparkSession for the whole test run: starting Spark costs seconds, a warm job milliseconds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import strom.spark

    session = strom.spark.session(app="strom-tests")
    yield session
    session.stop()
