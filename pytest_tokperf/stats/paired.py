"""Paired statistics for the same-run A/B: one log-ratio per pair, judged as a whole.

Server starts are pooled with a start level (``start_sd``), pairs in a row get a serial
allowance, stalls on both sides alike are set aside, and an A/B that stopped on its own
interval gets an anytime-valid one. The rule: docs/design.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.calibration import noncentrality, detectable_shift
from pytest_tokperf.stats.metric import (
    DEFAULT_ALPHA, START_SD, WINDOW_SD, Metric, check_level, fmt_p, interval_text, pct, resolved,
)
from pytest_tokperf.stats.shifts import STALL_MIN, STALL_SDS, Shift, log_samples
from pytest_tokperf.stats.verdict import Comparison, judge

PAIRED_MIN_EFFECT = 0.02
"""Smallest change the A/B flags by default (``--tokperf-ab-min-effect``)."""

MIN_PAIRS = 3
"""Fewer pairs (or, with several starts, fewer starts than 2) leave a verdict inconclusive."""

SERIAL_MIN_PAIRS = 20
"""From this many pairs (one start) the SE allows for serial correlation."""

PAIR_MAX_SET_ASIDE = 0.2
"""At most this share of the pairs is set aside as stalls; more is no stall but the level."""

ONE_SIDED_P = 0.1
"""Stalls on one side more than chance allows (binomial p below this) are kept and judged."""


@dataclass(frozen=True, slots=True)
class Pairs:
    """One metric's pairs: the log-ratio of each pair and the server start it belongs to."""

    metric: Metric
    log_ratios: tuple[float, ...]
    blocks: tuple[int, ...]

    @classmethod
    def of(cls, metric: Metric, control: Sequence[float], candidate: Sequence[float],
           blocks: Sequence[int] | None = None) -> Pairs:
        """Pairs from matched control and candidate figures (same length, > 0, finite)."""
        if len(control) != len(candidate):
            raise ConfigError(
                f"{metric.name}: {len(control)!r} control figures but {len(candidate)!r} "
                "candidate figures; a paired A/B needs one of each per pair")
        b = log_samples(control, f"{metric.name} control")
        c = log_samples(candidate, f"{metric.name} candidate")
        starts = tuple(blocks) if blocks is not None else (0,) * len(b)
        if len(starts) != len(b):
            raise ConfigError(f"{metric.name}: {len(starts)!r} block labels for {len(b)!r} pairs")
        return cls(metric, tuple(float(x) for x in c - b), starts)

    @property
    def n(self) -> int:
        return len(self.log_ratios)

    @property
    def starts(self) -> int:
        return len(set(self.blocks))

    def per_start(self) -> list[Pairs]:
        """One ``Pairs`` (a single block) for each server start, in the order first seen."""
        by: dict[int, list[float]] = {}
        for block, d in zip(self.blocks, self.log_ratios):
            by.setdefault(block, []).append(d)
        return [Pairs(self.metric, tuple(v), (0,) * len(v)) for v in by.values()]


def _lag_one(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of centred ``x``, bias-corrected (Kendall), within +-0.95."""
    gamma0 = float(x @ x)
    if not gamma0 > 0:
        return 0.0
    r = float(x[1:] @ x[:-1]) / gamma0
    r += (1 + 3 * r) / len(x)
    return min(0.95, max(-0.95, r))


def serial_factor(d: Sequence[float] | np.ndarray) -> float:
    """Variance inflation for pairs in a row (1 below ``SERIAL_MIN_PAIRS``): the larger of
    a Newey-West estimate (Andrews' lag plug-in) and the AR(1) factor ``(1 + r) / (1 - r)``."""
    x = np.asarray(d, dtype=float)
    n = len(x)
    if n < SERIAL_MIN_PAIRS:
        return 1.0
    x = x - x.mean()
    gamma0 = float(x @ x) / n
    if not gamma0 > 0:
        return 1.0
    r = _lag_one(x)
    a1 = 4 * r * r / ((1 - r) ** 2 * (1 + r) ** 2)
    plug_in = math.ceil(1.1447 * (a1 * n) ** (1 / 3))
    lags = min(n - 1, max(1, math.floor(4 * (n / 100) ** (2 / 9)), plug_in))
    long_run = gamma0 + 2 * sum((1 - k / (lags + 1)) * float(x[k:] @ x[:-k]) / n
                                for k in range(1, lags + 1))
    ar1 = (1 + r) / (1 - r) if r > 0 else 1.0
    return float(max(1.0, long_run / gamma0, ar1))


@dataclass(frozen=True, slots=True)
class PairStalls:
    """What ``set_aside_stalled_pairs`` did: pair indexes left out, stalls by side, and
    ``kept_one_sided`` where they fell on one side and were kept."""

    positions: tuple[int, ...] = ()
    candidate_slow: int = 0
    control_slow: int = 0
    kept_one_sided: bool = False

    def text(self, n: int) -> str:
        count = self.candidate_slow + self.control_slow
        if not count:
            return ""
        sides = f"{self.candidate_slow} with the candidate slow, {self.control_slow} with the control slow"
        if self.kept_one_sided:
            return (f"; {count} stalled pair(s) of {n} ({sides}) kept: they fall on one "
                    "side more often than chance, so they are that build's own")
        return f"; set aside as stalled pairs: {count} of {n} ({sides}, both sides alike)"


def set_aside_stalled_pairs(pairs: Pairs) -> tuple[Pairs, PairStalls]:
    """``pairs`` without those one of whose sides stalled (``STALL_SDS`` robust SDs and 15%
    off the start's median, at most ``PAIR_MAX_SET_ASIDE``), unless one-sided (``ONE_SIDED_P``)."""
    d = np.asarray(pairs.log_ratios, dtype=float)
    blocks = np.asarray(pairs.blocks)
    if len(d) < 2 * MIN_PAIRS:
        return pairs, PairStalls()
    centre = np.empty_like(d)
    for b in set(pairs.blocks):
        centre[blocks == b] = np.median(d[blocks == b])
    off = d - centre
    scale = float(np.median(np.abs(off))) * 1.4826
    if not scale > 0:
        return pairs, PairStalls()
    far = np.abs(off) > max(STALL_SDS * scale, STALL_MIN)
    count = int(far.sum())
    if count == 0 or count > PAIR_MAX_SET_ASIDE * len(d):
        return pairs, PairStalls()
    low = int((far & (off < 0)).sum())  # log(candidate / control) fell
    high = count - low
    slow_c, slow_b = (low, high) if pairs.metric.higher_is_better else (high, low)
    stalls = PairStalls(tuple(int(i) for i in np.flatnonzero(far)), slow_c, slow_b)
    if float(sps.binomtest(high, count, 0.5).pvalue) < ONE_SIDED_P:
        return pairs, replace(stalls, positions=(), kept_one_sided=True)
    keep = ~far
    return Pairs(pairs.metric, tuple(float(x) for x in d[keep]),
                 tuple(int(b) for b in blocks[keep])), stalls


def anytime_half_width(sd: float, n: int, alpha: float, n_planned: int) -> float:
    """Half-width of the normal-mixture confidence sequence for a mean of ``n`` pairs of SD
    ``sd``, valid at every ``n`` at once and tightest at ``n_planned`` (Howard et al. 2021)."""
    v = n * sd * sd
    log_a = math.log(1 / alpha)
    rho = max(1, n_planned) * sd * sd / (2 * log_a + math.log(1 + 2 * log_a))
    return math.sqrt((v + rho) * math.log((v + rho) / (rho * alpha * alpha))) / n


@dataclass(frozen=True, slots=True)
class StartLevel:
    """How several starts were pooled: ``own``, their level estimated from them (the
    DerSimonian-Laird SD, log units), counted once; ``pairs_se`` and ``level_se``, the parts
    of the error the pairs and the start level bring."""

    own: float
    pairs_se: float
    level_se: float


def start_level(pairs: Pairs) -> tuple[list[Shift], StartLevel] | None:
    """Each start's own shift (no level of its own added) and the level the starts show;
    None with under two starts or a start without spread."""
    if pairs.starts < 2:
        return None
    shifts = [paired_shift(p, start_sd=0.0) for p in pairs.per_start()]
    if not all(s.std_error > 0 for s in shifts):
        return None
    own = start_spread(shifts)
    k = len(shifts)
    pairs_se = math.sqrt(sum(s.std_error ** 2 for s in shifts)) / k
    return shifts, StartLevel(own, pairs_se, own / math.sqrt(k))


def paired_shift(pairs: Pairs, start_sd: float = START_SD) -> Shift:
    """The shift behind the verdict: mean log-ratio, SE and df. One server start: the pairs
    are the unit and ``start_sd``, the level a start is allowed, is added to the SE (one
    start cannot measure it). Several: their level is estimated from them (``start_level``)
    and counted once, Hartung-Knapp over the starts, ``starts - 1`` df."""
    return _shift_and_level(pairs, start_sd)[0]


def _shift_and_level(pairs: Pairs, start_sd: float, sequential: int = 0
                     ) -> tuple[Shift, StartLevel | None]:
    """``paired_shift`` and its ``StartLevel``; ``sequential`` (an early-stopping A/B's
    planned pairs) widens one start's SE to the anytime-valid interval."""
    if not (math.isfinite(start_sd) and start_sd >= 0):
        raise ConfigError(f"start_sd {start_sd!r}: give a log SD of 0 or more, e.g. 0.01")
    d = np.asarray(pairs.log_ratios, dtype=float)
    n = len(d)
    if n == 0:
        return Shift(math.nan, math.nan, math.nan, 0, 0, "no spread", math.nan), None
    pair_sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    pooled = start_level(pairs)
    if pooled is not None:
        shifts, level = pooled
        out = pool_runs(shifts, level.own)
        weights = [1 / (s.std_error ** 2 + level.own ** 2) for s in shifts]
        hk = sum(w * (s.log_shift - out.log_shift) ** 2 for w, s in zip(weights, shifts)) / (
            (len(shifts) - 1) * sum(weights))
        return replace(out, std_error=max(out.std_error, math.sqrt(hk)),
                       df=float(len(shifts) - 1), noise_cv=pair_sd / math.sqrt(2)), level
    units = (np.asarray([np.mean(p.log_ratios) for p in pairs.per_start()])
             if pairs.starts >= 2 else d)
    estimate = float(units.mean())
    if len(units) < 2:
        return Shift(estimate, math.nan, math.nan, n, n, "no spread", math.nan), None
    sd = float(units.std(ddof=1))
    inflate = serial_factor(d) if pairs.starts < 2 else 1.0
    noise = pair_sd * math.sqrt(inflate / 2) if math.isfinite(pair_sd) else math.nan
    if not sd > 0:
        return Shift(estimate, math.nan, math.nan, n, n, "no spread", 0.0), None
    se = sd * math.sqrt(inflate / len(units))
    df = float(len(units) - 1)
    if pairs.starts < 2:
        if sequential:
            wide = anytime_half_width(sd * math.sqrt(inflate), n, SEQUENTIAL_ALPHA, sequential)
            se = max(se, wide / float(special.stdtrit(df, 1 - SEQUENTIAL_ALPHA / 2)))
        se = math.hypot(se, start_sd)
    return Shift(estimate, se, df, n, n, "pooled", noise), None


SEQUENTIAL_ALPHA = DEFAULT_ALPHA
"""The level the anytime-valid widening of an early-stopping A/B is computed at."""


def judge_pairs(pairs: Pairs, *, alpha: float = DEFAULT_ALPHA, start_sd: float = START_SD,
                sequential: int = 0) -> Comparison:
    """The verdict on one metric's pairs at ``alpha``, stalls set aside first; ``sequential``:
    the planned pair count of an A/B that may stop on its interval (0: a fixed count)."""
    check_level(alpha, "alpha")
    m = pairs.metric
    asked = pairs.n
    pairs, stalls = set_aside_stalled_pairs(pairs)
    shift, level = _shift_and_level(pairs, start_sd, sequential)
    if pairs.n < MIN_PAIRS:
        rel = math.expm1(shift.log_shift) if math.isfinite(shift.log_shift) else math.nan
        return Comparison(
            metric=m.name, verdict="inconclusive", relative_change=rel, ci_low=math.nan,
            ci_high=math.nan, confidence=1 - alpha, p_value=math.nan, n_baseline=pairs.n,
            n_current=pairs.n, reason=(f"{m.name} {pct(rel)}: {pairs.n} pair(s); the A/B "
                                       f"judges from {MIN_PAIRS} pairs"),
            shift=shift, min_effect=m.min_effect, higher_is_better=m.higher_is_better)
    verdict = judge(shift, m, alpha=alpha)
    extra = stalls.text(asked) + (_SEQUENTIAL if sequential and pairs.starts < 2 else "")
    if verdict.verdict != "inconclusive" or shift.method == "no spread":
        over = f" (paired over {pairs.n} ABBA pairs{_from_starts(pairs, level, start_sd)})"
        return replace(verdict, reason=verdict.reason + over + extra)
    return replace(verdict, reason=_unsettled(pairs, level, shift, verdict, alpha, start_sd) + extra)


_SEQUENTIAL = ("; the A/B could stop once its interval looked narrow, so the interval is "
               "anytime-valid (it holds whenever it stopped)")


def _from_starts(pairs: Pairs, level: StartLevel | None, start_sd: float = START_SD) -> str:
    if pairs.starts < 2:
        return (f", one server start a side, allowed a level of {start_sd:.1%} of its own "
                "(one start cannot measure it)" if start_sd > 0 else "")
    if level is None:
        return f" from {pairs.starts} server starts a side, the starts as the unit"
    return (f" from {pairs.starts} server starts a side, whose own level, {level.own:.1%}, "
            f"is counted once ({pairs.starts - 1} df)")


START_LIMIT = 400
"""The most server starts ``_unsettled`` works out a need for."""


def _unsettled(pairs: Pairs, level: StartLevel | None, shift: Shift, verdict: Comparison,
               alpha: float, start_sd: float = START_SD) -> str:
    """Why it stayed open, naming the real limit (the pairs' spread, the start level or the
    few starts), and how many starts of this length would settle it."""
    m = pairs.metric.min_effect
    seen = detectable_shift(shift, alpha)
    head = (f"{pairs.metric.name} {pct(verdict.relative_change)} "
            f"{interval_text(verdict.ci_low, verdict.ci_high)}: cannot tell a {m:.0%} change "
            f"from none over {pairs.n} pairs{_from_starts(pairs, level, start_sd)} "
            f"(p={fmt_p(shift.p_value)}); this A/B resolves "
            + (f"about {seen:.1%}" if resolved(seen) else "no change within ±1000%"))
    k = pairs.starts
    if level is not None:
        pairs_se, level_sd = level.pairs_se, level.own
    elif k < 2 and math.isfinite(shift.std_error):
        pairs_se, level_sd = math.sqrt(max(0.0, shift.std_error ** 2 - start_sd ** 2)), start_sd
    else:
        return head + "; more server starts a side would settle it"
    parts = {f"the pairs' spread ({shift.noise_cv * math.sqrt(2):.1%} a pair)": pairs_se,
             f"the start level ({level_sd:.1%}{' assumed' if level is None else ''})":
                 level_sd / math.sqrt(k)}
    limit = max(parts, key=parts.__getitem__)
    if k >= 2 and special.stdtrit(k - 1, 1 - alpha / 2) > 1.3 * special.ndtri(1 - alpha / 2):
        limit = f"the few starts ({k}, {k - 1} df)"
    per = max(1, round(pairs.n / k))
    need = _starts_needed(pairs_se * math.sqrt(k), level_sd, math.log1p(m), alpha)
    then = (f"about {need} server starts a side of about {per} pairs each would settle it"
            if need else f"no practical number of starts of {per} pairs would: lengthen them")
    return head + f"; the limit is {limit}: {then}"


def _starts_needed(pairs_se_one: float, level_sd: float, target: float, alpha: float) -> int:
    """Fewest starts (each with pairs giving ``pairs_se_one``) whose interval resolves
    ``target`` (log) at 80% power; 0 when even ``START_LIMIT`` would not."""
    for k in range(2, START_LIMIT + 1):
        if noncentrality(k - 1, alpha, 0.8) * math.hypot(pairs_se_one, level_sd) / math.sqrt(k) <= target:
            return k
    return 0


def judge_ab(pairs: Mapping[str, Pairs], *, alpha: float = DEFAULT_ALPHA,
             start_sd: float = START_SD, sequential: int = 0) -> dict[str, Comparison]:
    """Every metric of one A/B, each at ``alpha / k`` for the ``k`` metrics with pairs."""
    check_level(alpha, "alpha")
    k = max(1, sum(1 for p in pairs.values() if p.n))
    out = {}
    for name, p in pairs.items():
        c = judge_pairs(p, alpha=alpha / k, start_sd=start_sd, sequential=sequential)
        out[name] = replace(c, correction=f"Bonferroni over {k} metrics" if k > 1 else "")
    return out


def judge_windows(windows: Sequence[Mapping[str, Pairs]], *, window_sd: float = WINDOW_SD,
                  alpha: float = DEFAULT_ALPHA) -> dict[str, Comparison]:
    """Every metric measured in several machine windows: each window judged as one A/B
    (``paired_shift``), then the windows pooled, each allowed a level of ``window_sd``
    (one window cannot measure it; ``pool_runs``), at ``alpha / k`` over the metrics."""
    check_level(alpha, "alpha")
    if len(windows) < 2:
        return judge_ab(windows[0] if windows else {}, alpha=alpha)
    names = [n for n in windows[0] if all(w.get(n) is not None and w[n].n for w in windows)]
    k = max(1, len(names))
    out = {}
    for name in names:
        kept = [set_aside_stalled_pairs(w[name])[0] for w in windows]
        shifts = [paired_shift(p) for p in kept]
        metric = kept[0].metric
        if any(not (s.std_error > 0) for s in shifts) or any(p.n < MIN_PAIRS for p in kept):
            out[name] = replace(judge_pairs(kept[0], alpha=alpha / k),
                                correction=f"Bonferroni over {k} metrics" if k > 1 else "")
            continue
        verdict = judge(pool_runs(shifts, window_sd), metric, alpha=alpha / k)
        each = ", ".join(f"{pct(math.expm1(s.log_shift))}" for s in shifts)
        out[name] = replace(verdict, correction=f"Bonferroni over {k} metrics" if k > 1 else "",
                            reason=f"{verdict.reason} (pooled over {len(shifts)} machine "
                            f"windows, each allowed a level of {window_sd:.1%}: {each})")
    return out


def sequential_interval(pairs: Pairs, planned: int, confidence: float = 0.95) -> float | None:
    """Relative half-width of the pairs' anytime-valid interval (stalls set aside, no start
    level) that an adaptive A/B planning ``planned`` pairs watches; None without spread."""
    kept = set_aside_stalled_pairs(pairs)[0]
    d = np.asarray(kept.log_ratios, dtype=float)
    if len(d) < 2:
        return None
    sd = float(d.std(ddof=1)) * math.sqrt(serial_factor(d))
    if not sd > 0:
        return None
    half = anytime_half_width(sd, len(d), 1 - confidence, planned)
    return float(math.expm1(half))


def pool_runs(shifts: Sequence[Shift], start_sd: float, *, tests: int = 1) -> Shift:
    """A/B runs of one pair of builds as one shift, weighted ``1/(SE^2 + start_sd^2)``."""
    if not shifts:
        raise ConfigError("pool_runs: no A/B run to pool")
    if not (math.isfinite(start_sd) and start_sd >= 0):
        raise ConfigError(f"start_sd {start_sd!r}: give a log SD of 0 or more, e.g. 0.01")
    bad = [s.std_error for s in shifts if not (math.isfinite(s.std_error) and s.std_error > 0)]
    if bad:
        raise ConfigError(f"pool_runs: a run's standard error is {bad[0]!r}; only runs with a "
                          "spread can be weighted (a run of identical pairs judges nothing)")
    weights = [1 / (s.std_error ** 2 + start_sd ** 2) for s in shifts]
    total = sum(weights)
    return Shift(log_shift=sum(w * s.log_shift for w, s in zip(weights, shifts, strict=True))
                 / total, std_error=math.sqrt(1 / total), df=min(s.df for s in shifts),
                 n_baseline=sum(s.n_baseline for s in shifts),
                 n_current=sum(s.n_current for s in shifts), method="pooled",
                 noise_cv=math.nan, sessions_current=len(shifts), tests=tests)


def start_spread(shifts: Sequence[Shift]) -> float:
    """How far runs of one pair disagree beyond their own errors: the DerSimonian-Laird
    SD (log) of their level, 0 where they agree (or are fewer than two)."""
    if len(shifts) < 2:
        return 0.0
    w = [1 / s.std_error ** 2 for s in shifts]
    mean = sum(wi * s.log_shift for wi, s in zip(w, shifts, strict=True)) / sum(w)
    q = sum(wi * (s.log_shift - mean) ** 2 for wi, s in zip(w, shifts, strict=True))
    scale = sum(w) - sum(wi ** 2 for wi in w) / sum(w)
    return math.sqrt(max(0.0, (q - len(shifts) + 1) / scale))
