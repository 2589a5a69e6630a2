"""A build's identity: the release its binary reports, its SHA-256 and its build flags.

``label`` tells apart builds of one release by their non-default flags or short hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pytest_tokperf.builds.cmake import binary_version
from pytest_tokperf.builds.sdist import file_sha256


@dataclass(frozen=True, slots=True)
class BuildIdentity:
    """What makes a binary the build it is."""

    binary: str
    sha256: str
    release: str | None
    """What the binary reports (``b11434-pypi-sdist``), None when it does not say."""
    cmake_flags: tuple[str, ...] | None = None
    """The flags ``builds.install`` built it with; None: built elsewhere (unknown)."""

    @property
    def custom_flags(self) -> tuple[str, ...]:
        """Flags that differ from the release's default build (empty: default/unknown)."""
        if self.cmake_flags is None:
            return ()
        from pytest_tokperf.builds.install import cmake_flags

        number = _number(self.release)
        default = set(cmake_flags(number) if number is not None else cmake_flags())
        return tuple(f for f in self.cmake_flags if f not in default)

    @property
    def label(self) -> str:
        """``b11434-pypi-sdist``, plus ``+FLAG=VALUE,...`` or ``@<sha12>`` if not
        default."""
        base = self.release or Path(self.binary).name
        if self.cmake_flags is None:
            return f"{base}@{self.sha256[:12]}"
        custom = [f.removeprefix("-D") for f in self.custom_flags]
        return f"{base}+{','.join(custom)}" if custom else base


    def to_pairs(self) -> dict[str, str]:
        """``EngineInfo.settings`` pairs (a rebuilt binary is its own environment row)."""
        pairs = {"binary_sha256": self.sha256, "build_label": self.label}
        pairs["build_flags"] = (" ".join(self.cmake_flags) if self.cmake_flags is not None
                                else "unknown: not built by tokperf")
        return pairs


def _number(release: str | None) -> int | None:
    if release and release.startswith("b"):
        digits = release[1:].split("-", 1)[0]
        return int(digits) if digits.isdigit() else None
    return None


@lru_cache(maxsize=32)
def _identity(binary: str, size: int, mtime_ns: int) -> BuildIdentity:
    path = Path(binary)
    version = binary_version(path)  # "b11434 (pypi-sdist)"
    release = version.replace(" (", "-").rstrip(")") if version else None
    flags: tuple[str, ...] | None = None
    try:
        meta = json.loads((path.parent / "install.json").read_text(encoding="utf-8"))
        flags = tuple(str(f) for f in meta["cmake_flags"])
    except (OSError, ValueError, KeyError, TypeError):
        flags = None
    return BuildIdentity(str(path), file_sha256(path), release, flags)


def build_identity(binary: Path) -> BuildIdentity:
    """The identity of ``binary`` (hashed once per path, size and mtime)."""
    stat = binary.stat()
    return _identity(str(binary.resolve()), stat.st_size, stat.st_mtime_ns)


def build_changes(control: Path | None, candidate: Path | None) -> str:
    """What changed from the control build to the candidate ("" when either is unknown)."""
    if control is None or candidate is None:
        return ""
    try:
        a, b = build_identity(control), build_identity(candidate)
    except OSError:
        return ""
    if a.sha256 == b.sha256:
        return f"nothing: the same binary (sha256 {a.sha256[:12]})"
    parts = []
    if a.release != b.release:
        parts.append(f"release {a.release or '?'} -> {b.release or '?'}")
    if a.cmake_flags is not None and b.cmake_flags is not None:
        gone = [f for f in a.cmake_flags if f not in b.cmake_flags and "BUILD_NUMBER" not in f]
        new = [f for f in b.cmake_flags if f not in a.cmake_flags and "BUILD_NUMBER" not in f]
        if gone or new:
            parts.append("build flags " + " ".join([*(f"-{f.removeprefix('-D')}" for f in gone),
                                                    *(f"+{f.removeprefix('-D')}" for f in new)]))
    elif a.cmake_flags != b.cmake_flags:
        side = "control" if a.cmake_flags is None else "candidate"
        parts.append(f"the {side}'s build flags are unknown (not built by tokperf)")
    parts.append(f"binary sha256 {a.sha256[:12]} -> {b.sha256[:12]}")
    return "; ".join(parts)
