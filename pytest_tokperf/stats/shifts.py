"""How a shift is measured: one t statistic on log samples, robust to stalls and drift.

Every input is log samples (``log_samples`` validates and converts), so a shift is a
log ratio and tok/s and seconds are treated alike. ``shift_between`` measures the
current version against one earlier run or several earlier versions:

1. **Stalls are set aside, and said so.** A repetition slower than its level by more
   than ``STALL_SDS`` noise-SDs and by at least 15% (``STALL_MIN``) is a stall: a 25%
   stall is 12 SDs out at CV 2%, a Gaussian sample 5 SDs out happens once in millions,
   and two clock states a few percent apart stay noise. Only the slow side goes (lower
   tok/s, longer seconds). The noise SD is the lower quartile of the within-version
   pairwise differences, which holds while 3 pairs in 4 are spoiled. Baseline samples are
   measured from the baseline's median, so a version with most repetitions stalled
   still shows them; the current run from its own median, keeping a majority, so a real
   change of level is never set aside. When more than ``MAX_SET_ASIDE`` of all samples
   would go, they are a second mode, not stalls, and all are kept.
2. **The spread is the pooled within-version spread** of every version, the current
   one included: with 3-5 repetitions a side, Welch's separate spreads leave 2-4
   degrees of freedom and a t quantile near 6 at alpha = 0.005; pooling 20-50 samples
   gives a t near 3, so a 5% step is caught at CV 2% with 5 repetitions. A current run
   much noisier than the baseline's versions (F test, p < ``NOISY_LEVEL``: its
   repetitions disagree, say 3 of 5 stalled) keeps its own spread and degrees of freedom.
3. **Drift between versions widens the interval.** When the earlier versions' means
   differ more than their repetitions explain (one-way ANOVA F, p < ``DRIFT_LEVEL``),
   the current version is one more draw of that spread: its variance gains the
   between-version component (method of moments, Satterthwaite's df). With 5 earlier
   versions this test misses drift as small as the repetition noise of a version mean;
   such drift then raises false alarms (``benchmarks/perf/bench_stats.py --generator check``).

The estimate, its standard error and df give the p-value and the interval at any level
from one t distribution, so an interval excludes no change exactly when p < alpha, and
a comparison can be re-judged at a stricter level (``family.judge_family``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.groups import Groups

Method = Literal["pooled", "versions", "no spread"]

STALL_SDS = 5.0
STALL_MIN = -math.log(0.85)
"""A stall is also at least 15% slower than the level (in log units): two clock states a
few percent apart are noise to keep, not stalls to drop."""
MAX_SET_ASIDE = 0.3
DRIFT_LEVEL = 0.01
NOISY_LEVEL = 0.001
"""F-test levels: baseline versions that differ more than their repetitions explain, and
a current run much noisier than the baseline's versions (its repetitions disagree)."""
MEDIAN_ABS_DIFF = 0.9539
"""Median of ``|X - Y|`` for X, Y independent unit normals: pairwise spread -> SD."""
QUARTILE_ABS_DIFF = 0.4506
"""Lower quartile of ``|X - Y|`` for X, Y independent unit normals."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """A repetition left out as a stall: ``version`` indexes the groups given (the
    current version is the last), ``deviation`` is relative to its version's median."""

    version: int
    position: int
    value: float
    deviation: float


@dataclass(frozen=True, slots=True)
class Shift:
    """Current over baseline in log units, with what it takes to judge it at any level.

    ``log_shift`` is the estimate, ``std_error`` and ``df`` its t scale; ``noise_cv`` is
    the pooled within-version log SD; ``versions`` counts the baseline versions;
    ``drift_p`` is the ANOVA p that the baseline versions differ (NaN for one version).
    """

    log_shift: float
    std_error: float
    df: float
    n_baseline: int
    n_current: int
    method: Method
    noise_cv: float
    versions: int = 1
    set_aside: tuple[SetAside, ...] = ()
    drift_p: float = math.nan

    @property
    def p_value(self) -> float:
        """Two-sided t p-value of no change (NaN without a spread)."""
        if not self.std_error > 0:
            return math.nan
        return float(min(1.0, 2 * special.stdtr(self.df, -abs(self.log_shift) / self.std_error)))

    def interval(self, alpha: float) -> tuple[float, float]:
        """The ``1 - alpha`` interval of ``log_shift`` (NaN without a spread)."""
        if not self.std_error > 0:
            return math.nan, math.nan
        half = float(special.stdtrit(self.df, 1 - alpha / 2)) * self.std_error
        return self.log_shift - half, self.log_shift + half


def log_samples(values: Sequence[float], label: str) -> np.ndarray:
    """Natural logs of positive finite samples; else ``ConfigError`` naming ``label[i]``."""
    if all(_is_number(v) for v in values):
        arr = np.asarray(values, dtype=float)
        bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
        if not len(bad):
            logs: np.ndarray = np.log(arr)
            return logs
        first = int(bad[0])
    else:
        first = next(i for i, v in enumerate(values) if not _is_number(v))
    raise ConfigError(
        f"{label}[{first}] is {values[first]!r}: samples must be finite numbers > 0; "
        "drop failed or empty runs instead of recording them"
    )


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def robust_spread(groups: Groups) -> float:
    """Within-version log SD from the lower quartile of the pairwise differences.

    One stall in a version of 3 spoils 2 of its 3 pairs, so with stalls in many versions
    the median pair is a stall; the lower quartile holds until 3 pairs in 4 are spoiled.
    NaN: no version has 2 samples.
    """
    diffs = groups.pair_differences()
    if not len(diffs):
        return math.nan
    return float(np.quantile(diffs, 0.25)) / QUARTILE_ABS_DIFF


def set_aside_stalls(
    groups: Groups, slow: int, centres: np.ndarray | None = None,
    keep: np.ndarray | None = None,
) -> tuple[Groups, tuple[SetAside, ...]]:
    """The groups without their stalls (rule in the module doc), and what was left out.

    ``slow`` is the sign of a stall in log units (-1: a stall lowers the figure, as for
    tok/s; +1: it raises it, as for seconds); ``centres`` are the levels each group's
    samples are measured from (default: each group's median), ``keep`` how many samples
    each group keeps at least (default: a majority; a group with more far samples keeps
    them all).
    """
    scale = robust_spread(groups)
    if not scale > 0:
        return groups, ()
    if centres is None:
        centres = groups.medians()
    ids = groups.ids
    far = slow * (groups.x - centres[ids]) > max(STALL_SDS * scale, STALL_MIN)
    total = int(far.sum())
    if total == 0 or total > MAX_SET_ASIDE * len(groups.x):
        return groups, ()
    sizes = np.array(groups.sizes)
    if keep is None:
        keep = sizes - (sizes - 1) // 2
    counts = np.bincount(ids[far], minlength=len(sizes))
    drop = far & (counts <= sizes - keep)[ids]
    if not drop.any():
        return groups, ()
    starts = np.concatenate([[0], np.cumsum(groups.sizes)[:-1]])
    aside = tuple(
        SetAside(int(ids[i]), int(i - starts[ids[i]]), math.exp(groups.x[i]),
                 math.expm1(groups.x[i] - centres[ids[i]]))
        for i in np.flatnonzero(drop))
    return groups.keep(~drop), aside


def shift_between(groups: Sequence[np.ndarray], cur: np.ndarray, slow: int = -1) -> Shift:
    """The shift of ``cur`` over the baseline ``groups`` (log samples; one group: a run).

    ``slow`` is the sign of a stall (see ``set_aside_stalls``). Baseline samples are
    measured from the baseline's median (a settled baseline has one level), the current
    ones from their own.
    """
    k = len(groups)
    every = Groups.of([*groups, cur])
    nb_given, nc_given = len(every.x) - len(cur), len(cur)
    centres = np.full(k + 1, float(np.median(every.x[:nb_given])))
    centres[-1] = float(np.median(cur))
    # Baseline versions are measured from the baseline's level, so a version with most
    # repetitions stalled still shows them; the current keeps a majority: a real change
    # of level is never set aside.
    sizes_given = np.array(every.sizes)
    keep = np.ones_like(sizes_given)
    keep[-1] = sizes_given[-1] - (sizes_given[-1] - 1) // 2
    kept, aside = set_aside_stalls(every, slow, centres, keep)
    sizes = np.array(kept.sizes, dtype=float)
    means = kept.means()
    dev = kept.x - means[kept.ids]
    ss = np.bincount(kept.ids, dev * dev, k + 1)
    nb, nc = int(sizes[:k].sum()), int(sizes[k])
    ss_b, df_b = float(ss[:k].sum()), nb - k
    ss_c, df_c = float(ss[k]), nc - 1
    base_mean = float(kept.x[:nb].mean())
    d = float(means[k]) - base_mean
    if not ss_b + ss_c > 0 or (df_b and not ss_b > 0) or (df_c and not ss_c > 0):
        # Timed repetitions always vary: identical ones are a copied or rounded figure.
        return Shift(d, math.nan, math.nan, nb_given, nc_given, "no spread", 0.0, k, aside)
    s2 = (ss_b + ss_c) / (df_b + df_c)
    ref = ss_b / df_b if df_b and ss_b > 0 else s2
    # A current run noisier than the baseline's versions (its repetitions disagree, say
    # 3 of 5 stalled) keeps its own spread: pooling would lend it the baseline's calm.
    noisy = bool(df_b and df_c and ss_c / df_c > ref
                 and special.fdtrc(df_c, df_b, ss_c / df_c / ref) < NOISY_LEVEL)
    spread = ref if noisy else s2
    spread_df = df_b if noisy else df_b + df_c
    # Var(d) = sum of coefficient * estimate; estimates: the pooled spread, the current's
    # own spread (noisy runs only) and the spread of the version means (drift only).
    own = {"current": (1 / nc, ss_c / df_c, float(df_c))} if noisy else {}
    calm = {"spread": (1 / nb + (0 if noisy else 1 / nc), spread, float(spread_df)), **own}
    parts, drift_p = calm, math.nan
    method: Method = "pooled"
    if k >= 2:
        between = float((sizes[:k] * (means[:k] - base_mean) ** 2).sum())
        drift_p = float(special.fdtrc(k - 1, spread_df, between / (k - 1) / spread))
        if drift_p < DRIFT_LEVEL:
            # The current version is one more draw of the versions' spread: Var(mean_c -
            # mean of version means) = (1 + 1/k) var(version means) - mean(1/n_v) s2 + s2_c/nc.
            inv = float((1 / sizes[:k]).mean())
            drifting = {"versions": (1 + 1 / k, float(means[:k].var(ddof=1)), k - 1.0),
                        "spread": ((0 if noisy else 1 / nc) - inv, spread, float(spread_df)),
                        **own}
            if _variance(drifting)[0] > _variance(calm)[0]:
                parts, method = drifting, "versions"
                d = float(means[k] - means[:k].mean())
    var, df = _variance(parts)
    return Shift(d, math.sqrt(var), df, nb_given, nc_given, method, math.sqrt(spread), k,
                 aside, drift_p)


def _variance(parts: dict[str, tuple[float, float, float]]) -> tuple[float, float]:
    """Sum of ``coefficient * estimate`` and its Satterthwaite degrees of freedom."""
    var = sum(c * v for c, v, _ in parts.values())
    denominator = sum((c * v) ** 2 / df for c, v, df in parts.values() if df > 0)
    return var, (var**2 / denominator if denominator > 0 else math.inf)
