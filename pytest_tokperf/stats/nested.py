"""Repetitions nested in sessions: how every comparison's shift is measured.

A session is one stored run: one pytest session, one server start. Its repetitions share
the machine's state (a bandwidth phase, a neighbour on the cores, the clocks); sessions
do not. On log samples the model is

    log x[s, j] = level(side) + b[s] + e[s, j],    b[s] ~ N(0, tau^2),  e ~ N(0, sigma^2)

and ``shift_between`` measures the current side's level over the baseline's:

1. **Stalls** are set aside inside each session (``shifts.set_aside_stalls``): never a
   whole session.
2. **sigma^2** is the pooled within-session spread of every session given (both sides
   and the ``spread`` groups). A current side much noisier than the rest (F test,
   p < ``NOISY_LEVEL``: its repetitions disagree, say 3 of 5 stalled) keeps its own.
3. **tau^2**, the between-session spread, comes from how far sessions sit from their
   own side's level: baseline sessions around the baseline's, current sessions around
   the current's, and each ``spread`` group's around its own (sessions of other builds
   of the same series, which inform the spread and not the levels); with ``trend``,
   around a straight line through each group in order, so a slow slide is not spread. The between-session
   mean square is F-tested against sigma^2; when it is significant (p < ``DRIFT_LEVEL``)
   the session is the unit: the estimate is the difference of the two sides' mean
   session levels, its variance ``tau^2 (1/S_b + 1/S_c) + sigma^2 (mean(1/n)/S_b +
   mean(1/n)/S_c)`` with tau^2 by the ANOVA method of moments and Satterthwaite's df.
   With equal repetitions per session that is exactly Student's t on session means with
   (sessions - sides) df: two sessions of 5 repetitions count as 2 observations, not 10.
   When the sessions agree (the test does not reject), the within-session spread and its
   many degrees of freedom judge the pooled means: with 5 earlier runs and one current
   run of 5 repetitions, a t on the 6 session means has 4 df (t quantile 5.6 at alpha
   0.005) and would catch a 5% step at CV 2% about half the time; the pooled t catches
   it in over 95% (``benchmarks/bench_stats.py``). The price of pooling on a test is
   drift too small for the F test to see, which then raises false alarms at a rate
   above alpha (the benchmark's ``drift*`` model).
4. **Phase-dominated**: when the between-session part is ``PHASE_SHARE`` (80%) or more of
   the estimate's variance, more repetitions cannot help; ``verdict`` then says which
   steps the history cannot see and points at the same-run A/B.
5. **Ties are exact**: a session whose repetitions are identical (relative spread under
   ``TIE``) has no within-session spread, and its mean is its value, not a float sum. When
   no compared session has any spread and each side has one value, the comparison is
   ``exact``: the difference itself is judged against the minimum effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from pytest_tokperf.stats.groups import Groups
from pytest_tokperf.stats.shifts import Method, Shift, set_aside_stalls

DRIFT_LEVEL = 0.01
NOISY_LEVEL = 0.001
"""F-test levels: sessions that differ more than their repetitions explain, and a current
side much noisier than the rest (its repetitions disagree)."""
TIE = 1e-9
"""Log spread under which repetitions count as identical (a relative 1e-9: far below any
clock, far above float rounding)."""

Parts = dict[str, tuple[float, float, float]]  # name: (coefficient, estimate, df)


def shift_between(
    base: Sequence[np.ndarray], cur: Sequence[np.ndarray], slow: int = -1,
    spread: Sequence[Sequence[np.ndarray]] = (), *, trend: bool = False,
) -> Shift:
    """The shift of the ``cur`` sessions over the ``base`` sessions (log samples).

    ``slow`` is the sign of a stall (``shifts.set_aside_stalls``); ``spread`` holds groups
    of sessions (one group per other build) that inform sigma^2 and tau^2 only. With
    ``trend``, each group's sessions (in the order given) are measured around a straight
    line instead of their mean, so a slow slide in them is not counted as spread between
    sessions (the gate's comparison with the accepted level, ``drift``).
    """
    k, l = len(base), len(cur)
    extra = [s for group in spread for s in group]
    every = Groups.of([*base, *cur, *extra])
    kept, aside = set_aside_stalls(every, slow)
    aside = tuple(a for a in aside if a.version < k + l)
    side = np.array([0] * k + [1] * l
                    + [2 + g for g, group in enumerate(spread) for _ in group], dtype=np.int64)
    n, means, ss, df = _sessions(kept)
    nb, nc = sum(len(b) for b in base), sum(len(c) for c in cur)
    is_b, is_c = side == 0, side == 1
    if df[is_b | is_c].sum() == 0 and _one_value(means[is_b]) and _one_value(means[is_c]):
        d = float(means[is_c][0] - means[is_b][0])
        return Shift(d, 0.0, math.inf, nb, nc, "exact", 0.0, k, aside, math.nan, l)
    if _copied(n[is_b], df[is_b]) or _copied(n[is_c], df[is_c]):
        # One side's repetitions are all identical while the other's vary: a copied or
        # rounded figure, not a measured one; judging it by the other side's noise would
        # lend it a precision it does not have.
        d = float(means[is_c].mean() - means[is_b].mean())
        return Shift(d, math.nan, math.nan, nb, nc, "no spread", 0.0, k, aside, math.nan, l)
    ss_c, df_c = float(ss[is_c].sum()), float(df[is_c].sum())
    ss_o, df_o = float(ss[~is_c].sum()), float(df[~is_c].sum())
    df_w = df_o + df_c
    s2 = (ss_o + ss_c) / df_w if df_w else 0.0
    noisy = bool(df_o and df_c and ss_c / df_c > ss_o / df_o
                 and special.fdtrc(df_c, df_o, ss_c / df_c / (ss_o / df_o)) < NOISY_LEVEL)
    s2_o, s2_c = (ss_o / df_o, ss_c / df_c) if noisy else (s2, s2)

    # Between sessions: each group's sessions around the group's own level (or line).
    ss_between = c_total = 0.0
    w_o = w_c = 0.0  # between-session df of the groups whose sigma is s2_o / s2_c
    for g in np.unique(side):
        sel = side == g
        terms = 2 if trend and sel.sum() >= 3 else 1
        if sel.sum() <= terms:
            continue
        ss_g, c_g = _around(means[sel], n[sel], terms)
        ss_between += ss_g
        c_total += c_g
        if g == 1:
            w_c += sel.sum() - terms
        else:
            w_o += sel.sum() - terms
    df_between = w_o + w_c
    null = w_o * s2_o + w_c * s2_c
    drift_p = math.nan
    if df_between and df_w:
        drift_p = float(special.fdtrc(df_between, df_w, ss_between / null)) if null > 0 else 0.0
    elif df_between:
        drift_p = 0.0 if ss_between > 0 else 1.0
    tau2 = max(0.0, (ss_between - null) / c_total) if df_between else math.nan

    inv_b, inv_c = float((1 / n[is_b]).mean()) / k, float((1 / n[is_c]).mean()) / l
    pooled: Parts = {}
    if df_w:
        pooled = ({"spread": (1 / n[is_b].sum(), s2_o, df_o),
                   "current": (1 / n[is_c].sum(), s2_c, df_c)} if noisy
                  else {"spread": (1 / n[is_b].sum() + 1 / n[is_c].sum(), s2, df_w)})
    sessions: Parts = {}
    if df_between:
        a = 1 / k + 1 / l
        between = (a * df_between / c_total, ss_between / df_between, df_between)
        sessions = ({"between": between, "spread": (inv_b - a * w_o / c_total, s2_o, df_o),
                     "current": (inv_c - a * w_c / c_total, s2_c, df_c)} if noisy
                    else {"between": between,
                          "spread": (inv_b + inv_c - a * df_between / c_total, s2, df_w)})
    method: Method
    if not pooled and not sessions:
        return Shift(float(means[is_c].mean() - means[is_b].mean()), math.nan, math.nan,
                     nb, nc, "no spread", 0.0, k, aside, drift_p, l)
    use_sessions = bool(sessions) and (not pooled or (
        drift_p < DRIFT_LEVEL and _variance(sessions)[0] > _variance(pooled)[0]))
    share = 0.0
    if use_sessions:
        method, parts = "sessions", sessions
        d = float(means[is_c].mean() - means[is_b].mean())
        part_between = (1 / k + 1 / l) * tau2
        part_within = inv_b * s2_o + inv_c * s2_c
        share = part_between / (part_between + part_within) if part_between > 0 else 0.0
    else:
        method, parts = "pooled", pooled
        d = float((n * means)[is_c].sum() / n[is_c].sum()
                  - (n * means)[is_b].sum() / n[is_b].sum())
    var, dof = _variance(parts)
    return Shift(d, math.sqrt(var), dof, nb, nc, method, math.sqrt(s2_o), k, aside, drift_p,
                 l, math.sqrt(tau2) if df_between else math.nan, share)


def _sessions(kept: Groups) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per session: size, mean, within sum of squares and df (0 for identical ones)."""
    arrays = kept.arrays()
    n = np.array(kept.sizes, dtype=float)
    means = np.empty(len(arrays))
    ss = np.zeros(len(arrays))
    df = np.zeros(len(arrays))
    for i, a in enumerate(arrays):
        if len(a) < 2 or float(np.ptp(a)) <= TIE:
            means[i] = float(a[0])  # identical repetitions: the value, not a float sum
            continue
        means[i] = float(a.mean())
        ss[i] = float(((a - means[i]) ** 2).sum())
        df[i] = len(a) - 1.0
    return n, means, ss, df


def _around(means: np.ndarray, n: np.ndarray, terms: int) -> tuple[float, float]:
    """Sessions' weighted sum of squares around their level (``terms`` 1) or line (2),
    and the coefficient of tau^2 in its expectation: E[ss] = (S - terms) sigma^2 + c tau^2,
    c = N - trace((X'WX)^-1 X'W^2 X) with W the repetition counts (N - sum n^2 / N for a
    level)."""
    x = np.ones((len(means), terms))
    if terms == 2:
        x[:, 1] = np.arange(len(means), dtype=float)
    xw = x.T * n
    beta = np.linalg.solve(xw @ x, xw @ means)
    resid = means - x @ beta
    c = float(n.sum() - np.trace(np.linalg.solve(xw @ x, (xw * n) @ x)))
    return float((n * resid**2).sum()), c


def _copied(n: np.ndarray, df: np.ndarray) -> bool:
    """Sessions with repetitions to vary, all of them identical."""
    return bool((n >= 2).any() and df.sum() == 0)


def _one_value(means: np.ndarray) -> bool:
    return len(means) > 0 and float(np.ptp(means)) <= TIE


def _variance(parts: Parts) -> tuple[float, float]:
    """Sum of ``coefficient * estimate`` and its Satterthwaite degrees of freedom."""
    var = sum(c * v for c, v, _ in parts.values())
    denominator = sum((c * v) ** 2 / df for c, v, df in parts.values() if df > 0)
    return var, (var**2 / denominator if denominator > 0 else math.inf)
