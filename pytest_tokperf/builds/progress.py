"""How a long step says how far it is: a compile's percent, a comparison's sessions, a
bisect's steps, a wait on another build.

A ``Meter`` counts a step's units and estimates the time left from the time per unit
since the first few units (a compile's first percent are configure checks and ccache hits,
not its pace), or from a model of the step where its length is known (``estimate``: an
A/B session's tests times their budget). A progress callable that is a ``LiveProgress``
(the terminal's, in ``report.live``) shows meters as live lines that tick; any other gets
one plain line per step: every ``line_every`` units, or when the count moved after
``quiet_s`` without a line.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Protocol, runtime_checkable

from pytest_tokperf.results import Progress


@runtime_checkable
class LiveProgress(Protocol):
    """A progress callable that also draws meters, redrawn as their clocks move."""

    def __call__(self, line: str) -> None: ...

    def show(self, meter: Meter) -> None:
        """Draw ``meter`` (new or moved)."""

    def drop(self, meter: Meter) -> None:
        """``meter`` finished: remove its line."""


def duration(seconds: float) -> str:
    """``42 s``, ``6 min``, ``1 h 5 min``: as a person says a wait."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"


@dataclass(slots=True, eq=False)
class Meter:
    """One long step: ``done`` of ``total`` units (``None``: not counted, only timed)."""

    progress: Progress
    label: str
    """What runs, e.g. ``llama-server b11434: build``."""
    total: float | None = None
    unit: str = "%"
    """``%``: the count is a percent (``40%``); else a noun (``3 of 10 sessions``)."""
    warmup: float = 0.0
    """Units before the pace is measured: the estimate starts at the first count past it."""
    line_every: float = 10.0
    quiet_s: float = 60.0
    approximate: bool = False
    """The total is itself a guess (a bisect's remaining steps): says ``about``."""
    expected_s: float | None = None
    """A step that is timed, not counted: how long the like of it took before."""
    bounded: bool = False
    """``expected_s`` is a limit (a wait for a quiet window): says ``up to``."""
    estimate: Callable[[], float | None] | None = None
    """Seconds left from a model of the step (None: not yet known): taken before the pace."""
    clock: Callable[[], float] = time.monotonic
    done: float = 0.0
    started: float = field(init=False)
    _anchor: tuple[float, float] | None = field(init=False, default=None)
    _last: tuple[float, float] | None = field(init=False, default=None)
    _line: tuple[float, float] = field(init=False, default=(0.0, 0.0))

    def __post_init__(self) -> None:
        self.started = self.clock()
        self._line = (self.started, 0.0)
        if self.warmup <= 0:
            self._anchor = (self.started, 0.0)
        if isinstance(self.progress, LiveProgress):
            self.progress.show(self)

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def update(self, done: float, *, total: float | None = None) -> None:
        """The step reached ``done`` units (of ``total``, when that changed)."""
        now = self.clock()
        if total is not None:
            self.total = total
        if self._anchor is None and done >= self.warmup and done > 0:
            self._anchor = (now, done)
        moved = done != self.done
        self.done = done
        if moved and self._anchor is not None and done > self._anchor[1]:
            self._last = (now, done)
        if isinstance(self.progress, LiveProgress):
            self.progress.show(self)
            return
        line_at, line_done = self._line
        step = self.line_every
        if moved and (math.floor(done / step) > math.floor(line_done / step)
                      or now - line_at >= self.quiet_s):
            self._line = (now, done)
            self.progress(self.text())

    def close(self) -> None:
        if isinstance(self.progress, LiveProgress):
            self.progress.drop(self)

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def left_s(self) -> float | None:
        """Seconds left at the pace since the warm-up; None until it can be told. A count
        that stalls stretches it: the next unit is taken to arrive now, at the earliest.
        A timed step: its expected time less the elapsed (negative: running long)."""
        if self.estimate is not None and (modelled := self.estimate()) is not None:
            return modelled
        now = self.clock()
        if self.expected_s is not None and self.total is None:
            return self.expected_s - (now - self.started)
        if self.total is None or self._anchor is None or self._last is None:
            return None
        (t0, d0), (t1, d1) = self._anchor, self._last
        per_unit = max((t1 - t0) / (d1 - d0), (now - t0) / (self.done - d0 + 1))
        return per_unit * max(self.total - self.done, 0.0)

    def fraction(self) -> float | None:
        """How far along, 0 to 1, for a bar: the count, else the time against the expected."""
        if self.total:
            return min(max(self.done / self.total, 0.0), 1.0)
        if self.expected_s:
            return min(max(self.elapsed_s() / self.expected_s, 0.0), 1.0)
        return None

    def count_text(self) -> str:
        if self.total is None:
            return ""
        if self.unit == "%":
            return f"{self.done:.0f}%"
        about = "about " if self.approximate else ""
        return f"{math.floor(self.done)} of {about}{self.total:.0f} {self.unit}"

    def times(self, form: Literal["long", "short", "left"] = "long") -> list[str]:
        """``6 min elapsed, about 9 min left``; short: ``6 min in, 9 min left``; left:
        ``9 min left`` (the elapsed time only where nothing is left to tell)."""
        short = form != "long"
        parts = [f"{duration(self.elapsed_s())} {'in' if short else 'elapsed'}"]
        left = self.left_s()
        if left is not None and left <= 0 and self.expected_s is not None and not self.total:
            parts.append(f"over {duration(self.expected_s)}" if short else
                         f"longer than {'allowed' if self.bounded else 'the last'} "
                         f"({duration(self.expected_s)})")
        elif left is not None and not (self.total is not None and self.done >= self.total):
            about = "" if short else "up to " if self.bounded else "about "
            parts.append(f"{about}{duration(left)} left")
        return parts[1:] if form == "left" and len(parts) > 1 else parts

    def head(self) -> str:
        """The label and the count: ``compare-builds: 2 of 4 sessions``."""
        count = self.count_text()
        return f"{self.label} {count}" if count else self.label.rstrip(":")

    def text(self) -> str:
        """``llama-server b11434: build 40%, 6 min elapsed, about 9 min left``."""
        return ", ".join([self.head(), *self.times()])
