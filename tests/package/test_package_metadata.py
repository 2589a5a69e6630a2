"""What installing the package and reading its sources meet: no deprecated metadata,
ranged pins, citations of files that exist."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project: dict[str, object] = tomllib.load(handle)["project"]
    return project


def test_license_is_an_spdx_expression() -> None:
    """A ``license`` table is deprecated by setuptools (a warning on every install)."""
    assert _project()["license"] == "MIT"
    assert not any(str(c).startswith("License ::") for c in _project().get("classifiers", []))  # type: ignore[attr-defined]


def test_no_dependency_is_pinned_exactly() -> None:
    deps = list(_project()["dependencies"])  # type: ignore[call-overload]
    extras = _project()["optional-dependencies"]
    deps += [d for group in extras.values() for d in group]  # type: ignore[attr-defined]
    assert deps and [d for d in deps if "==" in d] == []


def test_sources_cite_only_files_in_the_repository() -> None:
    """``shared/reference/...`` is the authors' notes, not shipped: cite what a reader has."""
    cited = []
    for path in [*ROOT.glob("pytest_tokperf/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        if path.name == Path(__file__).name:
            continue
        cited += [f"{path.relative_to(ROOT)}: {m}" for m in
                  re.findall(r"shared/reference/\S+", path.read_text(encoding="utf-8"))]
    assert cited == []


def test_reference_runs_readme_documents_the_cli() -> None:
    text = (ROOT / "db" / "runs" / "README.md").read_text(encoding="utf-8")
    assert "tokperf import" in text and "tokperf save-reference" in text
    assert "write_reference_run(" not in text and "load_reference_runs(" not in text
    mentioned = re.findall(r"`(pytest_tokperf/[\w/]+\.py)`", text)
    assert mentioned and all((ROOT / m).is_file() for m in mentioned)


def test_sources_cite_docs_and_scripts_that_exist() -> None:
    """A page or script named in the package or the tests (a docs/ page, a script in
    benchmarks/perf/ or lab/drivers/) is one a reader finds."""
    cited = []
    pattern = r"(?<![\w/.-])((?:docs|lab|benchmarks/perf|benchmarks/device)/[\w/.-]*\w\.(?:md|py))"
    for path in [*ROOT.glob("pytest_tokperf/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        if path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        cited += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(pattern, text)
                  if not (ROOT / m).exists()]
    assert cited == []
