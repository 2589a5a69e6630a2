"""Regression statistics: is a series slower, faster, unchanged, or too noisy to say?

Everything works on log values, so a change is a ratio (``-0.07`` is 7% lower) and
tok/s and seconds are treated alike; a metric's direction only decides which sign is
a regression. The baseline is one run's samples or, better, the samples of earlier
versions; ``shifts`` measures the change (a pooled t on logs with stalls set aside and
drift between versions allowed for) and ``verdict`` reads the verdict off its interval.
``compare_many`` and ``family.judge_family`` correct a whole session for multiplicity.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar, Union

import numpy as np

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.family import Correction, benjamini_hochberg, judge_family
from pytest_tokperf.stats.metric import (
    DECODE, DEFAULT_ALPHA, EFFICIENCY, PREFILL, TTFT, Metric, check_level,
)
from pytest_tokperf.stats.shifts import Shift, log_samples, shift_between
from pytest_tokperf.stats.verdict import Comparison, Outcome, judge

__all__ = [
    "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "Comparison", "Metric",
    "Outcome", "Shift", "benjamini_hochberg", "compare", "compare_many", "judge",
    "log_samples", "measure_shift",
]

Baseline = Union[Sequence[float], Sequence[Sequence[float]]]
K = TypeVar("K", bound=Hashable)


def compare(
    baseline: Baseline,
    current: Sequence[float],
    metric: Metric,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = 3,
) -> Comparison:
    """Judge ``current`` against ``baseline``: one run's samples, or earlier versions'.

    ``baseline`` is a flat list of samples (one run) or a list of per-version sample
    lists. Fewer than ``min_samples`` on a side gives "inconclusive"; NaN, inf, zero or
    negative samples raise ``ConfigError`` naming the value and its position.
    """
    _check(alpha, min_samples)
    groups, cur = _prepare(baseline, current, metric)
    scarce = _scarce(groups, cur, metric, min_samples, alpha)
    return scarce or judge(shift_between(groups, cur, _slow(metric)), metric, alpha=alpha)


def measure_shift(baseline: Baseline, current: Sequence[float], metric: Metric) -> Shift:
    """The shift behind ``compare``, at least 2 samples a side (else ``ConfigError``)."""
    groups, cur = _prepare(baseline, current, metric)
    if sum(len(g) for g in groups) < 2 or len(cur) < 2:
        raise ConfigError(f"{metric.name}: a shift needs at least 2 samples on each side")
    return shift_between(groups, cur, _slow(metric))


def compare_many(
    baseline: Mapping[K, Baseline],
    current: Mapping[K, Sequence[float]],
    metric: Metric | Mapping[K, Metric],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = 3,
    correction: Correction = "holm",
) -> dict[K, Comparison]:
    """``compare`` for many series, then ``judge_family`` over all of them at ``alpha``.

    Both mappings must have the same keys (else ``ConfigError`` naming the odd ones);
    ``metric`` is one metric for all or one per key. A series flagged alone but not
    after the correction is inconclusive and says so.
    """
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
        met = metric if isinstance(metric, Metric) else _metric_for(metric, key)
        single[key] = compare(baseline[key], current[key], met, alpha=alpha,
                              min_samples=min_samples)
    return judge_family(single, alpha=alpha, method=correction).comparisons


def _slow(metric: Metric) -> int:
    """The sign of a stall in log units: lower tok/s, longer seconds."""
    return -1 if metric.higher_is_better else 1


def _check(alpha: float, min_samples: int) -> None:
    check_level(alpha, "alpha")
    if min_samples < 2:
        raise ConfigError(f"min_samples is {min_samples!r}: a spread needs at least 2")


def _prepare(
    baseline: Baseline, current: Sequence[float], metric: Metric
) -> tuple[list[np.ndarray], np.ndarray]:
    items = list(baseline)
    nested = [isinstance(x, (Sequence, np.ndarray)) and not isinstance(x, str) for x in items]
    cur = log_samples(current, f"{metric.name} current")
    if items and all(nested):
        groups = []
        for v, samples in enumerate(items):
            label = f"{metric.name} baseline version {v}"
            logs = log_samples(samples, label)  # type: ignore[arg-type]
            if len(logs) == 0:
                raise ConfigError(f"{metric.name} baseline version {v} has no samples; "
                                  "leave versions without results out of the history")
            groups.append(logs)
        return groups, cur
    if any(nested):
        raise ConfigError(f"{metric.name} baseline mixes numbers and lists: give one "
                          "run's samples or a list of per-version sample lists")
    return [log_samples(items, f"{metric.name} baseline")], cur  # type: ignore[arg-type]


def _scarce(
    groups: list[np.ndarray], cur: np.ndarray, metric: Metric, min_samples: int, alpha: float
) -> Comparison | None:
    nb, nc = sum(len(g) for g in groups), len(cur)
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


def _metric_for(metrics: Mapping[K, Metric], key: K) -> Metric:
    if key not in metrics:
        raise ConfigError(f"no metric given for series {key!r}")
    return metrics[key]

