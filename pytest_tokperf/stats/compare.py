"""Regression statistics: is a series slower, faster, unchanged, or too noisy to say?

Everything works on log values, so a change is a ratio (``-0.07`` is 7% lower) and
tok/s and seconds are treated alike; a metric's direction only decides which sign is
a regression. The baseline is one run's samples (Welch's t on logs) or, better, the
samples of earlier versions (a rank test that is exact on any noise and widens for
run-to-run drift); ``shifts`` has the tests and why they were chosen.

**The rule**, with ``CI`` the ``1 - alpha`` interval and ``m`` the metric's
``min_effect``:

* regression / improvement: significant (``p < alpha``; Benjamini-Hochberg across
  series in ``compare_many``) with an interval that excludes 0 on that side, the
  interval reaches past ``m`` on that side (the
  change is not shown smaller than ``m``) and the estimate is at least ``m / 2``
  (the data favour a change of ``m`` over none). A true step of exactly ``m`` is
  then caught with the test's power rather than the coin flip of a "point estimate
  beyond m" rule, and a lopsided interval (stalls) cannot flag a small estimate.
* unchanged: the interval lies inside ``(-m, +m)``; or significant but most likely
  smaller than ``m``; or not significant with the interval past ``m`` on one side.
* inconclusive: too few samples, or not significant with an interval spanning both
  ``-m`` and ``+m``: too noisy to decide either way.

**alpha = 0.005 by default.** Once the noise is comparable to ``m`` the minimum
effect stops filtering and the false-alarm rate is ``alpha`` itself (both
directions together), so 0.05 would cry wolf on one comparison in twenty; asv uses
0.002, Otava 0.001. At 5 repetitions against a 20-version history this still
catches >= 95% of 5% steps at CV 2% (benchmarks/bench_stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, Union

import numpy as np

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.shifts import Shift, log_samples, shift_between

__all__ = [
    "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "Comparison", "Metric",
    "Outcome", "Shift", "benjamini_hochberg", "compare", "compare_many", "judge",
    "log_samples", "measure_shift",
]

Outcome = Literal["regression", "improvement", "unchanged", "inconclusive"]
Baseline = Union[Sequence[float], Sequence[Sequence[float]]]
K = TypeVar("K", bound=Hashable)

DEFAULT_ALPHA = 0.005
_EXACT_NOTE = " (identical samples on each side: the difference is exact)"


@dataclass(frozen=True, slots=True)
class Metric:
    """A measured figure: its direction and the smallest change worth flagging."""

    name: str
    higher_is_better: bool
    min_effect: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.min_effect < 1:
            raise ConfigError(
                f"min_effect for {self.name!r} is {self.min_effect!r}: give a fraction "
                "between 0 and 1, e.g. 0.05 for 5%"
            )


DECODE = Metric("decode", higher_is_better=True)
PREFILL = Metric("prefill", higher_is_better=True)
TTFT = Metric("ttft", higher_is_better=False)
EFFICIENCY = Metric("efficiency", higher_is_better=True)


@dataclass(frozen=True, slots=True)
class Comparison:
    """The verdict on one series, with the figures behind it.

    ``relative_change`` is current / baseline - 1; ``ci_low``/``ci_high`` bound it at
    ``confidence``. Too few samples leave the figures NaN and the verdict inconclusive.
    """

    metric: str
    verdict: Outcome
    relative_change: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    n_baseline: int
    n_current: int
    reason: str

    @property
    def regressed(self) -> bool:
        return self.verdict == "regression"


def compare(
    baseline: Baseline,
    current: Sequence[float],
    metric: Metric,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = 3,
) -> Comparison:
    """Judge ``current`` against ``baseline``: one run's samples, or earlier versions'.

    ``baseline`` is a flat list of samples (Welch on logs) or a list of per-version
    sample lists (rank test with a drift check; see the module doc). Fewer than
    ``min_samples`` on a side gives "inconclusive"; NaN, inf, zero or negative
    samples raise ``ConfigError`` naming the value and its position.
    """
    _check_level(alpha, "alpha")
    if min_samples < 2:
        raise ConfigError(f"min_samples is {min_samples!r}: a spread needs at least 2")
    groups, cur = _prepare(baseline, current, metric)
    scarce = _scarce(groups, cur, metric, min_samples, alpha)
    return scarce or judge(shift_between(groups, cur, alpha), metric, alpha=alpha)


def measure_shift(
    baseline: Baseline, current: Sequence[float], metric: Metric, *, alpha: float = DEFAULT_ALPHA
) -> Shift:
    """The shift behind ``compare``, at least 2 samples a side (else ``ConfigError``)."""
    _check_level(alpha, "alpha")
    groups, cur = _prepare(baseline, current, metric)
    if sum(len(g) for g in groups) < 2 or len(cur) < 2:
        raise ConfigError(f"{metric.name}: a shift needs at least 2 samples on each side")
    return shift_between(groups, cur, alpha)


def judge(
    shift: Shift, metric: Metric, *, alpha: float = DEFAULT_ALPHA,
    significant: bool | None = None, note: str = "",
) -> Comparison:
    """Apply the module's decision rule; ``significant`` overrides ``p < alpha``."""
    p = shift.p_value
    sig = p < alpha if significant is None else significant
    d = shift.log_shift
    rel, lo, hi = _ratio(d), _ratio(shift.log_low), _ratio(shift.log_high)
    m = metric.min_effect
    figures = f"{metric.name} {_pct(rel)} [{_pct(lo)}, {_pct(hi)}], p={_p(p, alpha)}"
    verdict: Outcome
    if sig and d != 0:
        # The interval must also exclude no change: the rank test's p and the interval
        # come from different methods, and a flag both do not back is noise.
        excludes_zero = hi < 0 if d < 0 else lo > 0
        if abs(rel) >= m / 2 and abs(lo if d < 0 else hi) >= m and excludes_zero:
            worse = (d < 0) == metric.higher_is_better
            verdict = "regression" if worse else "improvement"
            why = f"{figures} < {_p(alpha)} and the change reaches the {m:.0%} minimum effect"
        else:
            verdict = "unchanged"
            why = f"{figures}: real but most likely smaller than the {m:.0%} minimum effect"
    elif -m < lo and hi < m:
        verdict, why = "unchanged", f"{figures}: the interval lies within ±{m:.0%}"
    elif lo <= -m and hi >= m:
        verdict = "inconclusive"
        why = (f"{figures}: too noisy to decide at {shift.n_baseline} vs {shift.n_current} "
               f"samples (the interval spans ±{m:.0%}); add repetitions")
    else:
        verdict, why = "unchanged", f"{figures}: no significant change"
    return Comparison(
        metric=metric.name, verdict=verdict, relative_change=rel, ci_low=lo, ci_high=hi,
        confidence=shift.confidence, p_value=p, n_baseline=shift.n_baseline,
        n_current=shift.n_current, reason=why + _EXACT_NOTE * (shift.method == "exact") + note,
    )


def benjamini_hochberg(p_values: Sequence[float], q: float = DEFAULT_ALPHA) -> list[bool]:
    """Which hypotheses to reject so the expected share of false discoveries is <= q."""
    _check_level(q, "q")
    for i, p in enumerate(p_values):
        if not 0 <= p <= 1:  # also catches NaN
            raise ConfigError(f"p_values[{i}] is {p!r}: p-values lie between 0 and 1")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    cut = 0
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= rank * q / m:
            cut = rank
    rejected = set(order[:cut])
    return [i in rejected for i in range(m)]


def compare_many(
    baseline: Mapping[K, Baseline],
    current: Mapping[K, Sequence[float]],
    metric: Metric | Mapping[K, Metric],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = 3,
) -> dict[K, Comparison]:
    """``compare`` for many series, significance by Benjamini-Hochberg at ``alpha``.

    Both mappings must have the same keys (else ``ConfigError`` naming the odd ones);
    ``metric`` is one metric for all or one per key. Intervals are not widened for
    multiplicity; a series significant alone but not after correction says so.
    """
    _check_level(alpha, "alpha")
    if min_samples < 2:
        raise ConfigError(f"min_samples is {min_samples!r}: a spread needs at least 2")
    only_b = [k for k in baseline if k not in current]
    only_c = [k for k in current if k not in baseline]
    if only_b or only_c:
        raise ConfigError(
            f"series keys differ: only in baseline {only_b!r}, only in current {only_c!r}; "
            "compare the common keys and report the others as new or missing"
        )
    out: dict[K, Comparison] = {}
    shifts: dict[K, tuple[Shift, Metric]] = {}
    for key in current:
        met = metric if isinstance(metric, Metric) else _metric_for(metric, key)
        groups, cur = _prepare(baseline[key], current[key], met)
        scarce = _scarce(groups, cur, met, min_samples, alpha)
        if scarce:
            out[key] = scarce
        else:
            shifts[key] = (shift_between(groups, cur, alpha), met)
    flags = benjamini_hochberg([s.p_value for s, _ in shifts.values()], alpha)
    for (key, (shift, met)), flag in zip(shifts.items(), flags):
        note = "" if flag or shift.p_value >= alpha else (
            f" (not significant after correcting for {len(shifts)} series)")
        out[key] = judge(shift, met, alpha=alpha, significant=flag, note=note)
    return {k: out[k] for k in current}


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
    )


def _metric_for(metrics: Mapping[K, Metric], key: K) -> Metric:
    if key not in metrics:
        raise ConfigError(f"no metric given for series {key!r}")
    return metrics[key]


def _check_level(x: float, name: str) -> None:
    if not 0 < x < 1:
        raise ConfigError(f"{name} is {x!r}: give a probability between 0 and 1, e.g. 0.01")


def _ratio(log_shift: float) -> float:
    return math.expm1(log_shift) if log_shift < 700 else math.inf


def _pct(x: float) -> str:
    if math.isinf(x):
        return "+∞"
    return f"{x * 100:+.1f}%".replace("-", "−")


def _p(p: float, alpha: float | None = None) -> str:
    """p to two figures, more when rounding would move it across ``alpha``."""
    if p == 0:
        return "0"
    if p < 1e-3:
        return f"{p:.1e}"
    for digits in (2, 3, 4):
        text = f"{p:.{digits}g}"
        if alpha is None or (float(text) < alpha) == (p < alpha):
            break
    return text
