"""The front door stays short, the reference pages cannot drift from ``--help``, the docs
hold conclusions while the lab holds the runs, and every link points at a file that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LAB = ROOT / "lab"
GENERATED = {"options.md", "cli.md"}
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")
RUN_LOG = re.compile("|".join([
    r"(?<!lab/)\b20\d\d-\d\d-\d\d\b",  # 2026-12-01, but not a link to a lab entry
    rf"\b\d{{1,2}}\s+(?:{MONTHS})\b", rf"\b(?:{MONTHS})\s+\d{{1,2}}\b",   # 4 December, December 4
    (r"\b(?:second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
     r"thirteenth|fourteenth|fifteenth|\d+(?:st|nd|rd|th))\s+session\b"),  # thirteenth session
    r"\bload\s+averages?\b", r"\bthis\s+VM\b",
    r"\b\d+\s+of\s+\d+\s+(?:runs|sessions|A/Bs)\b",                       # 17 of 18 runs
]), re.IGNORECASE)
"""What a dated run log looks like; such text belongs in a lab/ entry."""


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hand_written() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED)]


def _lab_entries() -> list[Path]:
    return sorted(LAB.glob("20*.md"))


def test_readme_is_a_front_door() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 8 * 1024, f"README.md is {size} bytes: move detail into docs/"


def test_the_hand_written_docs_stay_a_manual() -> None:
    size = sum(len(p.read_bytes()) for p in _hand_written() if p.parent == DOCS)
    assert size <= 120 * 1024, f"docs/ (generated pages aside) is {size} bytes: runs go to lab/"


def test_no_page_holds_a_dated_run_log() -> None:
    found = []
    for page in _hand_written():
        text = page.read_text(encoding="utf-8")
        for match in RUN_LOG.finditer(text.replace("\n", " ")):  # a phrase may wrap
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{page.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert found == [], "dated runs belong in a lab/ entry, the rule in the docs"


def test_the_run_log_pattern_knows_a_run_log() -> None:
    for text in ["measured on 1 December 2026", "2026-12-04", "the thirteenth session",
                 "load average 7.5-8.7", "found in 17 of 18 runs", "on this VM"]:
        assert RUN_LOG.search(text), text
    for text in ["an A/B of 200 pairs resolves about ±2%", "the first session creates the tables",
                 "3 sessions a side", "127.0.0.1:8080"]:
        assert not RUN_LOG.search(text), text


def test_every_lab_entry_is_a_question_with_its_reproduce_line() -> None:
    entries = _lab_entries()
    assert entries, "lab/ has no entries"
    index = (LAB / "README.md").read_text(encoding="utf-8")
    for entry in entries:
        assert re.fullmatch(r"20\d\d-\d\d-\d\d-[a-z0-9-]+\.md", entry.name), entry.name
        text = entry.read_text(encoding="utf-8")
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        assert headings == ["Question", "Reproduce", "Figures", "Conclusion"], entry.name
        reproduce = text.split("## Reproduce", 1)[1].split("## Figures", 1)[0]
        script = r"(?<![\w/.])((?:[\w.-]+/)*[\w.-]+\.(?:py|sh)|\.ci/[\w-]+)\b"
        scripts = re.findall(script, reproduce)
        assert scripts, f"{entry.name}: its reproduce lines name no script"
        missing = [s for s in scripts if not (ROOT / s).exists()]
        assert missing == [], f"{entry.name}: the reproduce lines name scripts that do not exist"
        assert f"]({entry.name})" in index, f"lab/README.md does not index {entry.name}"


def test_lab_drivers_are_not_the_products_benchmarks() -> None:
    """benchmarks/perf/ measures the tool's own cost; studies live in lab/drivers/."""
    studies = {"bench_ab.py", "bench_ab_phase.py", "bench_layers.py", "bench_releases_ab.py",
               "bench_release_pairs.py", "bench_bands.py", "bench_stats.py"}
    assert studies & {p.name for p in (ROOT / "benchmarks" / "perf").glob("*.py")} == set()
    assert (LAB / "drivers" / "fit_bands.py").is_file()


@pytest.mark.parametrize("page", ["options.md", "cli.md"])
def test_reference_page_equals_what_help_prints(page: str) -> None:
    expected = _generator().PAGES[page]()
    actual = (DOCS / page).read_text(encoding="utf-8")
    assert actual == expected, f"docs/{page} is out of date: run python docs/generate.py"


def test_every_relative_link_resolves() -> None:
    broken = []
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), *LAB.glob("*.md"),
             ROOT / "db" / "README.md", ROOT / "db" / "runs" / "releases-ab" / "README.md",
             ROOT / "benchmarks" / "device" / "README.md"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
