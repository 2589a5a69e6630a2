"""Noise calibration: how noisy is a series, and what change can it resolve?

``noise`` estimates the within-version spread from stored repetitions;
``detectable_change`` turns a spread and a repetition count into the smallest change
the comparison catches with a given power; ``repetitions_needed`` inverts that;
``format_noise`` says it in one line a user can act on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.compare import DEFAULT_ALPHA, Metric, log_samples

_MEDIAN_ABS_DIFF = 0.9539  # median |X - Y| for X, Y independent unit normals


@dataclass(frozen=True, slots=True)
class NoiseEstimate:
    """Robust within-version spread: ``cv`` is the standard deviation of log values
    (about the coefficient of variation for spreads of a few percent)."""

    cv: float
    n_versions: int
    n_samples: int


def noise(samples_by_version: Sequence[Sequence[float]]) -> NoiseEstimate:
    """Pooled robust CV from the pairwise log differences inside each version.

    The median of ``|log x_i - log x_j|`` over all within-version pairs, scaled to a
    standard deviation, ignores occasional stalls and drift between versions and works
    from two samples a version. Versions with one sample carry no spread and count
    only in ``n_samples``.
    """
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
    cv = float(np.median(np.concatenate(diffs))) / _MEDIAN_ABS_DIFF
    return NoiseEstimate(cv=cv, n_versions=used, n_samples=total)


def detectable_change(
    cv: float, n: int, alpha: float = DEFAULT_ALPHA, power: float = 0.8,
    *, n_baseline: int | None = None,
) -> float:
    """Smallest relative change detected with probability ``power`` at level ``alpha``.

    Two-sided t test on logs with ``n`` current and ``n_baseline`` (default ``n``)
    baseline samples of log-sd ``cv``, via the noncentral t. For a history baseline
    pass its total sample count: the normal-scores test used there is as efficient as
    the t test on normal noise, so the figure carries over.
    """
    nb = n if n_baseline is None else n_baseline
    for name, value in (("alpha", alpha), ("power", power)):
        if not 0 < value < 1:
            raise ConfigError(f"{name} is {value!r}: give a probability between 0 and 1")
    if not (cv >= 0 and math.isfinite(cv)):
        raise ConfigError(f"cv is {cv!r}: give a finite spread >= 0, e.g. 0.02 for 2%")
    if n < 2 or nb < 2:
        raise ConfigError(f"repetitions are {n!r} and {nb!r}: a spread needs at least 2 a side")
    if cv == 0:
        return 0.0
    w = 1 / n + 1 / nb
    df = n + nb - 2  # Welch's df when the spreads are equal, and the pooled test's
    crit = float(sps.t.ppf(1 - alpha / 2, df))

    def shortfall(ncp: float) -> float:
        return float(sps.nct.sf(crit, df, ncp)) - power  # the far tail adds < alpha / 2

    top = crit + 3.0
    while shortfall(top) < 0:
        top *= 1.5
    ncp = float(optimize.brentq(shortfall, 0.0, top))
    return math.expm1(ncp * cv * math.sqrt(w))


def repetitions_needed(
    cv: float, change: float, alpha: float = DEFAULT_ALPHA, power: float = 0.8
) -> int:
    """Fewest repetitions a side for ``detectable_change`` to reach ``change``."""
    if not change > 0:
        raise ConfigError(f"change is {change!r}: give a relative change > 0, e.g. 0.05")
    lo, hi = 2, 2
    while detectable_change(cv, hi, alpha, power) > change:
        lo, hi = hi + 1, hi * 2
        if hi > 1 << 20:
            raise ConfigError(f"a {change:.2%} change at CV {cv:.2%} needs over a million "
                              "repetitions; accept a larger minimum effect")
    while lo < hi:
        mid = (lo + hi) // 2
        if detectable_change(cv, mid, alpha, power) <= change:
            hi = mid
        else:
            lo = mid + 1
    return hi


def format_noise(
    metric: Metric, estimate: NoiseEstimate | float, n: int,
    alpha: float = DEFAULT_ALPHA, power: float = 0.8,
) -> str:
    """One line: the series' noise, what ``n`` repetitions resolve, and what to do."""
    cv = estimate.cv if isinstance(estimate, NoiseEstimate) else estimate
    d = detectable_change(cv, n, alpha, power)
    head = f"{metric.name} CV {cv:.1%}: smallest detectable change at {n} reps ≈ {d:.1%}"
    if d <= metric.min_effect:
        return head + f"; enough for the {metric.min_effect:.0%} minimum effect"
    need = repetitions_needed(cv, metric.min_effect, alpha, power)
    return head + f"; add reps for finer ({need} resolve {metric.min_effect:.0%})"
