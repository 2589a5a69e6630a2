"""How a shift is measured: the tests and intervals behind every verdict.

All inputs are log samples (``log_samples`` validates and converts), so a shift is
a log ratio. ``shift_between`` picks the test:

* one baseline run: Welch's t on logs. At 3-10 repetitions a rank test barely works
  (Mann-Whitney at 3 vs 3 cannot go below p = 0.1 two-sided, at 5 vs 5 below
  0.008), while Welch on logs is exact for log-normal noise, does not assume equal
  spread and reaches any level at 3 vs 3. A stall inflates its variance, so it
  turns conservative, not wrong. One run cannot show run-to-run drift.
* a history (several earlier versions): a permutation test of the current samples'
  normal scores (van der Waerden) with ``PERMUTATIONS`` relabellings from a fixed
  seed. Exact whatever the noise looks like (stalls, two clock states), as
  efficient as the t test on normal noise and never less efficient asymptotically
  (Chernoff-Savage), while a stall only counts as "the lowest rank". The shift is
  the Hodges-Lehmann estimate with its exact Moses interval. When the baseline
  versions differ more than their own samples explain (Kruskal-Wallis p <
  ``DRIFT_LEVEL``), the current median must also stand out from the spread of the
  version medians (a t prediction test), so run-to-run drift widens the interval
  instead of raising alarms.
* identical samples on each side: the difference is exact (p 0 or 1).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError

Method = Literal["welch", "rank", "rank+versions", "exact"]

DRIFT_LEVEL = 0.05
PERMUTATIONS = 10_000
PERMUTATION_SEED = 20240901


@dataclass(frozen=True, slots=True)
class Shift:
    """Current over baseline in log units: estimate, interval at ``confidence``, p."""

    log_shift: float
    log_low: float
    log_high: float
    confidence: float
    p_value: float
    n_baseline: int
    n_current: int
    method: Method


def log_samples(values: Sequence[float], label: str) -> np.ndarray:
    """Natural logs of positive finite samples; else ``ConfigError`` naming ``label[i]``."""
    out = []
    for i, v in enumerate(values):
        if not _is_number(v) or not math.isfinite(v) or v <= 0:
            raise ConfigError(
                f"{label}[{i}] is {v!r}: samples must be finite numbers > 0; "
                "drop failed or empty runs instead of recording them"
            )
        out.append(math.log(v))
    return np.array(out, dtype=float)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def shift_between(groups: list[np.ndarray], cur: np.ndarray, alpha: float) -> Shift:
    """The shift of ``cur`` over the baseline ``groups`` (log samples; one group: a run)."""
    nb = sum(len(g) for g in groups)
    pooled = np.concatenate([*groups, cur])
    if np.ptp(pooled) == 0 or (len(groups) == 1 and np.ptp(groups[0]) == np.ptp(cur) == 0):
        d = float(cur.mean() - groups[0].mean()) if np.ptp(pooled) else 0.0
        return Shift(d, d, d, 1.0, 0.0 if d else 1.0, nb, len(cur), "exact")
    if len(groups) == 1:
        return _welch(groups[0], cur, alpha)
    rank = _rank(np.concatenate(groups), cur, alpha)
    if not _drifts(groups):
        return rank
    versions = _version_medians(groups, cur, alpha)
    return Shift(versions.log_shift, versions.log_low, versions.log_high, 1 - alpha,
                 max(rank.p_value, versions.p_value), nb, len(cur), "rank+versions")


def _welch(b: np.ndarray, c: np.ndarray, alpha: float) -> Shift:
    vb, vc = _var(b) / len(b), _var(c) / len(c)
    df = (vb + vc) ** 2 / (vb * vb / (len(b) - 1) + vc * vc / (len(c) - 1))
    return _t_shift(float(c.mean() - b.mean()), math.sqrt(vb + vc), df, alpha,
                    len(b), len(c), "welch")


def _rank(base: np.ndarray, cur: np.ndarray, alpha: float) -> Shift:
    """Normal-scores permutation p; Hodges-Lehmann shift with its Moses interval."""
    diffs = np.sort((cur[:, None] - base[None, :]).ravel())
    cut = _moses_cut(len(base), len(cur), alpha)
    lo = float(diffs[cut]) if cut >= 0 else -math.inf
    hi = float(diffs[-1 - cut]) if cut >= 0 else math.inf
    pooled = np.concatenate([base, cur])
    scores = sps.norm.ppf(sps.rankdata(pooled) / (len(pooled) + 1))
    scores -= scores.mean()
    drawn = scores[_permutations(len(pooled), len(cur))].sum(axis=1)
    observed = abs(scores[len(base):].sum())
    p = (1 + int((np.abs(drawn) >= observed - 1e-9).sum())) / (len(drawn) + 1)
    return Shift(float(np.median(diffs)), lo, hi, 1 - alpha, p, len(base), len(cur), "rank")


@functools.lru_cache(maxsize=16)
def _permutations(total: int, picked: int) -> np.ndarray:
    """Fixed random relabellings: which ``picked`` of ``total`` values play "current"."""
    rng = np.random.default_rng(PERMUTATION_SEED)
    chunks = []
    for start in range(0, PERMUTATIONS, 1000):
        keys = rng.random((min(1000, PERMUTATIONS - start), total))
        chunks.append(np.argpartition(keys, picked - 1, axis=1)[:, :picked].astype(np.int32))
    return np.concatenate(chunks)


@functools.lru_cache(maxsize=256)
def _moses_cut(m: int, n: int, alpha: float) -> int:
    """How many pairwise differences to drop at each end (-1: level unreachable)."""
    if m * n > 20_000:
        z = float(sps.norm.ppf(1 - alpha / 2))
        return max(-1, math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)) - 1)
    counts = np.zeros((n + 1, m * n + 1))  # counts[j, u]: j current picked, U = u
    counts[0, 0] = 1.0
    for i in range(m + n):
        for j in range(min(i, n - 1), -1, -1):
            below = i - j  # baseline values under the (j+1)-th current one
            if below <= m:
                counts[j + 1, below:] += counts[j, : m * n + 1 - below]
    cdf = np.cumsum(counts[n]) / counts[n].sum()
    return int(np.searchsorted(cdf, alpha / 2, side="right")) - 1


def _drifts(groups: list[np.ndarray]) -> bool:
    """Do the baseline versions differ more than their own samples explain (Kruskal-Wallis)?"""
    pooled = np.concatenate(groups)
    n = len(pooled)
    if n <= len(groups) or np.ptp(pooled) == 0:
        return False
    ranks = sps.rankdata(pooled)
    edges = np.cumsum([0] + [len(g) for g in groups])
    between = sum(ranks[a:b].sum() ** 2 / (b - a) for a, b in zip(edges[:-1], edges[1:]))
    h = 12 / (n * (n + 1)) * between - 3 * (n + 1)
    _, ties = np.unique(pooled, return_counts=True)
    h /= 1 - float((ties**3 - ties).sum()) / (n**3 - n)
    return float(sps.chi2.sf(h, len(groups) - 1)) < DRIFT_LEVEL


def _version_medians(groups: list[np.ndarray], cur: np.ndarray, alpha: float) -> Shift:
    """Is the current median outside the spread of the baseline version medians?"""
    meds = np.array([np.median(g) for g in groups])
    k = len(meds)
    se = math.sqrt(_var(meds) * (1 + 1 / k))
    d = float(np.median(cur) - meds.mean())
    return _t_shift(d, se, k - 1, alpha, sum(len(g) for g in groups), len(cur),
                    "rank+versions")


def _t_shift(d: float, se: float, df: float, alpha: float, nb: int, nc: int, method: Method
             ) -> Shift:
    half = float(sps.t.ppf(1 - alpha / 2, df)) * se
    p = float(2 * sps.t.sf(abs(d) / se, df)) if se > 0 else (0.0 if d else 1.0)
    return Shift(d, d - half, d + half, 1 - alpha, min(1.0, p), nb, nc, method)


def _var(x: np.ndarray) -> float:
    if len(x) < 2:
        return 0.0
    return float(((x - x.mean()) ** 2).sum() / (len(x) - 1))
