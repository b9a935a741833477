"""Every declared option is read by some code, or carries a documented status; found by reading the
code (its syntax tree), not the docs.

A server, table or connector option counts as read where code inside a function or method of another
module names its constant (`options.DATA_DIR`, `cfg.TABLE_LOG_TTL`, ...) or its exact key string. A
client option counts as read where client-side code (`strom/client`, `strom/spark`, `strom/commands`)
reads the `ClientConfig` field it fills (`config.writer_acks`).
Module-level catalogues (`SERVER_OPTIONS`, `_OPTIONS`, frozensets of alterable keys), docstrings and
the declaring module itself do not count: a list that names an option does not honour it. An option
nothing reads must be in `config.ACCEPTED_WITHOUT_EFFECT`, whose options a starting server names in a
warning. `python tests/unit/test_option_audit.py` prints every option with its readers.
"""

from __future__ import annotations

import ast
import functools
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.client import config as client_config
from strom.common import config as cfg
from strom.common.config import Configuration
from strom.server.server_options import check_server_config

ROOT = Path(__file__).resolve().parents[2]
STROM = ROOT / "strom"
DECLARING = frozenset({STROM / "common" / "config.py", STROM / "client" / "config.py"})
# where ClientConfig fields are read; a server's `zk.client_id` is no reading of `client.id`
CLIENT_SIDE = (STROM / "client", STROM / "spark", STROM / "commands")

Uses = dict[str, list[tuple[Path, str]]]


@dataclass(frozen=True)
class Declared:
    name: str  # the constant's name
    key: str
    module: Path


def declared_options(declaring: frozenset[Path]) -> list[Declared]:
    found = []
    for path in sorted(declaring):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.AnnAssign | ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "ConfigOption"
            ):
                target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
                key = node.value.args[0]
                assert isinstance(target, ast.Name) and isinstance(key, ast.Constant)
                assert isinstance(key.value, str), f"{target.id}: the key is not a string literal"
                found.append(Declared(target.id, key.value, path))
    return found


def code_references(package: Path) -> tuple[Uses, Uses, Uses]:
    """Names, string constants and attribute names used inside functions, each with where (file:line)."""
    names: Uses = defaultdict(list)
    strings: Uses = defaultdict(list)
    attributes: Uses = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        if "gen" in path.relative_to(package).parts:  # generated protobuf code
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        }
        prefix = path.relative_to(package.parent).as_posix()
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                where = (path, f"{prefix}:{getattr(node, 'lineno', '?')}")
                if isinstance(node, ast.Name):
                    names[node.id].append(where)
                elif isinstance(node, ast.Attribute):
                    names[node.attr].append(where)
                    attributes[node.attr].append(where)
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docstrings
                ):
                    strings[node.value].append(where)
    return names, strings, attributes


def readers(
    package: Path, declaring: frozenset[Path], fields: dict[str, str], client_side: tuple[Path, ...]
) -> dict[str, list[str]]:
    """Every declared option's key -> where code reads it (empty: nothing does). `fields` maps a client
    option's key to the ClientConfig field it fills, read in the `client_side` directories."""
    names, strings, attributes = code_references(package)
    result: dict[str, list[str]] = {}
    for option in declared_options(declaring):
        found = [
            where
            for path, where in [*names.get(option.name, []), *strings.get(option.key, [])]
            if path != option.module
        ]
        field = fields.get(option.key)
        if field is not None:
            found += [
                where
                for path, where in attributes.get(field, [])
                if path not in declaring and any(path.is_relative_to(d) for d in client_side)
            ]
        result[option.key] = sorted(set(found))
    return result


@functools.cache
def strom_readers() -> dict[str, list[str]]:
    fields = {option.key: field for field, option in client_config._OPTIONS.items()}
    return readers(STROM, DECLARING, fields, CLIENT_SIDE)


# Client options accepted so that a Fluss client's settings work unchanged, without effect here
# (strom.client.config.NO_EFFECT says why; a connection created with one set logs a warning).
CLIENT_WITHOUT_EFFECT = frozenset(client_config.no_effect_notes())


def test_every_declared_option_is_read_or_has_a_documented_status() -> None:
    read = strom_readers()
    assert len(read) >= 121, "the audit lost track of the declared options"
    documented = cfg.ACCEPTED_WITHOUT_EFFECT.keys() | CLIENT_WITHOUT_EFFECT
    unread = sorted(k for k, where in read.items() if not where and k not in documented)
    assert not unread, (
        "declared options that no code reads (honour them, refuse them, or list them in "
        f"config.ACCEPTED_WITHOUT_EFFECT with the reason): {', '.join(unread)}"
    )


def test_options_listed_as_without_effect_are_really_unread() -> None:
    """A status must not outlive the change that honours the option."""
    read = strom_readers()
    for key in CLIENT_WITHOUT_EFFECT:
        # ClientConfig may still check its value (client.scanner.log.read-preference must be
        # local-first or remote-first); no other code may read it
        where = [w for w in read[key] if not w.startswith("strom/client/config.py:")]
        assert not where, f"{key} is read now ({where}): remove it from strom.client.config.NO_EFFECT"
    for key in cfg.ACCEPTED_WITHOUT_EFFECT:
        assert key in cfg.SERVER_OPTIONS, f"{key} is listed as without effect but is no server option"
        assert not read[key], f"{key} is listed as without effect, yet read at {read[key]}"


def test_a_server_names_each_option_without_effect_at_start(caplog: pytest.LogCaptureFixture) -> None:
    config = Configuration(
        {key: cfg.to_config_string(cfg.SERVER_OPTIONS[key].default) for key in cfg.ACCEPTED_WITHOUT_EFFECT}
    )
    with caplog.at_level(logging.WARNING, logger="strom.server.server_options"):
        check_server_config(config)
    for key, reason in cfg.ACCEPTED_WITHOUT_EFFECT.items():
        assert f"'{key}' is accepted for compatibility and has no effect: {reason}" in caplog.text


AUDITED_OPTIONS = """
A = ConfigOption("a.key", int, 1, "")
B = ConfigOption("b.key", int, 1, "")
C = ConfigOption("c.key", int, 1, "")
D = ConfigOption("d.key", int, 1, "")
E = ConfigOption("client.e", int, 1, "")
ALL = [A, B, C, D, E]


def own():
    return D
"""

AUDITED_USER = '''
import options

LISTED = [options.B]


def serve(config, client):
    """c.key and d.key are named in this docstring only"""
    return config.get(options.A), config.get("c.key"), client.e_field
'''


def test_the_audit_tells_a_read_option_from_a_listed_one(tmp_path: Path) -> None:
    """The audit itself can fail: an option named only in a module-level list, a docstring or its own
    module is unread; one read inside a function (by constant, key or client field) is read."""
    package = tmp_path / "pkg"
    package.mkdir()
    declaring = package / "options.py"
    declaring.write_text(AUDITED_OPTIONS)
    (package / "user.py").write_text(AUDITED_USER)
    found = readers(package, frozenset({declaring}), {"client.e": "e_field"}, (package,))
    assert found == {
        "a.key": ["pkg/user.py:9"],
        "b.key": [],
        "c.key": ["pkg/user.py:9"],
        "d.key": [],
        "client.e": ["pkg/user.py:9"],
    }


if __name__ == "__main__":  # pragma: no cover
    for key, where in sorted(strom_readers().items()):
        if key in cfg.ACCEPTED_WITHOUT_EFFECT:
            status = f"accepted without effect: {cfg.ACCEPTED_WITHOUT_EFFECT[key]}"
        elif key in CLIENT_WITHOUT_EFFECT:
            status = f"accepted without effect: {client_config.no_effect_notes()[key]}"
        else:
            status = "UNREAD"
        print(f"{key}: {', '.join(where) if where else status}")
