"""A flag the machine's memory moved with, judged on what the move cannot explain.

Decode follows the bandwidth probed around a run at most as bandwidth^``exponent``. Where
the probes moved (outside the judged baseline's) the way the change went, that part is
taken out of the change and its interval: a flag the rest no longer makes is withheld as
"inconclusive", one it makes stands; both reasons show the arithmetic. A change against
the move keeps its flag; one without probes says the machine cannot be told apart.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.stats.metric import interval_text, pct
from pytest_tokperf.stats.verdict import EXACT_TOLERANCE, Comparison

PROBE_SPREAD = 0.15
"""How far (relative) one probe may read from another in the same machine state."""
BANDWIDTH_EXPONENT = 1.0
"""Decode follows bandwidth at most as bandwidth^1: the bound, no per-host fit is stored."""
MOVED_NOTE = "the machine's memory moved:"


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
                  exponent: float = BANDWIDTH_EXPONENT) -> Comparison:
    """A flag withheld where every probe of ``current`` moved one way (``moved``) from
    ``baseline``'s (the runs it was judged against) and that explains it (module doc)."""
    c, now, then = comparison, _probed(current), _probed(baseline)
    ways = {moved(x, baseline, spread) for x in current}
    if not c.flagged or (now and then and (len(ways) != 1 or ways == {0})):
        return c
    if not (now and then):
        return replace(c, reason=f"{c.reason}; {'this run' if then else 'its baseline'} has "
                       "no bandwidth probe: the machine cannot be told from the engine")
    ratio = statistics.median(now) / statistics.median(then)
    log_explained = exponent * math.log(ratio) * (1 if c.higher_is_better else -1)
    read = (f"it read {_span(now)} around this run and {_span(then)} around the "
            f"baseline's (x{ratio:.2f})")
    if log_explained * c.relative_change < 0:
        return replace(c, reason=f"{c.reason}; {MOVED_NOTE} {read}, the other way: "
                       "it explains none of this")
    rest, lo, hi = (math.expm1(math.log1p(x) - log_explained)
                    for x in (c.relative_change, c.ci_low, c.ci_high))
    shown = (f"{read}, which explains up to {pct(math.expm1(log_explained))} "
             f"(bandwidth^{exponent:g}); the {pct(c.relative_change)} less that is "
             f"{pct(rest)} {interval_text(lo, hi)}")
    way = 1 if c.relative_change > 0 else -1
    if (lo > 0 if way > 0 else hi < 0) and way * rest >= c.min_effect * (1 - EXACT_TOLERANCE):
        return replace(c, reason=f"{c.reason}; {MOVED_NOTE} {shown}, still a {c.verdict}")
    return replace(c, verdict="inconclusive", shift=None, reason=(
        f"inconclusive: {MOVED_NOTE} {shown}, not a {c.verdict} of {c.min_effect:.0%} or more "
        f"by itself ({c.reason}); rerun in the baseline's machine state, or use the same-run A/B "
        "(both builds measured in one run)"))
