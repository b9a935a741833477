"""The Python snippets of README.md and docs/*.md: each is valid Python (top-level await allowed), its
imports resolve to names that exist, and every class-like name it uses (capitalised) is imported or
defined by it or by an earlier snippet of the same page, so a reader copying it knows where it comes
from. (A snippet may use lowercase names set up in the prose: `conn`, `table`, `spark`...)"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?:python|py)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
BUILTINS = set(dir(builtins))


def snippets(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in FENCE.finditer(text)]


def parse(code: str, where: str) -> ast.Module:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree: ast.Module = compile(code, where, "exec", flags=flags, dont_inherit=True)
    return tree


def import_problems(tree: ast.Module, where: str) -> list[str]:
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                try:
                    importlib.import_module(alias.name)
                except ImportError as e:
                    problems.append(f"{where}: import {alias.name}: {e}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                problems.append(f"{where}: from {node.module}: {e}")
                continue
            for alias in node.names:
                if alias.name == "*" or hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")  # a submodule
                except ImportError:
                    problems.append(f"{where}: {node.module} has no {alias.name}")
    return problems


def defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_snippets_compile_and_their_names_exist(page: Path) -> None:
    problems: list[str] = []
    known = set(BUILTINS)
    for line, code in snippets(page):
        where = f"{page.name}:{line}"
        try:
            tree = parse(code, where)
        except SyntaxError as e:
            problems.append(f"{where}: not valid Python: {e}")
            continue
        problems += import_problems(tree, where)
        known |= defined_names(tree)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unknown = sorted(name for name in used - known if name[:1].isupper())
        if unknown:
            problems.append(f"{where}: uses {unknown} without importing them")
    assert not problems, "\n".join(problems)


def test_the_check_finds_what_it_should() -> None:
    tree = parse("from strom.client import NoSuchName\nimport no_such_module\n", "probe")
    assert len(import_problems(tree, "probe")) == 2
    assert "TableBucket" not in defined_names(parse("x = TableBucket(1, None, 0)", "probe"))
