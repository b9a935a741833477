"""The `strom.zip` shipped to Spark executors: a Python that only has it and Strom's dependencies (no
site hooks, so not our editable install) imports every module of the package from it."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from strom.spark.shipping import build_package_zip, package_root

IMPORT_ALL = """
import importlib, pkgutil, sys
sys.path[:0] = sys.argv[1:]
import strom
assert ".zip" in strom.__file__, strom.__file__
names = [m.name for m in pkgutil.walk_packages(strom.__path__, "strom.") if m.name != "strom.__main__"]
for name in names:
    importlib.import_module(name)
print(len(names))
"""


def test_every_module_imports_from_the_zip(tmp_path: Path) -> None:
    archive = build_package_zip(tmp_path)
    dependencies = sysconfig.get_paths()["purelib"]
    result = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_ALL, str(archive), dependencies],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    on_disk = [p for p in package_root().rglob("*.py") if "__pycache__" not in p.parts]
    assert int(result.stdout) >= len(on_disk) - 2  # every module but __main__ (and strom itself)
