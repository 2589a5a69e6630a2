"""A flag the machine's memory moved with, judged on what the move cannot explain.

Decode follows the bandwidth probed around a run at most as bandwidth^``exponent``: 1, the
bound, or the host's own upper bound (``host_exponent``) once its stored runs tell it. Where
the probes moved (outside the judged baseline's) the way the change went, that part is
taken out of the change and its interval: a flag the rest no longer makes is withheld as
"inconclusive", one it makes stands; both reasons show the arithmetic. A change against
the move keeps its flag; one without probes says the machine cannot be told apart.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.stats.metric import interval_text, pct
from pytest_tokperf.stats.verdict import EXACT_TOLERANCE, Comparison

PROBE_SPREAD = 0.15
"""How far (relative) one probe may read from another in the same machine state."""
MOVED_NOTE = "the machine's memory moved:"
STATES_APART = 1.3
"""Runs are in two states where the ``MIN_PER_STATE``-th lowest and highest probes are this
far apart (ratio): twice one state's ``PROBE_SPREAD``."""
MIN_PER_STATE = 3
"""Runs a group needs in each state: one probe that caught the other state makes no second."""
MIN_FIT_RUNS = 8
"""Runs a fit needs: t's 95% quantile (1.94 at 6 degrees of freedom) within a fifth of 1.64."""
OUTLIER_SDS = 3.5
"""A run this far off the states' medians (its probe caught the other state) is set aside."""
HOST_CONFIDENCE = 0.975
"""The host bound's one-sided level: at 95% a run's own probe noise let 2.1% of state-only
drops through (lab/2026-12-07-moved-rule.md), at 97.5% 1.8%."""
"""A run this far off the states' medians (its probe caught the other state) is set aside."""


@dataclass(frozen=True, slots=True)
class BandwidthExponent:
    """How fast a figure can follow the bandwidth probe (``value``), and where that comes
    from: ``runs`` fitted (``host_exponent``), 0 for the bound."""

    value: float
    source: str = ""
    runs: int = 0

    def __str__(self) -> str:
        return f"bandwidth^{self.value:g}" + (f": {self.source}" if self.source else "")


BANDWIDTH_EXPONENT = BandwidthExponent(1.0, "the bound; this host's relation is not yet "
                                       "measured: needs runs in both memory states")
"""No figure follows bandwidth faster than bandwidth^1."""
OTHER_HOSTS = BandwidthExponent(1.0, "the bound; the runs compared are not all on one host")


@dataclass(frozen=True, slots=True)
class HostExponents:
    """Per metric name, ``host``'s fitted exponent (``host_exponent``)."""

    host: str | None
    fitted: Mapping[str, BandwidthExponent]

    def of(self, metric: str, hosts: Iterable[str | None]) -> BandwidthExponent:
        """``metric``'s where every run compared (``hosts``: theirs) is on ``host``."""
        if set(hosts) - {self.host}:
            return OTHER_HOSTS
        return self.fitted.get(metric, BANDWIDTH_EXPONENT)


Runs = list[tuple[float, float]]
"""(log probe, log figure) of one series and build's runs."""


def _states(runs: Runs) -> tuple[Runs, Runs] | None:
    """The runs in two memory states, split at the widest probe gap that leaves
    ``MIN_PER_STATE`` a side; None where they are not two states (``STATES_APART``)."""
    runs = sorted(runs)
    if len(runs) < 2 * MIN_PER_STATE or (
            runs[-MIN_PER_STATE][0] - runs[MIN_PER_STATE - 1][0] < math.log(STATES_APART)):
        return None
    cut = max(range(MIN_PER_STATE, len(runs) - MIN_PER_STATE + 1),
              key=lambda i: runs[i][0] - runs[i - 1][0])
    return runs[:cut], runs[cut:]


def _set_aside(split: list[tuple[Runs, Runs]], outliers: float) -> list[Runs]:
    """Each group's runs less those over ``outliers`` robust SDs off the line through the
    states' medians (a slope the runs whose probe caught the other state hardly move)."""
    medians = [[(statistics.median(x for x, _ in s), statistics.median(y for _, y in s))
                for s in states] for states in split]
    slope = statistics.median((hy - ly) / (hx - lx) for (lx, ly), (hx, hy) in medians)
    off = [[y - (ly + hy) / 2 - slope * (x - (lx + hx) / 2) for x, y in low + high]
           for (low, high), ((lx, ly), (hx, hy)) in zip(split, medians, strict=True)]
    limit = outliers * 1.4826 * statistics.median(abs(r) for rs in off for r in rs) or math.inf
    return [[run for run, r in zip(low + high, rs, strict=True) if abs(r) <= limit]
            for (low, high), rs in zip(split, off, strict=True)]


def host_exponent(runs: Iterable[tuple[Hashable, float, float]],
                  confidence: float = HOST_CONFIDENCE,
                  outliers: float = OUTLIER_SDS) -> BandwidthExponent:
    """The one-sided ``confidence`` upper bound of the slope of log figure (higher is
    better) on log probe, pooled within groups (one series and build each: only the
    machine's memory changed) that saw both states, less runs ``_set_aside``; clipped to
    [0, 1], rounded up. ``runs``: (group, probe, figure). ``BANDWIDTH_EXPONENT`` where too
    few runs tell."""
    found: dict[Hashable, Runs] = {}
    for group, probe, figure in runs:
        if probe > 0 and figure > 0 and math.isfinite(probe * figure):
            found.setdefault(group, []).append((math.log(probe), math.log(figure)))
    split = [states for g in found.values() if (states := _states(g))]
    groups = [g for g in _set_aside(split, outliers) if _states(g)] if split else []
    n = sum(len(g) for g in groups)
    if n < MIN_FIT_RUNS:
        return BANDWIDTH_EXPONENT
    centred = [[(x - mx, y - my) for x, y in g] for g in groups
               for mx, my in [(statistics.fmean(v) for v in zip(*g, strict=True))]]
    sxx = sum(x * x for g in centred for x, _ in g)
    slope = sum(x * y for g in centred for x, y in g) / sxx
    dof = n - len(groups) - 1
    se = math.sqrt(sum((y - slope * x) ** 2 for g in centred for x, y in g) / dof / sxx)
    from scipy import stats

    upper = math.ceil(100 * (slope + float(stats.t.ppf(confidence, dof)) * se)) / 100
    return BandwidthExponent(min(1.0, max(0.0, upper)),
                             f"this host's upper bound from {n} runs", n)


def _probed(probes: Sequence[float | None]) -> list[float]:
    return sorted(p for p in probes if p is not None and p > 0)


def moved(current: float | None, baseline: Sequence[float | None],
          spread: float = PROBE_SPREAD) -> int:
    """+1 (faster memory) or -1 (slower) when ``current`` lies outside every probe of
    ``baseline`` by more than ``spread``; 0 when it does not or a side has no probe."""
    known = _probed(baseline)
    if current is None or current <= 0 or not known:
        return 0
    return (current > known[-1] * (1 + spread)) - (current < known[0] / (1 + spread))


def _span(probes: list[float]) -> str:
    first, last = format_bandwidth(probes[0]), format_bandwidth(probes[-1])
    return first if first == last else f"{first} to {last}"


def moved_verdict(comparison: Comparison, current: Sequence[float | None],
                  baseline: Sequence[float | None], spread: float = PROBE_SPREAD,
                  exponent: float | BandwidthExponent = BANDWIDTH_EXPONENT) -> Comparison:
    """A flag withheld where every probe of ``current`` moved one way (``moved``) from
    ``baseline``'s (the runs it was judged against) and that explains it (module doc)."""
    c, now, then = comparison, _probed(current), _probed(baseline)
    ways = {moved(x, baseline, spread) for x in current}
    if not c.flagged or (now and then and (len(ways) != 1 or ways == {0})):
        return c
    if not (now and then):
        return replace(c, reason=f"{c.reason}; {'this run' if then else 'its baseline'} has "
                       "no bandwidth probe: the machine cannot be told from the engine")
    power = exponent if isinstance(exponent, BandwidthExponent) else BandwidthExponent(exponent)
    ratio = statistics.median(now) / statistics.median(then)
    log_explained = power.value * math.log(ratio) * (1 if c.higher_is_better else -1)
    read = (f"it read {_span(now)} around this run and {_span(then)} around the "
            f"baseline's (x{ratio:.2f})")
    if log_explained * c.relative_change < 0:
        return replace(c, reason=f"{c.reason}; {MOVED_NOTE} {read}, the other way: "
                       "it explains none of this")
    rest, lo, hi = (math.expm1(math.log1p(x) - log_explained)
                    for x in (c.relative_change, c.ci_low, c.ci_high))
    shown = (f"{read}, which explains up to {pct(math.expm1(log_explained))} "
             f"({power}); the {pct(c.relative_change)} less that is "
             f"{pct(rest)} {interval_text(lo, hi)}")
    way = 1 if c.relative_change > 0 else -1
    if (lo > 0 if way > 0 else hi < 0) and way * rest >= c.min_effect * (1 - EXACT_TOLERANCE):
        return replace(c, reason=f"{c.reason}; {MOVED_NOTE} {shown}, still a {c.verdict}")
    return replace(c, verdict="inconclusive", shift=None, reason=(
        f"inconclusive: {MOVED_NOTE} {shown}, not a {c.verdict} of {c.min_effect:.0%} or more "
        f"by itself ({c.reason}); rerun in the baseline's machine state, or use the same-run A/B "
        "(both builds measured in one run)"))
