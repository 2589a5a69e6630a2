"""Repetitions nested in sessions: how every comparison's shift is measured.

A session is one stored run: one pytest session, one server start. Its repetitions share
the machine's state (a bandwidth phase, a neighbour on the cores, the clocks); sessions
do not. On log samples the model is

    log x[s, j] = level(side) + b[s] + e[s, j],    b[s] ~ N(0, tau^2),  e ~ N(0, sigma^2)

and ``shift_between`` measures the current side's level over the baseline's:

1. **Stalls** are set aside inside each session (``shifts.set_aside_stalls``): never a
   whole session.
2. **sigma^2** is the pooled within-session spread of every session given (both sides
   and the ``spread`` groups). A session whose repetitions disagree far more than the
   others' (F test against the pool of the others, p < ``NOISY_LEVEL``: say 3 of 5
   stalled, which no rule inside the session can tell from a slow session) is
   *disturbed*: kept, and judged by its own spread (its mean weighs as little as that
   spread says), out of the pool and out of the evidence that sessions differ.
3. **tau^2**, the between-session spread, comes from how far sessions sit from their
   own side's level: baseline sessions around the baseline's, current sessions around
   the current's, and each ``spread`` group's around its own (sessions of other builds
   of the same series, which inform the spread and not the levels; undisturbed sessions
   only); with ``trend``,
   around a straight line through each group in order, so a slow slide is not spread. The between-session
   mean square is F-tested against sigma^2; when it is significant (p < ``DRIFT_LEVEL``)
   the session is the unit: the estimate is the difference of the two sides' levels, each
   the mean of its sessions' means weighted by ``1 / (tau^2 + sigma_s^2 / n_s)`` (equal
   weights when the sessions are alike), its variance the matching sum, with tau^2 by
   the ANOVA method of moments and Satterthwaite's df.
   With equal repetitions per session that is exactly Student's t on session means with
   (sessions - sides) df: two sessions of 5 repetitions count as 2 observations, not 10.
   When the sessions agree (the test does not reject), the within-session spread and its
   many degrees of freedom judge the pooled means: with 5 earlier runs and one current
   run of 5 repetitions, a t on the 6 session means has 4 df (t quantile 5.6 at alpha
   0.005) and would catch a 5% step at CV 2% about half the time; the pooled t catches
   it in over 95% (``benchmarks/perf/bench_stats.py``). The price of pooling on a test is
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
from dataclasses import dataclass

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
    figures = Sessions.of(kept)
    n, means, df = figures.n, figures.means, figures.df
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
    s2, df_w, own = figures.s2, figures.df_w, figures.own

    # Between sessions: each group's sessions around the group's own level (or line),
    # each weighted by the precision of its mean (n / sigma_s^2): Cochran's Q, which is the
    # ANOVA's between-session sum of squares over sigma^2 when the sessions are alike,
    # while a disturbed session counts only as far as its own spread lets it.
    prec = n / own if df_w else n
    q = c_total = df_between = 0.0
    for g in np.unique(side):
        sel = side == g
        terms = 2 if trend and sel.sum() >= 3 else 1
        if sel.sum() <= terms:
            continue
        q_g, c_g = _around(means[sel], prec[sel], terms)
        q += q_g
        c_total += c_g
        df_between += sel.sum() - terms
    drift_p = math.nan
    if df_between and df_w:
        drift_p = float(special.fdtrc(df_between, df_w, q / df_between))
    elif df_between:
        drift_p = 0.0 if q > 0 else 1.0
    # tau^2 by the method of moments (DerSimonian-Laird): E[Q] = df + tau^2 c_total.
    null = df_between if df_w else 0.0
    tau2 = max(0.0, (q - null) / c_total) if df_between else math.nan
    compared = is_b | is_c
    between = (q / df_between, df_between, c_total, null / c_total) if df_between else None
    pooled = _estimate(0.0, side, n, means, own, figures, None) if df_w else None
    sessions = (_estimate(tau2, side, n, means, own, figures, between)
                if df_between and tau2 > 0 else None)
    disturbed = tuple(int(i) for i in np.flatnonzero(figures.disturbed & compared))
    if pooled is None and sessions is None:
        return Shift(float(means[is_c].mean() - means[is_b].mean()), math.nan, math.nan,
                     nb, nc, "no spread", 0.0, k, aside, drift_p, l)
    use_sessions = sessions is not None and (pooled is None or (
        drift_p < DRIFT_LEVEL and _variance(sessions[1])[0] > _variance(pooled[1])[0]))
    method: Method = "sessions" if use_sessions else "pooled"
    d, parts, share = (sessions if use_sessions else pooled)  # type: ignore[misc]
    var, dof = _variance(parts)
    return Shift(d, math.sqrt(var), dof, nb, nc, method, math.sqrt(s2), k, aside, drift_p,
                 l, math.sqrt(tau2) if df_between else math.nan, share, 1, disturbed)


def _estimate(
    tau2: float, side: np.ndarray, n: np.ndarray, means: np.ndarray, own: np.ndarray,
    figures: Sessions, between: tuple[float, float, float, float] | None,
) -> tuple[float, Parts, float]:
    """Current minus baseline level, each side's sessions weighted by the inverse of their
    mean's variance ``tau2 + sigma_s^2 / n_s`` (sigma_s^2 the pooled spread, or a disturbed
    session's own); the variance of the difference as ``coefficient * estimate`` parts for
    Satterthwaite; and the part of it that the spread between sessions makes up.

    ``between`` is (Q / df, df, c, offset) with tau^2 = (Q / df) * df / c - offset: the
    Q part counts with its df, the offset (sigma^2's share of E[Q], in tau^2 units)
    against the pooled spread."""
    v = tau2 + own / n
    w = np.where(side < 2, 1 / v, 0.0)
    level = np.zeros(2)
    share_of = np.zeros(len(n))
    for g in (0, 1):
        sel = side == g
        total = float(w[sel].sum())
        level[g] = float((w * means)[sel].sum()) / total
        share_of[sel] = w[sel] / total
    a = share_of**2  # Var(d) = sum of a_s (tau^2 + sigma_s^2 / n_s)
    normal = ~figures.disturbed
    parts: Parts = {"spread": (float((a / n)[normal].sum()), figures.s2, figures.df_w)}
    for i in np.flatnonzero(figures.disturbed & (side < 2)):
        parts[f"session {i}"] = (float(a[i] / n[i]), float(own[i]), float(figures.df[i]))
    share = 0.0
    if between is not None and tau2 > 0:
        ms, df_between, c_total, offset = between
        coefficient = float(a.sum()) * df_between / c_total
        parts["between"] = (coefficient, ms, df_between)
        c, v_s2, df_w = parts["spread"]
        if v_s2 > 0:
            parts["spread"] = (c - float(a.sum()) * offset / v_s2, v_s2, df_w)
        total = float((a * v).sum())
        share = float(a.sum()) * tau2 / total if total > 0 else 0.0
    return float(level[1] - level[0]), parts, share


@dataclass(frozen=True, slots=True)
class Sessions:
    """Per session (its kept repetitions): count, mean, within sum of squares and df (0
    for identical or single ones), and ``disturbed``: its repetitions disagree far more
    than the other sessions' (F test against the pool of the others, p < NOISY_LEVEL: say
    3 of 5 stalled, or a neighbour started mid-session). A disturbed session is kept, and
    judged by its own spread; ``s2``/``df_w`` pool the others'."""

    n: np.ndarray
    means: np.ndarray
    ss: np.ndarray
    df: np.ndarray
    disturbed: np.ndarray
    s2: float
    df_w: float

    @classmethod
    def of(cls, kept: Groups) -> Sessions:
        n, means, ss, df = _sessions(kept)
        total_ss, total_df = float(ss.sum()), float(df.sum())
        rest_df = total_df - df
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (ss / df) / ((total_ss - ss) / rest_df)
        testable = (df > 0) & (rest_df > 0) & (total_ss - ss > 0)
        disturbed = np.zeros(len(n), dtype=bool)
        for i in np.flatnonzero(testable & (ratio > 1)):
            disturbed[i] = special.fdtrc(df[i], rest_df[i], ratio[i]) < NOISY_LEVEL
        if not df[~disturbed].sum():
            disturbed[:] = False
        df_w = float(df[~disturbed].sum())
        s2 = float(ss[~disturbed].sum()) / df_w if df_w else 0.0
        return cls(n, means, ss, df, disturbed, s2, df_w)

    @property
    def own(self) -> np.ndarray:
        """Each session's within variance: its own when disturbed, else the pooled one."""
        own: np.ndarray = np.where(self.disturbed, self.ss / np.maximum(self.df, 1), self.s2)
        return own


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
    and the coefficient of tau^2 in its expectation: with weights ``n`` the precisions of
    the means, E[ss] = (S - terms) + c tau^2, c = sum(n) - trace((X'WX)^-1 X'W^2 X)
    (sum n - sum n^2 / sum n for a level)."""
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
