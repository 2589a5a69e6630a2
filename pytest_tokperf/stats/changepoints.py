"""Where a series' level stepped and what changed there: binary segmentation over builds,
Bonferroni over the splits (docs/design.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
from scipy import special

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.groups import Groups
from pytest_tokperf.stats.metric import DEFAULT_ALPHA, Metric, check_level, fmt_p, interval_text, pct
from pytest_tokperf.stats.nested import DRIFT_LEVEL, Sessions
from pytest_tokperf.stats.shifts import SetAside, Shift, log_samples, set_aside_stalls
from pytest_tokperf.stats.verdict import judge

if TYPE_CHECKING:
    from pytest_tokperf.stats.moved import BandwidthExponent

MIN_SIZE = 2  # versions on each side of a step: a level must persist to count
HISTORY_WINDOW = 20

Scale = Literal["pooled", "versions"]


@dataclass(frozen=True, slots=True)
class Point:
    """One version of a series: its samples and the labels of its setup."""

    version: str
    samples: Sequence[float]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A step between ``history[index - 1]`` and ``history[index]`` (Bonferroni-adjusted), or
    a ``drift`` from ``history[index]`` (``stats.drift``); ``changed``: label -> (before, after)."""

    index: int
    version_before: str
    version_after: str
    level_before: float
    level_after: float
    relative_change: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: Literal["regression", "improvement"]
    changed: Mapping[str, tuple[str | None, str | None]]
    reason: str
    confidence: float = math.nan
    scale: Scale = "pooled"
    set_aside: tuple[SetAside, ...] = ()
    kind: Literal["step", "drift"] = "step"


@dataclass(frozen=True, slots=True)
class _Split:
    index: int
    tried: int
    p_adjusted: float


def change_points(history: Sequence[Point], metric: Metric, *, alpha: float = DEFAULT_ALPHA,
                  probes: Sequence[float | None] = (),
                  exponent: float | BandwidthExponent = 1.0) -> list[ChangePoint]:
    """Significant steps of ``history`` (oldest first) reaching ``min_effect``, less those the
    memory's move explains (``probes``: each point's bandwidth, bytes/s; ``exponent``: 1,
    the bound, or the host's, ``storage.history.bandwidth_exponents``; ``stats.moved``)."""
    from pytest_tokperf.stats.moved import moved_verdict

    check_level(alpha, "alpha")
    if len(history) < 2 * MIN_SIZE:
        _logs(history, metric)  # bad samples are still named
        return []
    kept, aside = _without_stalls(history, metric)
    splits, levels = _segmentation(_Levels.of(kept), alpha)
    bounds = [0, *(s.index for s in splits), len(kept.sizes)]
    found = []
    for i, split in enumerate(splits):
        shift = levels.contrast(bounds[i], split.index, bounds[i + 2])
        level = alpha / split.tried
        verdict = judge(shift, metric, alpha=level)
        if verdict.verdict not in ("regression", "improvement"):
            continue
        if len(probes) == len(history) and not moved_verdict(
                verdict, probes[split.index:bounds[i + 2]], probes[bounds[i]:split.index],
                exponent=exponent).flagged:
            continue
        before, after = history[split.index - 1], history[split.index]
        changed = changed_labels(before.labels, after.labels)
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) or "no label"
        p = min(1.0, split.tried * shift.p_value)
        how = "" if levels.scale == "pooled" else (
            "; judged on version levels, as the versions differ more than their "
            "repetitions explain")
        found.append(ChangePoint(
            index=split.index, version_before=before.version, version_after=after.version,
            level_before=math.exp(levels.level(bounds[i], split.index)),
            level_after=math.exp(levels.level(split.index, bounds[i + 2])),
            relative_change=verdict.relative_change, ci_low=verdict.ci_low,
            ci_high=verdict.ci_high, p_value=p,
            verdict="regression" if verdict.verdict == "regression" else "improvement",
            changed=changed,
            reason=(f"{metric.name} {verdict.verdict} of {pct(verdict.relative_change)} "
                    f"{interval_text(verdict.ci_low, verdict.ci_high)} between "
                    f"{before.version} and {after.version} (p={fmt_p(p)} after "
                    f"{split.tried} places tried{how}); changed: {what}"),
            confidence=1 - level, scale=levels.scale,
            set_aside=tuple(s for s in aside if bounds[i] <= s.version < bounds[i + 2]),
        ))
    return found


def settled_baseline(history: Sequence[Point], metric: Metric, *, window: int = HISTORY_WINDOW,
                     alpha: float = DEFAULT_ALPHA) -> list[Point]:
    """The last ``window`` versions since the latest significant step of any size."""
    if window < 1:
        raise ConfigError(f"window is {window!r}: give at least 1 version")
    start = segments(history, metric, alpha=alpha)[0][-1][0] if history else 0
    return list(history[start:])[-window:]


def segments(history: Sequence[Point], metric: Metric, *, alpha: float = DEFAULT_ALPHA
             ) -> tuple[list[tuple[int, int]], Scale]:
    """``[start, stop)`` of each level between significant steps of any size, and the scale."""
    check_level(alpha, "alpha")
    if len(history) < 2 * MIN_SIZE:
        _logs(history, metric)  # bad samples are still named
        return [(0, len(history))], "pooled"
    kept, _ = _without_stalls(history, metric)
    splits, levels = _segmentation(_Levels.of(kept), alpha)
    bounds = [0, *(s.index for s in splits), len(history)]
    return list(zip(bounds[:-1], bounds[1:])), levels.scale


def _without_stalls(history: Sequence[Point], metric: Metric
                    ) -> tuple[Groups, tuple[SetAside, ...]]:
    """Stalls set aside, each run measured from its own median (a run is a session)."""
    return set_aside_stalls(_logs(history, metric), metric.slow)


def _logs(history: Sequence[Point], metric: Metric) -> Groups:
    out = []
    for i, point in enumerate(history):
        logs = log_samples(point.samples, f"{metric.name} {point.version!r} samples")
        if len(logs) == 0:
            raise ConfigError(f"{metric.name} version {point.version!r} (history[{i}]) has "
                              "no samples; leave versions without results out")
        out.append(logs)
    return Groups.of(out)


@dataclass(frozen=True, slots=True)
class _Levels:
    """Per version: count, mean and weight; the pooled within spread; the scale in use."""

    sizes: np.ndarray
    means: np.ndarray
    weights: np.ndarray
    s2: float
    dfw: float
    scale: Scale = "pooled"

    @classmethod
    def of(cls, kept: Groups) -> _Levels:
        figures = Sessions.of(kept)
        own = figures.own
        weights = np.divide(figures.n, own, out=np.zeros_like(own), where=own > 0)
        return cls(figures.n, figures.means, weights, figures.s2, figures.df_w)

    def level(self, a: int, b: int) -> float:
        """The log level of versions [a, b): weighted mean, or mean of version means."""
        if self.scale == "pooled":
            w = self.weights[a:b]
            return float((w * self.means[a:b]).sum() / w.sum())
        return float(self.means[a:b].mean())

    def contrast(self, a: int, split: int, b: int) -> Shift:
        """Versions [split, b) over versions [a, split)."""
        n_left, n_right = int(self.sizes[a:split].sum()), int(self.sizes[split:b].sum())
        d = self.level(split, b) - self.level(a, split)
        cv = math.sqrt(self.s2) if self.dfw else math.nan
        k_left, k_right = split - a, b - split
        if self.scale == "pooled":
            se = math.sqrt(1 / self.weights[a:split].sum() + 1 / self.weights[split:b].sum())
            return Shift(d, se, float(self.dfw), n_left, n_right, "pooled", cv, k_left)
        ss = sum(float(((m - m.mean()) ** 2).sum())
                 for m in (self.means[a:split], self.means[split:b]))
        df = k_left + k_right - 2
        se = math.sqrt(ss / df * (1 / k_left + 1 / k_right)) if df else math.nan
        return Shift(d, se, float(df), n_left, n_right, "sessions", cv, k_left)

    def best_split(self, a: int, b: int) -> _Split | None:
        """The split of versions [a, b) with the largest |t|, p x the candidates tried."""
        tried = b - a - 2 * MIN_SIZE + 1
        if tried < 1:
            return None
        at = np.arange(MIN_SIZE, b - a - MIN_SIZE + 1)
        if self.scale == "pooled":
            n = np.concatenate([[0.0], np.cumsum(self.weights[a:b])])
            s = np.concatenate([[0.0], np.cumsum(self.weights[a:b] * self.means[a:b])])
            left, right = n[at], n[-1] - n[at]
            d = (s[-1] - s[at]) / right - s[at] / left
            var = 1 / left + 1 / right
            df = float(self.dfw)
        else:
            m = self.means[a:b]
            m1 = np.concatenate([[0.0], np.cumsum(m)])
            m2 = np.concatenate([[0.0], np.cumsum(m**2)])
            left, right = at.astype(float), len(m) - at.astype(float)
            d = (m1[-1] - m1[at]) / right - m1[at] / left
            ss = (m2[at] - m1[at] ** 2 / left) + (m2[-1] - m2[at] - (m1[-1] - m1[at]) ** 2 / right)
            df = float(len(m) - 2)
            var = np.maximum(ss, 0) / df * (1 / left + 1 / right)
        t = np.abs(d) / np.sqrt(np.maximum(var, 1e-300))
        i = int(np.argmax(t))
        p = float(2 * special.stdtr(df, -t[i]))
        return _Split(a + int(at[i]), tried, min(1.0, tried * p))


def _segmentation(levels: _Levels, alpha: float) -> tuple[list[_Split], _Levels]:
    """Significant splits, on the pooled spread unless the residual versions drift."""
    if levels.dfw == 0 or not levels.s2 > 0:
        versions = replace(levels, scale="versions")
        return _segment(versions, alpha), versions
    splits = _segment(levels, alpha)
    bounds = [0, *(s.index for s in splits), len(levels.sizes)]
    resid = sum(float((levels.weights[a:b] * (levels.means[a:b] - levels.level(a, b)) ** 2).sum())
                for a, b in zip(bounds[:-1], bounds[1:]))
    df_b = len(levels.sizes) - (len(bounds) - 1)
    if df_b > 0 and float(special.fdtrc(df_b, levels.dfw, resid / df_b)) < DRIFT_LEVEL:
        versions = replace(levels, scale="versions")
        return _segment(versions, alpha), versions
    return splits, levels


def _segment(levels: _Levels, alpha: float) -> list[_Split]:
    found: list[_Split] = []
    todo = [(0, len(levels.sizes))]
    while todo:
        a, b = todo.pop()
        best = levels.best_split(a, b)
        if best is not None and best.p_adjusted < alpha:
            found.append(best)
            todo += [(a, best.index), (best.index, b)]
    return sorted(found, key=lambda s: s.index)


def changed_labels(before: Mapping[str, str], after: Mapping[str, str]
                   ) -> dict[str, tuple[str | None, str | None]]:
    """Each label that differs: (before, after), ``before``'s order first."""
    keys = [*before, *(k for k in after if k not in before)]
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}
