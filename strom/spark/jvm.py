"""Strom's JVM glue for Spark SQL: a few Java classes compiled here, against pyspark's own jars.

Spark resolves ``USING fluss`` and SQL catalogs to JVM classes only; these classes hand all real
work back to the Python data source (and, for catalog metadata, to Python on the driver). The jar
is built with the JDK that runs Spark (``javac``) when it is missing or older than its sources, by
`make` and by `strom.spark.session()`; nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "java"
JAR = SOURCES / "strom-spark.jar"

_lock = threading.Lock()


class JvmBuildError(RuntimeError):
    """The Java glue could not be compiled (no JDK, or a compile error)."""


def _source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file() and p != JAR and p.suffix != ".tmp")


def _stale() -> bool:
    if not JAR.exists():
        return True
    built = JAR.stat().st_mtime
    return any(p.stat().st_mtime > built for p in _source_files())


def _spark_classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return str(jars / "*")


def _tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise JvmBuildError(
            f"Strom's Spark SQL glue needs '{name}' from a JDK (17 or later) to compile "
            f"{SOURCES}; none was found on PATH or in JAVA_HOME."
        )
    return found


def build() -> Path:
    """Compile the Java sources into `JAR` (replaced atomically)."""
    java = [str(p) for p in _source_files() if p.suffix == ".java"]
    with tempfile.TemporaryDirectory(prefix="strom-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        compiled = subprocess.run(
            [
                _tool("javac"),
                "--release",
                "17",
                "-nowarn",
                "-cp",
                _spark_classpath(),
                "-d",
                str(classes),
                *java,
            ],
            capture_output=True,
            text=True,
        )
        if compiled.returncode != 0:
            raise JvmBuildError(f"javac failed on {SOURCES}:\n{compiled.stderr.strip()}")
        for resource in _source_files():
            if resource.suffix != ".java":
                target = classes / resource.relative_to(SOURCES)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(resource, target)
        partial = JAR.with_suffix(".jar.tmp")
        packed = subprocess.run(
            [_tool("jar"), "--create", "--file", str(partial), "-C", str(classes), "."],
            capture_output=True,
            text=True,
        )
        if packed.returncode != 0:
            raise JvmBuildError(f"jar failed:\n{packed.stderr.strip()}")
        os.replace(partial, JAR)
    return JAR


def ensure_jar() -> Path:
    """The jar, built first when it is missing or older than its sources."""
    with _lock:
        if _stale():
            build()
    return JAR


if __name__ == "__main__":
    try:
        print(ensure_jar())
    except JvmBuildError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
