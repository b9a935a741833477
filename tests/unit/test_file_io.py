"""One seam for remote storage: `strom.common.file_io` resolves every location, and no other module
of Strom talks to fsspec directly."""

from __future__ import annotations

import re
from pathlib import Path

from strom.common.file_io import load_file_io

STROM = Path(__file__).resolve().parents[2] / "strom"


def test_only_the_seam_imports_fsspec() -> None:
    importers = [
        str(path.relative_to(STROM.parent))
        for path in STROM.rglob("*.py")
        if re.search(r"^\s*(import fsspec|from fsspec)", path.read_text(), re.MULTILINE)
    ]
    assert importers == ["strom/common/file_io.py"]


def test_local_paths_and_urls_resolve_to_the_same_file(tmp_path: Path) -> None:
    target = tmp_path / "segment.log"
    target.write_bytes(b"batches")
    for location in (str(target), f"file://{target}"):
        io = load_file_io(location)
        with io.fs.open(io.path, "rb") as f:
            assert f.read() == b"batches"
    memory = load_file_io("memory://strom-file-io-test/a.bin")
    memory.fs.pipe_file(memory.path, b"x")
    assert load_file_io("memory://strom-file-io-test/a.bin").fs.cat_file(memory.path) == b"x"
