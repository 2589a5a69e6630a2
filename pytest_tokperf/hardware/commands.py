"""Running the small system commands detection reads; providers take a ``Runner``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

Runner = Callable[[Sequence[str]], "str | None"]
"""Runs a command; returns its stdout, or None when it is missing, fails or times out."""

TextReader = Callable[[str], "str | None"]
"""Reads a text file; returns None when it is missing or unreadable."""


def run_command(argv: Sequence[str], timeout_s: float = 10.0) -> str | None:
    """stdout and stderr of ``argv`` (process group killed at ``timeout_s``), or None."""
    from pytest_tokperf.helper_runs import run_helper

    if shutil.which(argv[0]) is None:
        return None
    done = run_helper(argv, timeout_s, stderr=False)
    if done is None or done.returncode != 0:
        return None
    return done.text


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
