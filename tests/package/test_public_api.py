"""The public API is written once: ``_PUBLIC`` maps each name to its module, ``__all__``
is derived from it, and the ``TYPE_CHECKING`` imports (what type checkers see) must name
the same modules and names. The library's ground floor loads no pytest."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _type_checking_names(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign):  # __version__, loaded by __getattr__
                    continue
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                for alias in stmt.names:
                    assert alias.asname == alias.name, f"{alias.name} needs 'as {alias.name}'"
                    names[alias.name] = stmt.module
    return names


@pytest.mark.parametrize("package", ["pytest_tokperf", "pytest_tokperf.stats"])
def test_lazy_map_all_and_type_checking_agree(package: str) -> None:
    module = importlib.import_module(package)
    public = module._PUBLIC
    assert module.__all__ == sorted(public)
    init = ROOT.joinpath(*package.split("."), "__init__.py")
    assert _type_checking_names(init) == public
    for name, where in public.items():  # every name loads from the module it is mapped to
        assert getattr(module, name) is getattr(importlib.import_module(where), name)


@pytest.mark.parametrize("module", ["pytest_tokperf.cli", "pytest_tokperf.errors",
                                    "pytest_tokperf.cli.main"])
def test_the_cli_loads_no_pytest(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if m == 'pytest' or m.startswith('_pytest')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
