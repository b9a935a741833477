"""Which environment defaults strom.spark.session sets before Spark starts, for which masters."""

from __future__ import annotations

import os
import sys

import pytest

from strom.spark.session import is_loopback, prepare_environment

VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # restored afterwards
    return monkeypatch


def environment() -> dict[str, str | None]:
    return {v: os.environ.get(v) for v in VARIABLES}


@pytest.mark.parametrize("master", ["local[2]", "local", "spark://127.0.0.1:7077", "spark://localhost:7077"])
def test_local_and_loopback_masters_run_executors_on_this_interpreter(
    clean_env: pytest.MonkeyPatch, master: str
) -> None:
    prepare_environment(master, {})
    assert environment() == {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://api.example:6443"])
def test_cluster_masters_keep_spark_defaults(clean_env: pytest.MonkeyPatch, master: str) -> None:
    prepare_environment(master, {})
    assert environment() == {
        "PYSPARK_PYTHON": None,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": None,
    }


def test_what_the_user_set_is_kept_and_explicit_settings_win(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    clean_env.setenv("SPARK_LOCAL_IP", "10.0.0.3")
    prepare_environment("local[2]", {})
    assert environment()["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    assert environment()["SPARK_LOCAL_IP"] == "10.0.0.3"
    # spark.pyspark.python reaches the executors only through the variable (as spark-submit does it)
    prepare_environment("spark://127.0.0.1:7077", {"spark.pyspark.python": "./env/bin/python"})
    assert environment()["PYSPARK_PYTHON"] == "./env/bin/python"


def test_loopback_detection() -> None:
    assert is_loopback("spark://127.0.0.1:7077") and is_loopback("spark://localhost:7077")
    assert (
        not is_loopback("spark://10.0.0.5:7077") and not is_loopback("local[2]") and not is_loopback("yarn")
    )
