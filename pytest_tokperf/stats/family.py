"""A session judged as one family: Holm's step-down, or Benjamini-Hochberg on request; a
correction never turns a verdict into a flag."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

import numpy as np
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.metric import DEFAULT_ALPHA, check_level, fmt_p
from pytest_tokperf.stats.verdict import Comparison, judge

Correction = Literal["holm", "bh"]
K = TypeVar("K", bound=Hashable)
_NAMES = {"holm": "Holm step-down", "bh": "Benjamini-Hochberg"}


@dataclass(frozen=True, slots=True)
class FamilyVerdict(Generic[K]):
    """Every comparison of a session after the correction, and a one-line ``summary``."""

    comparisons: dict[K, Comparison]
    method: Correction
    alpha: float
    tested: int
    withdrawn: int
    summary: str

    @property
    def regressions(self) -> list[K]:
        return [k for k, c in self.comparisons.items() if c.verdict == "regression"]


def judge_family(comparisons: Mapping[K, Comparison], *, alpha: float = DEFAULT_ALPHA,
                 method: Correction = "holm") -> FamilyVerdict[K]:
    """Re-judge a session's comparisons so the family's false flags stay <= alpha;
    ``method`` ``"holm"`` (default) or ``"bh"``; p NaN comes back unchanged."""
    check_level(alpha, "alpha")
    if method not in _NAMES:
        raise ConfigError(f"method is {method!r}: give 'holm' or 'bh'")
    base = {key: judge(c.shift, c.as_metric(), alpha=alpha)
            for key, c in comparisons.items() if c.shift is not None and _testable(c)}
    tested = list(base)
    levels, passed = _levels([base[key].p_value for key in tested], alpha, method)
    position = {key: i for i, key in enumerate(tested)}
    k = len(tested)
    name = _NAMES[method]
    summary_head = f"{name} over {k} comparison{'s' * (k != 1)} at alpha {fmt_p(alpha)}"
    out: dict[K, Comparison] = {}
    withdrawn = 0
    for key, c in comparisons.items():
        if key not in base:
            out[key] = replace(c, correction=summary_head)
            continue
        b, i = base[key], position[key]
        if b.flagged and k > 1:
            level = levels[i]
            if passed[i]:
                note = f" ({name}: p={fmt_p(b.p_value)} ≤ {fmt_p(level)} over {k} comparisons)"
            else:
                withdrawn += 1
                note = (f" (flagged alone at p={fmt_p(b.p_value)}; not after {name} over {k} "
                        f"comparisons, which needed p ≤ {fmt_p(level)})")
            shift = comparisons[key].shift
            if shift is not None:
                b = judge(shift, b.as_metric(), alpha=level, note=note)
        out[key] = replace(b, correction=summary_head)
    counts = [sum(c.verdict == v for c in out.values()) for v in ("regression", "improvement")]
    summary = (f"{summary_head}: {counts[0]} regression{'s' * (counts[0] != 1)}, "
               f"{counts[1]} improvement{'s' * (counts[1] != 1)}, {withdrawn} flag"
               f"{'s' * (withdrawn != 1)} withdrawn")
    return FamilyVerdict(out, method, alpha, k, withdrawn, summary)


def benjamini_hochberg(p_values: Sequence[float], q: float = DEFAULT_ALPHA) -> list[bool]:
    """Which hypotheses to reject so the expected share of false discoveries is <= q."""
    check_level(q, "q")
    for i, p in enumerate(p_values):
        if not 0 <= p <= 1:  # also catches NaN
            raise ConfigError(f"p_values[{i}] is {p!r}: p-values lie between 0 and 1")
    if not p_values:
        return []
    adjusted = sps.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")
    return [bool(a <= q) for a in adjusted]


def _testable(c: Comparison) -> bool:
    return (c.shift is not None and c.shift.std_error > 0 and not math.isnan(c.min_effect)
            and not math.isnan(c.p_value))


def _levels(ps: list[float], alpha: float, method: Correction) -> tuple[list[float], list[bool]]:
    """Per comparison: the level its interval is judged at, and whether it passed."""
    k = len(ps)
    if k == 0:
        return [], []
    order = sorted(range(k), key=lambda i: ps[i])
    levels, passed = [alpha] * k, [False] * k
    if method == "holm":
        stop = k
        for rank, i in enumerate(order):
            if ps[i] > alpha / (k - rank):
                stop = rank
                break
            levels[i], passed[i] = alpha / (k - rank), True
        for i in order[stop:]:
            levels[i] = alpha / (k - stop)
        return levels, passed
    keep = benjamini_hochberg(ps, alpha)
    r = sum(keep)
    return [(r if kept else r + 1) * alpha / k for kept in keep], keep
