"""A llama-server not built here: on PATH, in a package manager's folder, or given.

``install-engine llama-server`` without a release looks for one before it compiles
(``install.install_default``); it must answer ``--version``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.cmake import binary_version, version_text

PREBUILT_PLACES: tuple[str, ...] = (
    "/opt/homebrew/bin",  # Homebrew, Apple silicon
    "/usr/local/bin",  # Homebrew on Intel macs; make install
    "/home/linuxbrew/.linuxbrew/bin",
    "~/.linuxbrew/bin",
    "/usr/bin",  # apt (Debian's llama.cpp package)
    "~/miniforge3/bin",  # conda-forge's llama.cpp
    "~/miniconda3/bin",
    "~/anaconda3/bin",
    "/opt/conda/bin",
)
"""Where package managers put llama-server, searched after PATH and ``$CONDA_PREFIX/bin``."""


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """A llama-server not built here that answers ``--version``."""

    binary: Path
    version: str
    """``b5002 (abc1234)``, else the first line of its ``--version``."""
    where: str
    """How it was found: ``on PATH``, ``in /opt/homebrew/bin``, ``given``."""


def prebuilt_places(places: Sequence[str] | None = None) -> list[Path]:
    """The folders ``find_prebuilt`` looks in after PATH, in order."""
    conda = os.environ.get("CONDA_PREFIX")
    found = [Path(conda) / "bin"] if conda else []
    return [*found, *(Path(p).expanduser() for p in (PREBUILT_PLACES if places is None else places))]


def check_prebuilt(binary: Path, where: str = "given") -> Prebuilt | None:
    """``binary`` as a Prebuilt if it answers ``--version`` (in 10 s), else None."""
    text = version_text(binary, timeout_s=10.0)
    if text is None:
        return None
    version = binary_version(binary, timeout_s=10.0) or text.strip().splitlines()[0]
    return Prebuilt(binary.absolute(), version, where)


def find_prebuilt(places: Sequence[str] | None = None) -> Prebuilt | None:
    """The first llama-server on PATH, else in ``prebuilt_places``, that answers
    ``--version``; None when there is none."""
    seen: set[Path] = set()
    on_path = shutil.which("llama-server")
    candidates = [(Path(on_path), "on PATH")] if on_path else []
    candidates += [(folder / "llama-server", f"in {folder}") for folder in prebuilt_places(places)]
    for binary, where in candidates:
        try:
            real = binary.resolve()
        except OSError:
            continue
        if real in seen or not binary.is_file():
            continue
        seen.add(real)
        found = check_prebuilt(binary, where)
        if found is not None:
            return found
    return None
