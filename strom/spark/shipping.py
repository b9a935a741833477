"""What a Spark cluster's executors need from the driver: the `strom` package as a zip for
`spark.submit.pyFiles`, so executors on hosts without Strom installed import it from there.

Third-party dependencies (pyarrow, pyiceberg, pypaimon, ...) are not in the zip: executors need them in
their Python already, or a packed environment shipped with `spark.archives` (docs/spark.md).
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import strom

ZIP_NAME = "strom.zip"


def package_root() -> Path:
    """The directory holding the `strom` package this process imports."""
    return Path(strom.__file__).resolve().parent


def build_package_zip(directory: Path | None = None) -> Path:
    """`strom.zip` (the package's sources and data files, no bytecode) in `directory` (a fresh
    temporary directory by default); written to a temporary name and renamed, so a reader never sees
    half a zip."""
    directory = directory or Path(tempfile.mkdtemp(prefix="strom-pyfiles-"))
    directory.mkdir(parents=True, exist_ok=True)
    root = package_root()
    target = directory / ZIP_NAME
    partial = directory / f".{ZIP_NAME}.{os.getpid()}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            archive.write(path, Path("strom") / path.relative_to(root))
    os.replace(partial, target)
    return target


def with_package(conf: dict[str, str], directory: Path | None = None) -> dict[str, str]:
    """`conf` with the strom zip added to `spark.submit.pyFiles` (after the user's own files); as it is
    when this process imports `strom` from a zip already (spark-submit --py-files shipped it)."""
    if not package_root().is_dir():
        return conf
    existing = [p for p in conf.get("spark.submit.pyFiles", "").split(",") if p]
    return {**conf, "spark.submit.pyFiles": ",".join([*existing, str(build_package_zip(directory))])}


def add_package(context: Any) -> None:
    """Ship the strom zip through a running SparkContext (`addPyFile`), unless this process imports
    `strom` from a zip already (spark-submit --py-files shipped it)."""
    if package_root().is_dir():
        context.addPyFile(str(build_package_zip()))
