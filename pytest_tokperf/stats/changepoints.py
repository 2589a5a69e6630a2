"""Where did a series' level step, and what changed there?

E-divisive-style binary segmentation (Matteson & James; Hunter/Otava) over the
series ordered by engine build. Each version is summarised by the median of its
log samples (a stall cannot move it); the split of a segment is where the size-
weighted mean difference between the versions before it and those after it (up to
any later end, so a step that is undone later still shows) is largest, and it counts
only if a permutation test of the version levels says so: the largest statistic
over all splits is compared with the largest of ``PERMUTATIONS`` shuffles from a
fixed seed. Shuffling whole versions accounts for having picked the best of many
splits (Otava's plain t-test does not) and for run-to-run drift, and the fixed seed
keeps the answer the same on every run. Accepted splits are judged like a pairwise
comparison of the version levels on either side (``stats.judge``): a step is
reported only when it reaches the metric's minimum effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.compare import (
    DEFAULT_ALPHA, Comparison, Metric, compare, judge, log_samples, measure_shift,
)

PERMUTATIONS = 1999
PERMUTATION_SEED = 20240902
MIN_SIZE = 2  # versions on each side of a step: a level must persist to count
HISTORY_WINDOW = 20


@dataclass(frozen=True, slots=True)
class Point:
    """One version of a series: its samples and the labels that identify its setup.

    ``labels`` holds the dimensions that can change between versions, e.g.
    ``{"engine_build": "b11010", "driver": "560.35", "hardware": "H100",
    "model_hash": "3f2a"}``.
    """

    version: str
    samples: Sequence[float]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A persistent step in level between ``history[index - 1]`` and ``history[index]``.

    Levels are medians of the version medians on each side, up to the neighbouring
    change points; ``changed`` maps each label that differs across the step to its
    (before, after) values.
    """

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


def change_points(
    history: Sequence[Point], metric: Metric, *, alpha: float = DEFAULT_ALPHA
) -> list[ChangePoint]:
    """Steps in ``history`` (oldest first) that are significant and reach ``min_effect``."""
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha is {alpha!r}: give a probability between 0 and 1, e.g. 0.005")
    levels = _levels(history, metric)
    found: list[ChangePoint] = []
    splits = _segment(levels, alpha)
    bounds = [0, *(s for s, _ in splits), len(levels)]
    for i, (index, p) in enumerate(splits):
        left, right = levels[bounds[i]:index], levels[index:bounds[i + 2]]
        shift = measure_shift(np.exp(left).tolist(), np.exp(right).tolist(), metric, alpha=alpha)
        verdict = judge(shift, metric, alpha=alpha, significant=True)
        if verdict.verdict not in ("regression", "improvement"):
            continue
        before, after = history[index - 1], history[index]
        changed = _changed(before.labels, after.labels)
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) or "no label"
        found.append(ChangePoint(
            index=index, version_before=before.version, version_after=after.version,
            level_before=math.exp(float(np.median(left))),
            level_after=math.exp(float(np.median(right))),
            relative_change=verdict.relative_change, ci_low=verdict.ci_low,
            ci_high=verdict.ci_high, p_value=p,
            verdict=verdict.verdict,
            changed=changed,
            reason=(f"{metric.name} {verdict.verdict} of {_pct(verdict.relative_change)} "
                    f"[{_pct(verdict.ci_low)}, {_pct(verdict.ci_high)}] between "
                    f"{before.version} and {after.version} (permutation p={p:.2g}); "
                    f"changed: {what}"),
        ))
    return found


def settled_baseline(
    history: Sequence[Point], metric: Metric, *, window: int = HISTORY_WINDOW,
    alpha: float = DEFAULT_ALPHA,
) -> list[Point]:
    """The last ``window`` versions since the latest significant step of any size."""
    if window < 1:
        raise ConfigError(f"window is {window!r}: give at least 1 version")
    splits = _segment(_levels(history, metric), alpha)
    start = max((s for s, _ in splits), default=0)
    return list(history[start:])[-window:]


def compare_to_history(
    history: Sequence[Point], current: Sequence[float], metric: Metric, *,
    alpha: float = DEFAULT_ALPHA, window: int = HISTORY_WINDOW, min_samples: int = 3,
) -> Comparison:
    """The gate: ``current`` against the settled level of ``history`` (see ``stats``)."""
    base = settled_baseline(history, metric, window=window, alpha=alpha)
    if not base:
        return compare([], current, metric, alpha=alpha, min_samples=min_samples)
    samples = [list(p.samples) for p in base]
    baseline = samples[0] if len(samples) == 1 else samples
    return compare(baseline, current, metric, alpha=alpha, min_samples=min_samples)


def _levels(history: Sequence[Point], metric: Metric) -> np.ndarray:
    levels = []
    for i, point in enumerate(history):
        logs = log_samples(point.samples, f"{metric.name} {point.version!r} samples")
        if len(logs) == 0:
            raise ConfigError(f"{metric.name} version {point.version!r} (history[{i}]) has "
                              "no samples; leave versions without results out")
        levels.append(float(np.median(logs)))
    return np.array(levels)


def _segment(levels: np.ndarray, alpha: float) -> list[tuple[int, float]]:
    """Binary segmentation: every significant split as (index, permutation p), sorted."""
    found: list[tuple[int, float]] = []
    todo = [(0, len(levels))]
    while todo:
        a, b = todo.pop()
        if b - a < 2 * MIN_SIZE or np.ptp(levels[a:b]) == 0:
            continue
        split, p = _best_split(levels[a:b])
        if p < alpha:
            found.append((a + split, p))
            todo += [(a, a + split), (a + split, b)]
    return sorted(found)


def _best_split(y: np.ndarray) -> tuple[int, float]:
    rng = np.random.default_rng(PERMUTATION_SEED)
    shuffled = rng.permuted(np.broadcast_to(y, (PERMUTATIONS, len(y))), axis=1)
    splits, ends = _pairs(len(y))
    observed = _stats(y[None, :], splits, ends)[0]
    best = int(np.argmax(observed))
    exceed = _stats(shuffled, splits, ends).max(axis=1) >= observed[best] - 1e-9
    return int(splits[best]), (1 + int(exceed.sum())) / (PERMUTATIONS + 1)


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (split, end) with MIN_SIZE versions in [0, split) and in [split, end).

    Letting the right segment end early (Matteson & James) finds a step that is
    later undone, which one split of the whole segment would average away.
    """
    splits, ends = [], []
    for split in range(MIN_SIZE, n - MIN_SIZE + 1):
        for end in range(split + MIN_SIZE, n + 1):
            splits.append(split)
            ends.append(end)
    return np.array(splits), np.array(ends)


def _stats(rows: np.ndarray, splits: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Weighted mean difference of [0, split) and [split, end), per pair and row.

    ``|mean_r - mean_l| * sqrt(n_l * n_r / (n_l + n_r))``: E-divisive's statistic for
    a shift in mean. Not divided by a within-segment spread, which two tight pairs
    of versions would make arbitrarily small; the permutation test supplies the scale.
    """
    s1 = np.hstack([np.zeros((rows.shape[0], 1)), np.cumsum(rows, axis=1)])
    n_left, n_right = splits, ends - splits
    left, right = s1[:, splits], s1[:, ends] - s1[:, splits]
    weight = np.sqrt(n_left * n_right / (n_left + n_right))
    stat: np.ndarray = np.abs(right / n_right - left / n_left) * weight
    return stat


def _changed(
    before: Mapping[str, str], after: Mapping[str, str]
) -> dict[str, tuple[str | None, str | None]]:
    keys = [*before, *(k for k in after if k not in before)]
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def _pct(x: float) -> str:
    return f"{x:+.1%}".replace("-", "−")
