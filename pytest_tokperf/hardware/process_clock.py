"""An engine process's own clock: how long its threads ran and waited for a CPU (Linux
schedstat of a server tokperf started; elsewhere ``read`` is None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

BUSY_SHARE = 0.05
"""Share of a window a thread must run to count as one of the engine's working threads."""


@dataclass(frozen=True, slots=True)
class ThreadTimes:
    """Per thread id: (ns on a CPU, ns waiting on a run queue) at one moment."""

    at: dict[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class WindowTimes:
    """What the engine's working threads did over a window of ``span_s`` seconds."""

    span_s: float
    run_s: float
    """Mean time on a CPU per working thread."""
    wait_s: float
    """Mean time waiting for a CPU per working thread: the neighbours' share."""
    threads: int

    @property
    def wait_share(self) -> float:
        """The share of the window the engine's threads spent waiting for a CPU."""
        return self.wait_s / self.span_s if self.span_s > 0 else 0.0


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """``"<run ns> <wait ns> <slices>"`` -> (run, wait); None when the text is not that."""
    parts = text.split()
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


class ProcessClock:
    """Reads one process's per-thread schedstat; ``read`` is None where it cannot."""

    def __init__(self, pid: int, proc: Path = PROC) -> None:
        self.pid = pid
        self._tasks = proc / str(pid) / "task"

    def read(self) -> ThreadTimes | None:
        try:
            names = os.listdir(self._tasks)
        except OSError:
            return None
        at: dict[int, tuple[int, int]] = {}
        for name in names:
            try:
                found = parse_schedstat((self._tasks / name / "schedstat").read_text())
            except (OSError, ValueError):
                continue
            if found is not None and name.isdigit():
                at[int(name)] = found
        return ThreadTimes(at) if at else None


def working(first: ThreadTimes, last: ThreadTimes, span_s: float) -> frozenset[int]:
    """The threads that ran at least a ``BUSY_SHARE`` of the ``span_s`` between two readings."""
    return frozenset(
        tid for tid, (run1, _) in last.at.items()
        if tid in first.at and run1 - first.at[tid][0] >= BUSY_SHARE * span_s * 1e9)


def window(first: ThreadTimes, last: ThreadTimes, span_s: float,
           among: frozenset[int] | None = None) -> WindowTimes | None:
    """The working threads' mean run and wait between two readings; None if none worked."""
    if span_s <= 0:
        return None
    chosen = working(first, last, span_s) if among is None else among
    busy: list[tuple[int, int]] = []
    for tid in sorted(chosen):
        if tid not in first.at or tid not in last.at:
            continue
        (run0, wait0), (run1, wait1) = first.at[tid], last.at[tid]
        if wait1 - wait0 >= 0:
            busy.append((run1 - run0, wait1 - wait0))
    if not busy:
        return None
    n = len(busy)
    return WindowTimes(span_s=span_s, run_s=sum(r for r, _ in busy) / n / 1e9,
                       wait_s=sum(w for _, w in busy) / n / 1e9, threads=n)
