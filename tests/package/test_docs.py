"""The front door stays short, the reference pages cannot drift from ``--help``, and every
link in README.md and docs/ points at a file that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_front_door() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 10 * 1024, f"README.md is {size} bytes: move detail into docs/"


@pytest.mark.parametrize("page", ["options.md", "cli.md"])
def test_reference_page_equals_what_help_prints(page: str) -> None:
    expected = _generator().PAGES[page]()
    actual = (DOCS / page).read_text(encoding="utf-8")
    assert actual == expected, f"docs/{page} is out of date: run python docs/generate.py"


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
