"""A flagged change that the machine's memory moved with: withheld, said so.

Decode reads memory, so a machine whose read bandwidth changes between runs changes every
engine's speed with it (the project's VMs sit at about 37 or 60 GB/s by the hour, and the
main job's decode follows, ~31 against ~39 tok/s). A history whose runs all met one state
cannot tell that from the engine: its spread between runs says nothing about the other
state. Each result stores the bandwidth probed around it; where the current run's lies
outside every baseline run's (by more than the probes' own spread) and the change goes the
way the bandwidth went, the flag is withheld as "inconclusive" with both figures in the
reason. A change against the bandwidth (slower on faster memory) keeps its flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.stats.verdict import Comparison

PROBE_SPREAD = 0.15
"""How far one probe may read from another in the same machine state: the project's
probes within one state span 54-65 GB/s (db/runs/releases), the two states 37 and 60."""
MOVED_NOTE = "the machine's memory moved:"


def moved(current: float | None, baseline: Sequence[float | None],
          spread: float = PROBE_SPREAD) -> int:
    """+1 (faster memory) or -1 (slower) when ``current`` lies outside every probe of
    ``baseline`` by more than ``spread``; 0 when it does not or a side has no probe."""
    known = [b for b in baseline if b is not None and b > 0]
    if current is None or current <= 0 or not known:
        return 0
    if current > max(known) * (1 + spread):
        return 1
    if current < min(known) / (1 + spread):
        return -1
    return 0


def moved_verdict(comparison: Comparison, current: float | None,
                  baseline: Sequence[float | None], spread: float = PROBE_SPREAD) -> Comparison:
    """``comparison`` withheld as inconclusive when it is a flag that goes the way the
    bandwidth went between ``baseline``'s probes and ``current``'s; unchanged otherwise."""
    if comparison.verdict not in ("regression", "improvement"):
        return comparison
    way = moved(current, baseline, spread)
    slower = comparison.verdict == "regression"
    if way == 0 or (way < 0) != slower:
        return comparison
    assert current is not None
    known = sorted(b for b in baseline if b is not None and b > 0)
    then = (format_bandwidth(known[0]) if len(known) == 1 or known[0] == known[-1] else
            f"{format_bandwidth(known[0])} to {format_bandwidth(known[-1])}")
    return replace(comparison, verdict="inconclusive", shift=None, reason=(
        f"inconclusive: {MOVED_NOTE} it read {format_bandwidth(current)} around this run and "
        f"{then} around the baseline's, and the change goes the way the memory went "
        f"({comparison.reason}); rerun in the baseline's machine state, or use the "
        f"same-run A/B (both builds measured in one run)"))
