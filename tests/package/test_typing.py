"""STYLE asks for strict typing: mypy --strict over the package is part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_package_passes_mypy_strict() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True)  # files and --strict come from pyproject.toml
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_unused_or_undefined_names() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F",
                           "pytest_tokperf", "tests", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
