"""A flagged change that the machine's memory moved with: withheld, said so.

Decode reads memory: where the bandwidth probed around the current run lies outside every
baseline run's and the change goes the way it went, the flag is withheld as "inconclusive"
with both figures in the reason. A change against the bandwidth keeps its flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.stats.verdict import Comparison

PROBE_SPREAD = 0.15
"""How far (relative) one probe may read from another in the same machine state."""
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
    if current > known[-1] * (1 + spread):
        return 1
    if current < known[0] / (1 + spread):
        return -1
    return 0


def moved_together(current: Sequence[float | None], baseline: Sequence[float | None],
                   spread: float = PROBE_SPREAD) -> int:
    """The way every probe of ``current`` moved from ``baseline``'s (``moved``); 0 where
    they do not all move one way, one has no probe, or there are none."""
    ways = {moved(c, baseline, spread) for c in current}
    return ways.pop() if len(ways) == 1 else 0


def _span(probes: list[float]) -> str:
    first, last = format_bandwidth(probes[0]), format_bandwidth(probes[-1])
    return first if first == last else f"{first} to {last}"


def moved_verdict(comparison: Comparison, current: Sequence[float | None],
                  baseline: Sequence[float | None], spread: float = PROBE_SPREAD) -> Comparison:
    """``comparison`` withheld as inconclusive when it is a flag that goes the way the
    bandwidth went (``moved_together``); unchanged otherwise."""
    if comparison.verdict not in ("regression", "improvement"):
        return comparison
    way = moved_together(current, baseline, spread)
    if way == 0 or (way < 0) != (comparison.verdict == "regression"):
        return comparison
    return replace(comparison, verdict="inconclusive", shift=None, reason=(
        f"inconclusive: {MOVED_NOTE} it read {_span(_probed(current))} around this run and "
        f"{_span(_probed(baseline))} around the baseline's, and the change goes the way the "
        f"memory went ({comparison.reason}); rerun in the baseline's machine state, or use "
        f"the same-run A/B (both builds measured in one run)"))
