"""docs/configuration.md is generated from the option catalogue and must not drift from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_page_matches_the_catalogue() -> None:
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "configuration.md").read_text() == module.render(), (
        "docs/configuration.md is stale: run .venv/bin/python scripts/gen_config_docs.py"
    )
