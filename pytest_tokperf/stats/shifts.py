"""What a shift is, and the repetitions a comparison leaves out as stalls.

Every input is log samples (``log_samples`` validates and converts), so a shift is a
log ratio and tok/s and seconds are treated alike. ``nested.shift_between`` measures
one (``Shift``): repetitions nested in sessions, a session being one stored run (one
pytest session, one server start). This module holds the value types and the stall
rule it applies first:

**A stall is judged inside its own session.** A repetition slower than its own
session's median by more than ``STALL_SDS`` noise-SDs and by at least 15%
(``STALL_MIN``) is a stall: a 25% stall is 12 SDs out at CV 2%, a Gaussian sample 5 SDs
out happens once in millions, and two clock states a few percent apart stay noise. Only
the slow side goes (lower tok/s, longer seconds), and every session keeps a majority of
its repetitions, so a whole session is never set aside: a session that is slow
throughout (the machine in a slow phase, a neighbour on the cores) is a level, and the
spread between sessions is what it then adds to (``nested``). The noise SD is the lower
quartile of the within-session pairwise differences, which holds while 3 pairs in 4 are
spoiled. When more than ``MAX_SET_ASIDE`` of all samples would go, they are a second
mode, not stalls, and all are kept.

(Before this rule, baseline repetitions were measured from the median of every baseline
session together; on a machine whose sessions sit in two bandwidth phases 20% apart
that set aside whole low-phase sessions as "stalls", and the comparison then judged a
minority of sessions as if they were the level.)
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

Method = Literal["pooled", "sessions", "exact", "no spread"]
"""How a shift's spread was found: ``pooled`` within-session spread (the sessions agree),
``sessions`` with the between-session spread (they differ more than their repetitions
explain), ``exact`` (every repetition of each side identical: no noise, the exact
difference is judged) or ``no spread`` (nothing to judge by)."""

STALL_SDS = 5.0
STALL_MIN = -math.log(0.85)
"""A stall is also at least 15% slower than its session's level (in log units): two clock
states a few percent apart are noise to keep, not stalls to drop."""
MAX_SET_ASIDE = 0.3
QUARTILE_ABS_DIFF = 0.4506
"""Lower quartile of ``|X - Y|`` for X, Y independent unit normals."""
PHASE_SHARE = 0.8
"""Between-session spread "dwarfs" the within-session spread when it makes up this share of
a comparison's variance or more: a session's level then scatters at least twice as far as
its repetitions' noise would move its mean (4:1 in variance)."""
MEDIAN_ABS_DIFF = 0.9539
"""Median of ``|X - Y|`` for X, Y independent unit normals: pairwise spread -> SD."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """A repetition left out as a stall: ``version`` indexes the sessions given (baseline
    sessions first, then the current ones), ``position`` the repetition in its session,
    ``deviation`` is relative to its own session's median."""

    version: int
    position: int
    value: float
    deviation: float


@dataclass(frozen=True, slots=True)
class Shift:
    """Current over baseline in log units, with what it takes to judge it at any level.

    ``log_shift`` is the estimate, ``std_error`` and ``df`` its t scale; ``noise_cv`` is
    the pooled within-session log SD; ``versions`` counts the baseline sessions (stored
    runs); ``drift_p`` is the F-test p that the sessions differ more than their
    repetitions explain (NaN when no side has two sessions). ``sessions_current`` counts
    the current sessions; ``between_cv`` is the estimated between-session log SD
    (NaN when it cannot be estimated) and ``phase_share`` the part of the estimate's
    variance that it contributes (0 when the sessions agree). ``tests`` is the number of
    comparisons this one is Bonferroni-corrected for (the gate judges a result against
    the settled level and against the accepted level): the p-value is multiplied by it
    and intervals are read at ``alpha / tests``. ``disturbed`` indexes the sessions
    (as ``SetAside.version``) judged by their own spread (``nested.Sessions``).
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
    sessions_current: int = 1
    between_cv: float = math.nan
    phase_share: float = 0.0
    tests: int = 1
    disturbed: tuple[int, ...] = ()

    @property
    def p_value(self) -> float:
        """Two-sided t p-value of no change, times ``tests`` (NaN without a spread; for an
        exact comparison 0 when the sides differ, 1 when they are equal)."""
        if self.method == "exact":
            return 0.0 if self.log_shift != 0 else 1.0
        if not self.std_error > 0:
            return math.nan
        p = 2 * special.stdtr(self.df, -abs(self.log_shift) / self.std_error)
        return float(min(1.0, self.tests * p))

    def interval(self, alpha: float) -> tuple[float, float]:
        """The ``1 - alpha`` interval of ``log_shift`` (read at ``alpha / tests``; NaN
        without a spread; the point itself for an exact comparison)."""
        if self.method == "exact":
            return self.log_shift, self.log_shift
        if not self.std_error > 0:
            return math.nan, math.nan
        half = float(special.stdtrit(self.df, 1 - alpha / self.tests / 2)) * self.std_error
        return self.log_shift - half, self.log_shift + half

    @property
    def phase_dominated(self) -> bool:
        """The spread between sessions dwarfs what the repetitions explain (``PHASE_SHARE``
        of the estimate's variance or more): more repetitions per session would not help."""
        return self.method == "sessions" and self.phase_share >= PHASE_SHARE


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
    """Within-session log SD from the lower quartile of the pairwise differences.

    One stall in a session of 3 spoils 2 of its 3 pairs, so with stalls in many sessions
    the median pair is a stall; the lower quartile holds until 3 pairs in 4 are spoiled.
    NaN: no session has 2 samples.
    """
    diffs = groups.pair_differences()
    if not len(diffs):
        return math.nan
    return float(np.quantile(diffs, 0.25)) / QUARTILE_ABS_DIFF


def set_aside_stalls(groups: Groups, slow: int) -> tuple[Groups, tuple[SetAside, ...]]:
    """The sessions without their stalls (rule in the module doc), and what was left out.

    ``slow`` is the sign of a stall in log units (-1: a stall lowers the figure, as for
    tok/s; +1: it raises it, as for seconds). Each session's samples are measured from
    its own median, and each keeps a majority of them.
    """
    scale = robust_spread(groups)
    if not scale > 0:
        return groups, ()
    centres = groups.medians()
    ids = groups.ids
    far = slow * (groups.x - centres[ids]) > max(STALL_SDS * scale, STALL_MIN)
    total = int(far.sum())
    if total == 0 or total > MAX_SET_ASIDE * len(groups.x):
        return groups, ()
    sizes = np.array(groups.sizes)
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
