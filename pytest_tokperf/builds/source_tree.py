"""A local llama.cpp source tree built into llama-server, the way releases are built:
the releases' flags, through ccache, in a folder of the tool's cache that one fixed path
links to while it builds, so the compiler sees the same paths in every tree and sibling
copies of a tree share ccache's objects; a second build is cmake's incremental one. The
label and the binary's ``--version`` name the tree's own git commit, or its files'
fingerprint where the tree is no repository's top level (never an enclosing one's)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.cmake import CCACHE_LAUNCHER, BuildSteps, cmake_llama_server
from pytest_tokperf.builds.install import BASE_FLAGS
from pytest_tokperf.builds.lock import building_at, relink
from pytest_tokperf.builds.releases import PACKAGE
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
    """``<folder>@<commit>`` (``+dirty`` with uncommitted changes) where ``tree`` is a git
    repository's top level, else ``<folder>@files-<fingerprint>``."""
    commit = (_git(tree, "rev-parse", "--short=12", "HEAD")
              if _git(tree, "rev-parse", "--show-toplevel") == str(tree.resolve()) else None)
    if not commit:
        return f"{tree.name}@files-{tree_fingerprint(tree)}"
    dirty = _git(tree, "status", "--porcelain", "--untracked-files=no")
    return f"{tree.name}@{commit}{'+dirty' if dirty else ''}"


def tree_fingerprint(tree: Path) -> str:
    """12 hex digits of SHA-256 over the tree's file names and contents (its hidden and
    ``build*`` folders at the top aside: git's, editors', builds)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if root != str(tree) or not d.startswith((".", "build")))
        for name in sorted(files):
            path = Path(root, name)
            if path.is_file():
                digest.update(f"{path.relative_to(tree)}\0{path.stat().st_size}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def identity_flags(tree: Path, label: str) -> tuple[str, ...]:
    """What the binary reports: a repository's own commit (cmake asks git), else build
    number 0 (the release's where the tree sits in its unpacked sdist) and the fingerprint."""
    commit = label.rpartition("@")[2]
    if not commit.startswith("files-"):
        return ("-ULLAMA_BUILD_NUMBER", "-ULLAMA_BUILD_COMMIT")
    info = tree.parent / "PKG-INFO"
    text = info.read_text(encoding="utf-8", errors="replace") if info.is_file() else ""
    release = re.search(rf"(?ms)^Name: {PACKAGE}\s*$.*?^Version: (\d+)\.", text)
    return (f"-DLLAMA_BUILD_NUMBER={release.group(1) if release else 0}",
            f"-DLLAMA_BUILD_COMMIT={commit}")


def tree_build_dir(tree: Path, flags: tuple[str, ...]) -> Path:
    """The tree's folder in the cache (``src``: a link to the tree; ``build``): one per
    tree path and flags."""
    key = hashlib.sha256("\0".join([str(tree), *flags]).encode()).hexdigest()[:12]
    return engines_dir() / "trees" / f"{safe_name(tree.name)}-{key}"


def build_tree(tree: Path, *, jobs: int | None = None, progress: Progress = print,
               use_ccache: bool = True, nice: int = 0) -> TreeBuild:
    """Build ``tree``'s llama-server (incrementally where it was built before) through the
    one fixed path ``trees/building``, linked to the tree's folder for the build: cmake's
    unity files name their sources by absolute path, and those then match between trees."""
    tree = tree.expanduser().resolve()
    if not is_source_tree(tree):
        raise ConfigError(f"{str(tree)!r} is not a llama.cpp source tree (no CMakeLists.txt "
                          f"of llama.cpp in it): give the folder you cloned llama.cpp into")
    label = tree_label(tree)
    flags = (*BASE_FLAGS, *layout_flags(tree))
    work, here = tree_build_dir(tree, flags), engines_dir() / "trees" / "building"
    logs = engines_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"tree-{safe_name(label)}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    env = {"GIT_CEILING_DIRECTORIES": str(tree.parent)}
    launcher: tuple[str, ...] = ()
    if use_ccache and shutil.which("ccache") is not None:
        env.update(CCACHE_DIR=os.environ.get("CCACHE_DIR") or str(cache_root() / "ccache"),
                   CCACHE_BASEDIR=str(here), CCACHE_NOHASHDIR="1")
        launcher = CCACHE_LAUNCHER
    progress(f"building llama-server of {label} ({tree}) in {work}; log: {log}")
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    with building_at(here, work, label, progress):
        relink(work / "src", tree)
        cmake_llama_server(here / "src", here / "build",
                           (*flags, *identity_flags(tree, label), *launcher),
                           BuildSteps(log, progress, f"llama-server {label}", nice, env),
                           jobs or os.cpu_count() or 1)
    binary, seconds = work / "build" / "bin" / "llama-server", time.monotonic() - started
    progress(f"llama-server {label} built in {seconds:.0f} s: {binary}")
    return TreeBuild(label, binary, seconds, log)
