"""A session's rows as every table and report shows them: each result with its final
and gate verdicts (``Row``), before any formatting (``table``, ``formats``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_tokperf.results import BenchResult, Ceiling, Verdict
from pytest_tokperf.stats.metric import pct

if TYPE_CHECKING:
    from pytest_tokperf.bench.gate import GateFinding
    from pytest_tokperf.bench.run import Recorded
    from pytest_tokperf.storage.store import GateVerdict


@dataclass(frozen=True, slots=True)
class Row:
    """One measured workload as the summary shows it."""

    test_id: str
    result: BenchResult
    ceiling: Ceiling | None
    verdict: Verdict
    gate: str = ""
    """The regression gate's verdict on this result (``gate_label``); empty: not judged."""


_GATE_ORDER = ("regression", "improvement", "inconclusive", "unchanged")


def gate_label(verdicts: Iterable[GateVerdict]) -> str:
    """One cell for a result's gate verdicts, worst first; empty without a baseline."""
    judged = [v for v in verdicts if v.n_baseline > 0]
    if not judged:
        return ""
    worst = min(judged, key=lambda v: _GATE_ORDER.index(v.verdict)
                if v.verdict in _GATE_ORDER else len(_GATE_ORDER))
    if worst.verdict in ("regression", "improvement") and worst.relative_change is not None \
            and math.isfinite(worst.relative_change):
        return f"{worst.verdict} {worst.metric} {pct(worst.relative_change)}"
    return worst.verdict


def session_rows(recorded: Sequence[Recorded], findings: Sequence[GateFinding]) -> list[Row]:
    """The rows of a run's table: each result with its final and gate verdicts."""
    by_result: dict[int, list[GateVerdict]] = {}
    for finding in findings:
        stored = finding.stored()
        if stored is not None:
            by_result.setdefault(stored.result_id, []).append(stored)
    return [Row(r.test_id, r.result, r.ceiling, r.verdict,
                gate_label(by_result.get(r.result_id, ()) if r.result_id is not None else ()))
            for r in recorded]
