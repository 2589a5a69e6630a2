"""Repetitions nested in sessions: how every comparison's shift is measured.

``log x[s, j] = level(side) + b[s] + e[s, j]``; when sessions differ more than their
repetitions explain, the session is the unit. The model: docs/design.md.
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
"""F-test levels: sessions that differ, and a session much noisier than the rest."""
TIE = 1e-9
"""Log spread under which repetitions count as identical."""

Parts = dict[str, tuple[float, float, float]]  # name: (coefficient, estimate, df)


def shift_between(base: Sequence[np.ndarray], cur: Sequence[np.ndarray], slow: int = -1,
                  spread: Sequence[Sequence[np.ndarray]] = (), *, trend: bool = False) -> Shift:
    """The shift of ``cur`` over ``base`` sessions (log samples); ``spread`` groups inform
    the spreads only; ``trend`` measures them around a line."""
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
        d = float(means[is_c].mean() - means[is_b].mean())
        return Shift(d, math.nan, math.nan, nb, nc, "no spread", 0.0, k, aside, math.nan, l)
    s2, df_w, own = figures.s2, figures.df_w, figures.own

    # Cochran's Q: each group's sessions around its level (or line), weighted n / sigma_s^2.
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


def _estimate(tau2: float, side: np.ndarray, n: np.ndarray, means: np.ndarray, own: np.ndarray,
              figures: Sessions, between: tuple[float, float, float, float] | None
              ) -> tuple[float, Parts, float]:
    """Current minus baseline level, weighted by ``1 / (tau2 + sigma_s^2 / n_s)``, with its
    variance parts for Satterthwaite and the between-session share."""
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
    """Per session (kept repetitions): count, mean, within sum of squares and df, and
    ``disturbed`` (F test against the others' pool, p < NOISY_LEVEL); ``s2``/``df_w``
    pool the undisturbed ones."""

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
        testable = (df > 0) & (rest_df > 0) & (total_ss - ss > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (ss / df) / ((total_ss - ss) / rest_df)
            disturbed = testable & (ratio > 1) & (special.fdtrc(df, rest_df, ratio) < NOISY_LEVEL)
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
    ss, df = np.zeros(len(arrays)), np.zeros(len(arrays))
    for i, a in enumerate(arrays):
        if len(a) < 2 or float(np.ptp(a)) <= TIE:
            means[i] = float(a[0])  # identical repetitions: the value, not a float sum
            continue
        means[i] = float(a.mean())
        ss[i] = float(((a - means[i]) ** 2).sum())
        df[i] = len(a) - 1.0
    return n, means, ss, df


def _around(means: np.ndarray, n: np.ndarray, terms: int) -> tuple[float, float]:
    """Weighted sum of squares around each group's level (``terms`` 1) or line (2), and the
    coefficient c of tau^2 in its expectation: E[ss] = (S - terms) + c tau^2."""
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
