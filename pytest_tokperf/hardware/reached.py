"""The read bandwidth a host has been shown to reach: what a CPU decode is judged against.

The best of this session's probes and of the latest ``KEEP`` kept per host; a probe run
on a busy machine counts only while no quiet probe exists (``LOADED_ONLY``).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.paths import cache_root
from pytest_tokperf.results import Bandwidth

CALIBRATION_FILE = "bandwidth.json"
"""In ``paths.cache_root()``, beside the engines and generated models."""
KEEP = 64
MAX_AGE_DAYS = 30
FORMAT = 1
LOADED_ONLY = "reached only on a busy machine"
"""How a bandwidth's detail begins when no quiet probe backs it (floor checks read busy)."""


def calibration_key(cpu_name: str, threads: int) -> str:
    """Probes are comparable on one host, one CPU, one thread count."""
    return f"{platform.node() or 'host'} | {cpu_name} | {threads} threads"


def default_calibration_path() -> Path:
    return cache_root() / CALIBRATION_FILE


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class ReachedBandwidth:
    """Session and kept probes of one key; ``best`` is what decode is judged against."""

    key: str
    path: Path | None = None
    session: list[float] = field(default_factory=list)
    kept: list[tuple[float, str]] = field(default_factory=list)
    """(bytes per second, ISO time) of earlier sessions' probes, oldest first."""
    busy_at: set[str] = field(default_factory=set)
    """The ISO times (kept) of probes run on a busy machine."""
    session_busy: list[bool] = field(default_factory=list)
    problem: str | None = None
    """Why the kept probes could not be read or written (never fatal)."""

    @classmethod
    def load(cls, key: str, path: Path | None) -> ReachedBandwidth:
        reached = cls(key=key, path=path)
        if path is None or not path.is_file():
            return reached
        try:
            data = json.loads(path.read_text())
            entries = data["hosts"].get(key, []) if data.get("format") == FORMAT else []
            oldest = _now() - timedelta(days=MAX_AGE_DAYS)
            for entry in entries:
                bw, at = float(entry[0]), str(entry[1])
                if bw > 0 and datetime.fromisoformat(at) >= oldest:
                    reached.kept.append((bw, at))
                    if len(entry) > 2 and entry[2] == "busy":
                        reached.busy_at.add(at)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            reached.kept, reached.busy_at = [], set()
            reached.problem = f"kept probes in {str(path)!r} not read ({exc!r}); starting afresh"
        return reached

    def add(self, bytes_per_s: float, busy: bool = False) -> None:
        """One probe's best figure: into the session, and kept for later sessions
        (``busy``: run on a busy machine, counted only while no quiet probe exists)."""
        at = _now().isoformat()
        self.session.append(bytes_per_s)
        self.session_busy.append(busy)
        if busy:
            self.busy_at.add(at)
        self.kept = [*self.kept, (bytes_per_s, at)][-KEEP:]
        if self.path is not None:
            self._save(self.path)

    def _save(self, path: Path) -> None:
        try:
            data: dict[str, object] = {"format": FORMAT, "hosts": {}}
            if path.is_file():
                try:
                    found = json.loads(path.read_text())
                    if isinstance(found, dict) and found.get("format") == FORMAT:
                        data = found
                except ValueError:
                    pass  # a torn or foreign file: rewritten below
            hosts = data.setdefault("hosts", {})
            assert isinstance(hosts, dict)
            hosts[self.key] = [[bw, at, *(["busy"] if at in self.busy_at else [])]
                               for bw, at in self.kept]
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_name(f".{path.name}.{os.getpid()}")
            scratch.write_text(json.dumps(data, indent=1))
            os.replace(scratch, path)
        except OSError as exc:
            self.problem = f"probes not kept in {str(path)!r} ({exc}); judged by this session's"

    def _figures(self, busy: bool) -> list[float]:
        kept = [bw for bw, at in self.kept if (at in self.busy_at) == busy]
        return [*(bw for bw, b in zip(self.session, self.session_busy) if b == busy), *kept]

    @property
    def only_busy(self) -> bool:
        """No quiet probe on this host: every figure was reached with neighbours busy."""
        return not self._figures(False) and bool(self._figures(True))

    @property
    def best(self) -> float | None:
        """The best quiet figure; the best busy one only while no quiet one exists."""
        figures = self._figures(False) or self._figures(True)
        return max(figures) if figures else None

    def bandwidth(self, around: list[float]) -> Bandwidth | None:
        """The judged figure, its detail naming its source and the probes ``around`` it."""
        best = self.best
        if best is None:
            return None
        earlier = len(self.kept) - len(self.session)
        where = f"{len(self.session)} probe{'s' * (len(self.session) != 1)} this session"
        if self.path is not None and earlier > 0:
            where += f" and {earlier} kept from earlier sessions in {self.path}"
        detail = (f"highest read bandwidth this host has reached, {format_bandwidth(best)}: "
                  f"best of {where} ({self.key})")
        if self.only_busy:
            detail = (f"{LOADED_ONLY} (no quiet probe on this host yet: the ceiling may be "
                      f"far too low and the efficiency too high; rerun on a quiet machine): "
                      f"{detail}")
        if around:
            shown = " and ".join(format_bandwidth(bw) for bw in around)
            detail += f"; probed around this measurement: {shown}"
        return Bandwidth(best, "measured", detail)
