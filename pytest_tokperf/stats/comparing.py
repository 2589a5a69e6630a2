"""Is a series slower, faster, unchanged, or too noisy to say? Everything works on log
values, so a change is a ratio (``-0.07`` is 7% lower)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar, Union

import numpy as np

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.family import Correction, judge_family
from pytest_tokperf.stats.metric import DECODE, DEFAULT_ALPHA, PREFILL, TTFT, Metric, check_level
from pytest_tokperf.stats.nested import shift_between
from pytest_tokperf.stats.shifts import Shift, log_samples
from pytest_tokperf.stats.verdict import Comparison, Outcome, judge

__all__ = ["DECODE", "PREFILL", "TTFT", "Comparison", "Metric", "Outcome", "compare",
           "compare_many", "measure_shift"]

Baseline = Union[Sequence[float], Sequence[Sequence[float]]]
"""One session's samples, or a list of per-session sample lists (one stored run each)."""
Spread = Sequence[Sequence[Sequence[float]]]
"""Groups of sessions (one group per other build) that inform the spread, not the levels."""
K = TypeVar("K", bound=Hashable)


def compare(baseline: Baseline, current: Baseline, metric: Metric, *,
            alpha: float = DEFAULT_ALPHA, min_samples: int = 3, spread: Spread = (),
            trend: bool = False) -> Comparison:
    """Judge ``current`` against ``baseline``, each a list of samples or of per-session
    lists. ``spread``: other builds' sessions for the spread only; ``trend``: around a
    line. Bad samples raise ``ConfigError`` naming value and position."""
    _check(alpha, min_samples)
    groups, cur = _prepare(baseline, current, metric)
    scarce = _scarce(groups, cur, metric, min_samples, alpha)
    if scarce is not None:
        return scarce
    extra = _spread(spread, metric)
    return judge(shift_between(groups, cur, metric.slow, extra, trend=trend), metric,
                 alpha=alpha)


def measure_shift(baseline: Baseline, current: Baseline, metric: Metric, *,
                  spread: Spread = (), trend: bool = False) -> Shift:
    """The shift behind ``compare``, at least 2 samples a side (else ``ConfigError``)."""
    groups, cur = _prepare(baseline, current, metric)
    if sum(len(g) for g in groups) < 2 or sum(len(c) for c in cur) < 2:
        raise ConfigError(f"{metric.name}: a shift needs at least 2 samples on each side")
    return shift_between(groups, cur, metric.slow, _spread(spread, metric), trend=trend)


def compare_many(baseline: Mapping[K, Baseline], current: Mapping[K, Baseline],
                 metric: Metric | Mapping[K, Metric], *, alpha: float = DEFAULT_ALPHA,
                 min_samples: int = 3, correction: Correction = "holm",
                 spread: Mapping[K, Spread] | None = None) -> dict[K, Comparison]:
    """``compare`` for many series, then ``judge_family`` over all of them at ``alpha``.
    Both mappings must have the same keys (else ``ConfigError`` naming the odd ones);
    ``metric`` is one metric for all or one per key; ``spread`` as in ``compare``."""
    _check(alpha, min_samples)
    only_b = [k for k in baseline if k not in current]
    only_c = [k for k in current if k not in baseline]
    if only_b or only_c:
        raise ConfigError(
            f"series keys differ: only in baseline {only_b!r}, only in current {only_c!r}; "
            "compare the common keys and report the others as new or missing"
        )
    single = {}
    for key in current:
        if not isinstance(metric, Metric) and key not in metric:
            raise ConfigError(f"no metric given for series {key!r}")
        met = metric if isinstance(metric, Metric) else metric[key]
        single[key] = compare(baseline[key], current[key], met, alpha=alpha,
                              min_samples=min_samples, spread=(spread or {}).get(key, ()))
    return judge_family(single, alpha=alpha, method=correction).comparisons


def _check(alpha: float, min_samples: int) -> None:
    check_level(alpha, "alpha")
    if min_samples < 2:
        raise ConfigError(f"min_samples is {min_samples!r}: a spread needs at least 2")


def _prepare(baseline: Baseline, current: Baseline, metric: Metric
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return (_sessions(baseline, f"{metric.name} baseline", metric),
            _sessions(current, f"{metric.name} current", metric))


def _sessions(samples: Baseline, label: str, metric: Metric) -> list[np.ndarray]:
    """One side as log samples per session: a flat list is one session."""
    items = list(samples)
    nested = [isinstance(x, (Sequence, np.ndarray)) and not isinstance(x, str) for x in items]
    if items and all(nested):
        sessions = []
        for v, values in enumerate(items):
            logs = log_samples(values, f"{label} version {v}")  # type: ignore[arg-type]
            if len(logs) == 0:
                raise ConfigError(f"{label} version {v} has no samples; leave sessions "
                                  "without results out of the history")
            sessions.append(logs)
        return sessions
    if any(nested):
        raise ConfigError(f"{label} mixes numbers and lists: give one session's samples "
                          "or a list of per-session sample lists")
    return [log_samples(items, label)]  # type: ignore[arg-type]


def _spread(spread: Spread, metric: Metric) -> list[list[np.ndarray]]:
    return [[log_samples(s, f"{metric.name} spread group {g} session {i}")
             for i, s in enumerate(group) if len(s)] for g, group in enumerate(spread)]


def _scarce(groups: list[np.ndarray], cur: list[np.ndarray], metric: Metric, min_samples: int,
            alpha: float) -> Comparison | None:
    nb, nc = sum(len(g) for g in groups), sum(len(c) for c in cur)
    if nb >= min_samples and nc >= min_samples:
        return None
    nan = math.nan
    return Comparison(
        metric=metric.name, verdict="inconclusive", relative_change=nan, ci_low=nan,
        ci_high=nan, confidence=1 - alpha, p_value=nan, n_baseline=nb, n_current=nc,
        reason=(f"{metric.name}: baseline has {nb} and current {nc} samples; "
                f"need at least {min_samples} on each side"),
        min_effect=metric.min_effect, higher_is_better=metric.higher_is_better,
    )
