"""One llama-server compile: sdist -> the build's work folder -> cmake through ccache -> binary.

cmake sees the work folder through one fixed path that every release's build goes through
in turn, so the paths in generated files match and ccache hits across releases. Output
goes to one log file whose path ends every error; the work folder is wiped before and
after every build.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_tokperf.builds.lock import building_at, clean
from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.releases import Release
from pytest_tokperf.builds.sdist import (
    SdistIdentity,
    disk_full,
    fetch_sdist,
    layout_flags,
    read_identity,
    unpack_tree,
)
from pytest_tokperf.errors import InstallError
from pytest_tokperf.results import Progress

CCACHE_LAUNCHER = ("-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A finished compile: the binary (in the work folder until moved) and its figures."""

    binary: Path
    flags: tuple[str, ...]
    """The flags used: the requested ones plus what the tree's layout needs."""
    identity: SdistIdentity
    seconds: float
    cpu_seconds: float
    ccache_hits: int | None
    ccache_misses: int | None


def version_text(binary: Path, timeout_s: float = 30.0) -> str | None:
    """``binary --version``'s output if it names a version in ``timeout_s``, else None."""
    from pytest_tokperf.helper_runs import run_helper

    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    proc = run_helper([str(binary), "--version"], timeout_s)
    if proc is None:
        return None
    text = proc.text
    # "version: 0.6.0-dev (build 11434, commit pypi-sdist)"; up to b9737 "version: 9093 (pypi-sdist)"
    return text if proc.returncode == 0 and re.search(r"\bversion:|\bbuild\b", text) else None


def binary_version(binary: Path, timeout_s: float = 30.0) -> str | None:
    """``llama-server --version`` -> ``"b11434 (pypi-sdist)"``, or None."""
    text = version_text(binary, timeout_s)
    if text is None:
        return None
    # "version: 0.6.0-dev (build 11434, commit pypi-sdist)"; older: "version: 4567 (abc1234)"
    match = re.search(r"build (\d+), commit ([^)\s]+)", text) or re.search(
        r"version:\s*(\d+)\s*\(([^)]*)\)", text
    )
    return f"b{match.group(1)} ({match.group(2)})" if match else None


BUILD_WARMUP_PCT = 5.0
"""The first percent of a compile (configure checks, ccache hits) do not set its pace."""

_MAKE_PCT = re.compile(r"\[\s*(\d+)%\]")
_NINJA_COUNT = re.compile(r"\[(\d+)/(\d+)\]")


def percent_of(line: str) -> float | None:
    """``[ 40%] Building ...`` (make) or ``[120/300] Building ...`` (ninja) -> 40.0."""
    match = _MAKE_PCT.match(line)
    if match:
        return float(match.group(1))
    match = _NINJA_COUNT.match(line)
    if match and int(match.group(2)) > 0:
        return 100.0 * int(match.group(1)) // int(match.group(2))
    return None


@dataclass(slots=True)
class BuildSteps:
    """Runs build steps into one log file; the build's own percent lines drive a meter
    (percent, elapsed, time left)."""

    log: Path
    progress: Progress
    label: str
    nice: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def __call__(self, cmd: list[str], step: str, *, counted: bool = False) -> None:
        """Run ``cmd`` as ``step``; ``counted``: it prints percent lines (else only timed)."""
        self.progress(f"{self.label}: {step}")
        with open(self.log, "a", encoding="utf-8") as out, Meter(
                self.progress, f"{self.label}: {step}", 100.0 if counted else None,
                warmup=BUILD_WARMUP_PCT) as meter:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            try:
                proc = subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    errors="replace", env={**os.environ, **self.env},
                    preexec_fn=(lambda: os.nice(self.nice)) if self.nice else None,
                )
            except FileNotFoundError as exc:
                raise InstallError(
                    f"{self.label}: {cmd[0]!r} is not installed; install it (Debian: apt-get "
                    f"install cmake build-essential ccache) and run the same command again"
                ) from exc
            with proc:
                assert proc.stdout is not None
                first_error = ""
                for line in proc.stdout:
                    out.write(line)
                    if not first_error and re.search(r"\berror\b|No space left", line, re.I):
                        first_error = line.strip()
                    pct = percent_of(line)
                    if pct is not None and pct != meter.done:
                        meter.update(pct)
                code = proc.wait()
        if code != 0:
            if "No space left" in first_error:
                raise disk_full(self.log.parent, f"building {self.label}")
            raise InstallError(
                f"{self.label}: {step} failed (exit {code}): {first_error or 'see the log'}; "
                f"full log: {self.log}"
            )


def _ccache_stats(env: dict[str, str]) -> tuple[int, int] | None:
    """(hits, misses) so far in the ccache this build uses, or None without ccache."""
    try:
        proc = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                              timeout=30, check=False, env={**os.environ, **env})
    except (OSError, subprocess.TimeoutExpired):
        return None
    stats = dict(line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)
    try:
        hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
        return hits, int(stats.get("cache_miss", 0))
    except ValueError:
        return None


def check_free_space(where: Path, needed: int) -> None:
    """Refuse a build up front when the cache's disk cannot hold it."""
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed:
        raise InstallError(
            f"only {free / 1e9:.1f} GB free at {probe}; a llama-server build needs about "
            f"{needed / 1e9:.0f} GB: free space (old builds: {where}) or point "
            f"PYTEST_TOKPERF_CACHE at a larger disk"
        )


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_llama_server(
    release: Release, flags: tuple[str, ...], *, cache: Path, work: Path, here: Path,
    log: Path, jobs: int, progress: Progress, ccache_dir: Path | None, nice: int = 0,
) -> Compiled:
    """Build ``llama-server`` of ``release`` in ``work``, which cmake sees as the fixed
    path ``here`` (``ccache_dir`` None: no ccache)."""
    started, cpu_started = time.monotonic(), _children_cpu_s()
    label = f"llama-server {release.tag}"
    env: dict[str, str] = {"GIT_CEILING_DIRECTORIES": str(work.parent)}
    launcher: tuple[str, ...] = ()
    if ccache_dir is not None:
        env.update(CCACHE_DIR=str(ccache_dir), CCACHE_BASEDIR=str(here), CCACHE_NOHASHDIR="1")
        launcher = CCACHE_LAUNCHER
    step = BuildSteps(log, progress, label, nice, env)
    clean(work)  # an interrupted build's tree: never build on it
    try:
        archive = fetch_sdist(cache, release, log, progress)
        identity = read_identity(archive)
        progress(f"{label}: {identity.describe()}")
        used = (*flags, *layout_flags(unpack_tree(archive, work / "src")))
        queued = time.monotonic()
        with building_at(here, work, release.tag, progress):
            started += time.monotonic() - queued  # the turn of another build is not this one's
            before = _ccache_stats(env) if ccache_dir is not None else None
            built = cmake_llama_server(here / "src", here / "build", (*used, *launcher), step,
                                       jobs)
            after = _ccache_stats(env) if ccache_dir is not None else None
    except OSError as exc:
        clean(work)
        if exc.errno == errno.ENOSPC:
            raise disk_full(work.parent, f"building {label}; log: {log}") from exc
        raise InstallError(f"{label}: {exc}; full log: {log}") from exc
    except BaseException:
        clean(work)
        raise
    hits = misses = None
    if before is not None and after is not None:
        hits, misses = after[0] - before[0], after[1] - before[1]
    return Compiled(work / built.relative_to(here), used, identity, time.monotonic() - started,
                    round(_children_cpu_s() - cpu_started, 1), hits, misses)


def cmake_llama_server(tree: Path, build: Path, flags: tuple[str, ...], step: BuildSteps,
                       jobs: int) -> Path:
    """Configure ``tree`` into ``build`` and build the llama-server target; the binary,
    checked to answer ``--version`` (a release's sdist tree or a local llama.cpp tree)."""
    step(["cmake", "-S", str(tree), "-B", str(build), *flags], "configure")
    step(["cmake", "--build", str(build), "--config", "Release",
          "--target", "llama-server", f"-j{jobs}"], "build", counted=True)
    built = build / "bin" / "llama-server"
    version = version_text(built)
    with open(step.log, "a", encoding="utf-8") as out:
        out.write(f"\n$ {built} --version\n{version}\n")
    if version is None:
        raise InstallError(f"{step.label}: the build finished but {built} does not run "
                           f"`--version`; full log: {step.log}")
    return built
