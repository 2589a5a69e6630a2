"""A new result against its history's settled and accepted levels (step and drift looks,
each at ``alpha / 2``), and the drifts a history holds (docs/design.md)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.calibration import detectable_shift
from pytest_tokperf.stats.changepoints import (HISTORY_WINDOW, MIN_SIZE, ChangePoint, Point,
                                                change_points, changed_labels, segments)
from pytest_tokperf.stats.comparing import Baseline, compare, measure_shift
from pytest_tokperf.stats.metric import DEFAULT_ALPHA, Metric, check_level, resolved
from pytest_tokperf.stats.verdict import Comparison, judge, phase_figures

REFERENCE_RUNS = 3
"""Runs that stand for the accepted level: the first of the history (since acceptance)."""
LOOKS = 2
"""Comparisons per result when the drift one is made (Bonferroni)."""


@dataclass(frozen=True, slots=True)
class HistoryJudgement:
    """A result against its history: the verdict, ``step``, ``drift`` (None: short history)."""

    comparison: Comparison
    step: Comparison
    drift: Comparison | None
    baseline: tuple[Point, ...]
    reference: tuple[Point, ...]
    judged: Literal["step", "drift"]


def judge_history(history: Sequence[Point], current: Sequence[float], metric: Metric, *,
                  alpha: float = DEFAULT_ALPHA, window: int = HISTORY_WINDOW,
                  min_samples: int = 3, current_version: str | None = None) -> HistoryJudgement:
    """The gate: ``current`` against the settled and accepted levels of ``history``."""
    check_level(alpha, "alpha")
    if window < 1:
        raise ConfigError(f"window is {window!r}: give at least 1 version")
    points = list(history)
    if not points:
        empty = compare([], current, metric, alpha=alpha, min_samples=min_samples)
        return HistoryJudgement(empty, empty, None, (), (), "step")
    cuts, _ = segments(points, metric, alpha=alpha)
    base = points[cuts[-1][0]:][-window:]  # ``settled_baseline``, segmented once
    start = len(points) - len(base)
    step = compare([list(p.samples) for p in base], current, metric, alpha=alpha,
                   min_samples=min_samples, spread=_groups(points, _cut(cuts, 0, start)))
    reference = points[:REFERENCE_RUNS]
    if len(points) < REFERENCE_RUNS + 2 or step.shift is None:
        return HistoryJudgement(step, step, None, tuple(base), (), "step")
    drift = _from_start(points, cuts, current, metric, alpha, min_samples)
    step = _corrected(step, metric, alpha)
    drift = _corrected(drift, metric, alpha)
    where = f"against the accepted level ({_span(reference)})"
    if drift.flagged and not step.flagged:
        # name only the steps `tokperf changes` lists (significant AND reaching m)
        steps = [f"{c.version_before} -> {c.version_after}"
                 for c in change_points(points, metric, alpha=alpha) if c.index >= REFERENCE_RUNS]
        how = f", through level changes at {', '.join(steps)}" if steps else (
            ", in steps each too small to flag")
        now = f" and {current_version}" if current_version else " and this run"
        reason = (f"{drift.reason}; judged {where}: it accumulated over "
                  f"{_span(points[REFERENCE_RUNS:])}{now}{how}; against the settled level "
                  f"({_span(base)}) alone: {step.verdict} {step.brief()}; `tokperf accept` "
                  "records a deliberate new level")
        return HistoryJudgement(replace(drift, reason=reason), step, drift, tuple(base),
                                tuple(reference), "drift")
    if drift.verdict != step.verdict and drift.verdict != "unchanged":
        step = replace(step, reason=f"{step.reason}; {where}: {drift.verdict} {drift.brief()}")
    return HistoryJudgement(step, step, drift, tuple(base), tuple(reference), "step")


def drifts(history: Sequence[Point], metric: Metric, *, alpha: float = DEFAULT_ALPHA
           ) -> list[ChangePoint]:
    """Slides between the steps ``change_points`` finds (those the memory explains too) where
    the level moved (any significant step, or versions differing beyond repetitions): the
    gate's drift look, first ``REFERENCE_RUNS`` runs to last, significant and reaching ``m``."""
    points, r = list(history), REFERENCE_RUNS
    cuts, scale = segments(points, metric, alpha=alpha)
    stops = [0, *(c.index for c in change_points(points, metric, alpha=alpha)), len(points)]
    found = []
    for a, b in zip(stops[:-1], stops[1:]):
        if b - a < 2 * r or scale == "pooled" and len(_cut(cuts, a, b)) < 2:
            continue
        start, end = points[a:a + r], points[b - r:b]
        c = _corrected(_from_start(points[a:b - r], _cut(cuts, a, b - r),
                                   [list(p.samples) for p in end], metric, alpha), metric, alpha)
        if c.flagged:
            level = statistics.median(x for p in start for x in p.samples)
            found.append(ChangePoint(
                a, start[0].version, end[-1].version, level, level * (1 + c.relative_change),
                c.relative_change, c.ci_low, c.ci_high, c.p_value,
                "regression" if c.regressed else "improvement",
                changed_labels(start[0].labels, end[-1].labels),
                f"{c.reason}; drifted from {start[0].version}..{start[-1].version} to "
                f"{end[0].version}..{end[-1].version} ({r} runs each) in steps each too small "
                "to flag", c.confidence, kind="drift"))
    return found


def _from_start(points: Sequence[Point], cuts: Sequence[tuple[int, int]], current: Baseline,
                metric: Metric, alpha: float, min_samples: int = 3) -> Comparison:
    """The drift look: ``current`` against the first runs, the later ones in the spread."""
    later = _groups(points[REFERENCE_RUNS:], _cut(cuts, REFERENCE_RUNS, len(points)))
    return compare([list(p.samples) for p in points[:REFERENCE_RUNS]], current, metric,
                   alpha=alpha, min_samples=min_samples, spread=later, trend=True)


def _groups(points: Sequence[Point], cuts: Sequence[tuple[int, int]]) -> list[list[list[float]]]:
    """The runs of each ``[start, stop)`` segment, one group per segment."""
    return [[list(p.samples) for p in points[a:b]] for a, b in cuts if b > a]


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a history can resolve: the smallest step seen with 80% power (NaN: unknown),
    whether machine phases dominate, and a ``note`` saying so."""

    smallest_step: float
    phase_dominated: bool
    note: str


def resolution(history: Sequence[Point], metric: Metric, *, alpha: float = DEFAULT_ALPHA
               ) -> Resolution:
    """How finely ``history`` (oldest first) resolves a step (see ``Resolution``), read
    inside its longest level: a step the history holds is no spread between sessions."""
    start, stop = max(segments(history, metric, alpha=alpha)[0], key=lambda c: c[1] - c[0])
    points = list(history)[start:stop]
    k = len(points)
    if k < 2 * MIN_SIZE:
        return Resolution(math.nan, False, "")
    half = k // 2
    try:
        shift = measure_shift([list(p.samples) for p in points[:half]],
                              [list(p.samples) for p in points[half:]], metric, trend=True)
    except ConfigError:
        return Resolution(math.nan, False, "")
    tried = max(1, k - 2 * MIN_SIZE + 1)
    smallest = detectable_shift(shift, alpha / tried) if shift.std_error > 0 else math.nan
    note = ""
    if shift.phase_dominated:
        steps = f"under {smallest:.0%}" if resolved(smallest) else "of any size up to 1000%"
        note = (f"phase-dominated history: steps {steps} cannot be seen; use the "
                f"same-run A/B ({phase_figures(shift)}; {k} runs)")
    return Resolution(smallest, shift.phase_dominated, note)


def _corrected(c: Comparison, metric: Metric, alpha: float) -> Comparison:
    """``c`` re-read at ``alpha / LOOKS`` (its shift carries the correction)."""
    return c if c.shift is None else judge(replace(c.shift, tests=LOOKS), metric, alpha=alpha)


def _cut(cuts: Sequence[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """``cuts`` clipped to ``[a, b)`` and shifted to start at 0."""
    return [(max(s, a) - a, min(e, b) - a) for s, e in cuts if min(e, b) > max(s, a)]


def _span(points: Sequence[Point]) -> str:
    first, last = points[0].version, points[-1].version
    builds = first if first == last else f"{first}..{last}"
    return f"{builds}, {len(points)} run{'s' * (len(points) != 1)}"
