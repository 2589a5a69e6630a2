"""Noise calibration: how noisy a series is, and what change it can resolve."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.metric import DEFAULT_ALPHA, Metric
from pytest_tokperf.stats.shifts import MEDIAN_ABS_DIFF, Shift, log_samples

_MAX_REPS = 1 << 20


@dataclass(frozen=True, slots=True)
class NoiseEstimate:
    """Robust within-version spread; ``cv`` is the standard deviation of log values."""

    cv: float
    n_versions: int
    n_samples: int


def noise(samples_by_version: Sequence[Sequence[float]]) -> NoiseEstimate:
    """Pooled robust CV of within-version log differences; lone samples count in ``n_samples``."""
    diffs: list[np.ndarray] = []
    used = total = 0
    for v, samples in enumerate(samples_by_version):
        logs = log_samples(samples, f"version {v}")
        total += len(logs)
        if len(logs) >= 2:
            used += 1
            i, j = np.triu_indices(len(logs), k=1)
            diffs.append(np.abs(logs[i] - logs[j]))
    if not diffs:
        raise ConfigError(
            "noise needs a version with at least 2 samples; run with more repetitions"
        )
    cv = float(np.median(np.concatenate(diffs))) / MEDIAN_ABS_DIFF
    return NoiseEstimate(cv=cv, n_versions=used, n_samples=total)


def detectable_change(cv: float, n: int, alpha: float = DEFAULT_ALPHA, power: float = 0.8,
                      *, n_baseline: int | None = None, versions: int = 1) -> float:
    """Smallest relative change caught with probability ``power`` at ``alpha`` (two-sided t
    on logs, ``n`` a side, log-sd ``cv``)."""
    nb = n if n_baseline is None else n_baseline
    _check(alpha, power, cv)
    if n < 2 or nb < 2:
        raise ConfigError(f"repetitions are {n!r} and {nb!r}: a spread needs at least 2 a side")
    if versions < 1 or versions > nb:
        raise ConfigError(f"versions is {versions!r}: give 1 to {nb} (the baseline samples)")
    return 0.0 if cv == 0 else math.expm1(_log_detectable(cv, n, nb, versions, alpha, power))


def detectable_shift(shift: Shift, alpha: float = DEFAULT_ALPHA, power: float = 0.8) -> float:
    """The smallest change this comparison would catch (at ``alpha / shift.tests``)."""
    _check(alpha, power)
    if not shift.std_error > 0:
        return math.nan
    return math.expm1(min(700.0, noncentrality(shift.df, alpha / shift.tests, power) * shift.std_error))


def repetitions_needed(cv: float, change: float, alpha: float = DEFAULT_ALPHA,
                       power: float = 0.8, *, versions: int = 1) -> int:
    """Fewest repetitions per version for ``detectable_change`` to reach ``change``."""
    if not change > 0:
        raise ConfigError(f"change is {change!r}: give a relative change > 0, e.g. 0.05")
    _check(alpha, power, cv)
    if versions < 1:
        raise ConfigError(f"versions is {versions!r}: give at least 1")
    target = math.log1p(change)
    lo, hi = 2, 2
    while _log_detectable(cv, hi, versions * hi, versions, alpha, power) > target:
        lo, hi = hi + 1, hi * 2
        if hi > _MAX_REPS:
            raise ConfigError(f"a {change:.2%} change at CV {cv:.2%} needs over a million "
                              "repetitions; accept a larger minimum effect")
    while lo < hi:
        mid = (lo + hi) // 2
        if _log_detectable(cv, mid, versions * mid, versions, alpha, power) <= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


def format_noise(metric: Metric, estimate: NoiseEstimate | float, n: int,
                 alpha: float = DEFAULT_ALPHA, power: float = 0.8) -> str:
    """One line: the series' noise, what ``n`` repetitions resolve, and what to do."""
    cv = estimate.cv if isinstance(estimate, NoiseEstimate) else estimate
    d = detectable_change(cv, n, alpha, power)
    head = f"{metric.name} CV {cv:.1%}: smallest detectable change at {n} reps ≈ {d:.1%}"
    if d <= metric.min_effect:
        return head + f"; enough for the {metric.min_effect:.0%} minimum effect"
    need = repetitions_needed(cv, metric.min_effect, alpha, power)
    return head + f"; add reps for finer ({need} resolve {metric.min_effect:.0%})"


def _log_detectable(cv: float, n: int, nb: int, versions: int, alpha: float,
                    power: float) -> float:
    return noncentrality(n + nb - 1 - versions, alpha, power) * cv * math.sqrt(1 / n + 1 / nb)


def noncentrality(df: float, alpha: float, power: float) -> float:
    """Noncentrality at which a two-sided level-``alpha`` t test has ``power``."""
    crit = float(special.stdtrit(df, 1 - alpha / 2))
    return float(special.nctdtrinc(df, 1 - power, crit))


def _check(alpha: float, power: float, cv: float = 0.0) -> None:
    for name, value in (("alpha", alpha), ("power", power)):
        if not 0 < value < 1:
            raise ConfigError(f"{name} is {value!r}: give a probability between 0 and 1")
    if not (cv >= 0 and math.isfinite(cv)):
        raise ConfigError(f"cv is {cv!r}: give a finite spread >= 0, e.g. 0.02 for 2%")
