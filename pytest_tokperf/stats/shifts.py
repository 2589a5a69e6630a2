"""What a shift is, and the repetitions a comparison leaves out as stalls: each judged
inside its own session, every session keeping a majority."""

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
"""How a shift's spread was found: ``pooled`` within sessions, ``sessions`` with the
between-session spread, ``exact`` (every repetition identical) or ``no spread``."""

STALL_SDS = 5.0
STALL_MIN = -math.log(0.85)
"""A stall is also at least 15% slower than its session's level (log units)."""
MAX_SET_ASIDE = 0.3
QUARTILE_ABS_DIFF = 0.4506
"""Lower quartile of ``|X - Y|`` for X, Y independent unit normals."""
PHASE_SHARE = 0.8
"""Between-session share of the variance at which phases dwarf repetition noise."""
MEDIAN_ABS_DIFF = 0.9539
"""Median of ``|X - Y|`` for X, Y independent unit normals: pairwise spread -> SD."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """A repetition left out as a stall: ``version`` indexes the sessions (baseline first),
    ``position`` the repetition, ``deviation`` is relative to its session's median."""

    version: int
    position: int
    value: float
    deviation: float


@dataclass(frozen=True, slots=True)
class Shift:
    """Current over baseline in log units: ``log_shift``, ``std_error``, ``df``; the within
    (``noise_cv``) and between (``between_cv``, ``phase_share``) spreads; ``tests``, the
    Bonferroni count; ``disturbed`` sessions."""

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
        """``PHASE_SHARE`` or more of the variance is between sessions."""
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


def set_aside_stalls(groups: Groups, slow: int) -> tuple[Groups, tuple[SetAside, ...]]:
    """The sessions without their stalls (rule in the module doc), and what was left out.
    ``slow`` is the sign of a stall in log units (-1 for tok/s, +1 for seconds)."""
    diffs = groups.pair_differences()  # their lower quartile holds until 3 pairs in 4 stall
    scale = float(np.quantile(diffs, 0.25)) / QUARTILE_ABS_DIFF if len(diffs) else math.nan
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
