"""A local llama.cpp source tree built into llama-server, the way releases are built.

The tree is configured and built with the release builds' target-only flags through
ccache (``cmake.cmake_llama_server``) into a folder in the tool's cache, never inside the
tree; a second build of the same tree is cmake's incremental one. The build is labelled
by the tree's folder and git commit (``llama.cpp@1a2b3c4d5e6f``, ``+dirty`` with
uncommitted changes).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.cmake import CCACHE_LAUNCHER, BuildSteps, cmake_llama_server
from pytest_tokperf.builds.install import BASE_FLAGS
from pytest_tokperf.builds.sdist import layout_flags
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.paths import cache_root, engines_dir
from pytest_tokperf.results import Progress
from pytest_tokperf.safe_files import safe_name


@dataclass(frozen=True, slots=True)
class TreeBuild:
    """A source tree's llama-server, freshly (re)built."""

    label: str
    binary: Path
    seconds: float
    log: Path


def is_source_tree(path: Path) -> bool:
    """A folder that holds llama.cpp's sources: a CMakeLists.txt naming the project."""
    cmake = path / "CMakeLists.txt"
    try:
        return cmake.is_file() and "llama" in cmake.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _git(tree: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def tree_label(tree: Path) -> str:
    """``<folder>@<commit>`` (``+dirty`` with uncommitted changes), or the folder alone."""
    commit = _git(tree, "rev-parse", "--short=12", "HEAD")
    if not commit:
        return tree.name
    dirty = _git(tree, "status", "--porcelain", "--untracked-files=no")
    return f"{tree.name}@{commit}{'+dirty' if dirty else ''}"


def tree_build_dir(tree: Path, flags: tuple[str, ...]) -> Path:
    """The cache folder this tree builds into: one per tree path and flags."""
    key = hashlib.sha256("\0".join([str(tree), *flags]).encode()).hexdigest()[:12]
    return engines_dir() / "trees" / f"{safe_name(tree.name)}-{key}"


def build_tree(tree: Path, *, jobs: int | None = None, progress: Progress = print,
               use_ccache: bool = True, nice: int = 0) -> TreeBuild:
    """Build ``tree``'s llama-server (incrementally where it was built before)."""
    tree = tree.expanduser().resolve()
    if not is_source_tree(tree):
        raise ConfigError(f"{str(tree)!r} is not a llama.cpp source tree (no CMakeLists.txt "
                          f"of llama.cpp in it): give the folder you cloned llama.cpp into")
    label = tree_label(tree)
    flags = (*BASE_FLAGS, *layout_flags(tree))
    build = tree_build_dir(tree, flags)
    logs = engines_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"tree-{safe_name(label)}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    env: dict[str, str] = {}
    launcher: tuple[str, ...] = ()
    if use_ccache and shutil.which("ccache") is not None:
        env.update(CCACHE_DIR=os.environ.get("CCACHE_DIR") or str(cache_root() / "ccache"),
                   CCACHE_BASEDIR=str(tree), CCACHE_NOHASHDIR="1")
        launcher = CCACHE_LAUNCHER
    progress(f"building llama-server of {label} ({tree}) into {build}; log: {log}")
    started = time.monotonic()
    binary = cmake_llama_server(tree, build, (*flags, *launcher),
                                BuildSteps(log, progress, f"llama-server {label}", nice, env),
                                jobs or os.cpu_count() or 1)
    seconds = time.monotonic() - started
    progress(f"llama-server {label} built in {seconds:.0f} s: {binary}")
    return TreeBuild(label, binary, seconds, log)
